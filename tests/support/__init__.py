"""Test helpers (not shipped): real loopback servers and a scriptable upstream."""

from tests.support.fake_upstream import FakeUpstream, RecordedRequest
from tests.support.servers import ServerThread, closed_port_url, free_port, silent_port
from tests.support.steps import (
    Step,
    delay,
    fail_before_content,
    ok,
    reset,
    stall,
    status,
    stream_error,
    stream_then_fail,
    stream_then_stall,
    tool_call,
)

__all__ = [
    "FakeUpstream", "RecordedRequest", "ServerThread", "Step", "closed_port_url", "delay",
    "fail_before_content", "free_port", "ok", "reset", "stall", "status", "stream_error",
    "silent_port", "stream_then_fail", "stream_then_stall", "tool_call",
]
