"""Bedrock's InvokeModel as a client protocol, end to end over real sockets.

The clients are the real ones a Bedrock user has: the ``anthropic`` SDK's
``AnthropicBedrock`` and boto3's ``bedrock-runtime`` client, pointed at the
gateway with a Bedrock API key (``Authorization: Bearer``), which is the
gateway's key. boto3 is the oracle for the wire format: its event-stream
parser must read the streamed answers and its error parser must name the
Bedrock exception. Upstreams are a fake Anthropic Messages provider (the
client's body goes through) and a fake OpenAI one (translated both ways).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import boto3
import botocore.config
import botocore.exceptions
import httpx
import pytest
from botocore.eventstream import EventStreamBuffer

from humpyard.protocols.bedrock_client import PING
from tests.support.anthropic_steps import MESSAGES, bodies, message, stream_error
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Exchange, Step, ok, status

KEY, OPS = "sk-bedrock-client-key", "sk-bedrock-ops-key"
CHAT = "/v1/chat/completions"
PROFILE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
ARN = ("arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/"
       "us.anthropic.claude-sonnet-4-5")
HELLO = [{"role": "user", "content": "hello"}]


def config(claude: str, oa: str, extra: str = "") -> str:
    return f"""{extra}
[providers.claude]
base_url = "{claude}"
protocol = "anthropic"
api_key_env = "ANTH_KEY"
[providers.oa]
base_url = "{oa}"
api_key_env = "OA_KEY"
[targets.sonnet]
endpoints = [{{ provider = "claude", model = "claude-sonnet-4-5" }}]
[targets.small]
endpoints = [{{ provider = "oa", model = "small-model" }}]
[routes.claude]
targets = ["sonnet"]
[routes.cheap]
targets = ["small"]
[health]
failure_threshold = 0

[[select]]
name = "bedrock-claude"
when = {{ model = "*anthropic.claude-*" }}
route = "claude"

[keys.dev]
key_env = "DEV_KEY"
[keys.ops]
key_env = "OPS_KEY"
admin = true
"""


ENV = {"ANTH_KEY": "sk-ant-upstream", "OA_KEY": "sk-oa-upstream", "DEV_KEY": KEY,
       "OPS_KEY": OPS}


@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream(default=message("hello from claude")) as claude, \
            FakeUpstream(default=ok("hello from the small model")) as oa:
        yield claude, oa


@contextmanager
def gateway_for(ups: tuple[FakeUpstream, FakeUpstream], extra: str = "") -> Iterator[Running]:
    claude, oa = ups
    with running_gateway(config(claude.url, oa.url, extra), env=ENV, admin_key=OPS) as g:
        yield g


@pytest.fixture
def gw(ups: tuple[FakeUpstream, FakeUpstream]) -> Iterator[Running]:
    with gateway_for(ups) as g:
        yield g


def sdk(gw: Running, key: str = KEY) -> anthropic.AnthropicBedrock:
    return anthropic.AnthropicBedrock(api_key=key, aws_region="us-east-1", base_url=gw.url,
                                      max_retries=0, timeout=30)


def bedrock_runtime(url: str, key: str = KEY) -> Any:
    """boto3's bedrock-runtime client at ``url``, signing with dummy credentials (the
    gateway ignores SigV4) and sending the gateway's key as ``x-api-key`` (botocore
    sends a Bedrock API key only over HTTPS)."""
    client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=url,
                          aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="dummy",
                          config=botocore.config.Config(retries={"total_max_attempts": 1}))

    def add_key(request: Any, **_: Any) -> None:
        request.headers["x-api-key"] = key

    client.meta.events.register("before-sign.bedrock-runtime.*", add_key)
    return client


@pytest.fixture
def runtime(gw: Running) -> Iterator[Any]:
    client = bedrock_runtime(gw.url)
    yield client
    client.close()


def decisions(gw: Running, count: int = 1) -> list[dict[str, Any]]:
    gw.recorded(count)
    return list(reversed(gw.decisions()[:count]))


def invoke_body(**extra: Any) -> bytes:
    return json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100,
                       "messages": HELLO, **extra}).encode()


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The Anthropic events inside boto3's decoded event stream."""
    with contextlib.closing(response["body"]) as body:
        return [json.loads(e["chunk"]["bytes"]) for e in body]


# -- the anthropic SDK's Bedrock client --------------------------------------------------


def test_anthropic_bedrock_buffered_goes_through_to_an_anthropic_upstream(gw, ups):
    claude, _ = ups
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    with sdk(gw) as client:
        msg = client.beta.messages.create(
            model=PROFILE, max_tokens=100, system=system, messages=HELLO,
            betas=["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"])
    assert msg.content[0].text == "hello from claude"
    [sent] = bodies(claude.requests)
    assert sent["model"] == "claude-sonnet-4-5" and "stream" not in sent
    assert "anthropic_version" not in sent and "anthropic_beta" not in sent
    assert sent["system"] == system  # cache_control intact: the client's own body
    [req] = claude.requests_to(MESSAGES)
    assert req.headers["anthropic-beta"] == \
        "interleaved-thinking-2025-05-14,context-1m-2025-08-07"
    assert req.headers["x-api-key"] == "sk-ant-upstream"  # never the client's key
    [d] = decisions(gw)
    assert (d["protocol"], d["route"], d["rule"], d["key_id"], d["status"], d["stream"]) == \
        ("bedrock", "claude", "bedrock-claude", "dev", 200, False)


def test_anthropic_bedrock_streamed_relays_the_upstream_events(gw, ups):
    claude, _ = ups
    with sdk(gw) as client, client.messages.stream(model=PROFILE, max_tokens=100,
                                                   messages=HELLO) as stream:
        text = stream.get_final_text()
        final = stream.get_final_message()
    assert text == "hello from claude" and final.stop_reason == "end_turn"
    [sent] = bodies(claude.requests)
    assert sent["stream"] is True and sent["model"] == "claude-sonnet-4-5"
    [d] = decisions(gw)
    assert (d["protocol"], d["route"], d["stream"], d["status"]) == \
        ("bedrock", "claude", True, 200)


def test_anthropic_bedrock_against_an_openai_upstream_is_translated(gw, ups):
    _, oa = ups
    with sdk(gw) as client:
        msg = client.messages.create(model="cheap", max_tokens=50, messages=HELLO)
        with client.messages.stream(model="cheap", max_tokens=50, messages=HELLO) as s:
            streamed = s.get_final_text()
    assert msg.content[0].text == "hello from the small model"
    assert streamed == "hello from the small model"
    first, second = (r.json for r in oa.requests_to(CHAT))
    assert first["model"] == second["model"] == "small-model"
    assert second["stream"] is True and "anthropic_version" not in json.dumps(first)
    assert [d["route"] for d in decisions(gw, 2)] == ["cheap", "cheap"]


def test_an_upstream_rate_limit_reaches_the_sdk_as_a_rate_limit(gw, ups):
    claude, _ = ups
    claude.script(*[status(429, {"type": "error", "error": {
        "type": "rate_limit_error", "message": "slow down"}}, headers={"retry-after": "7"})])
    with sdk(gw) as client, pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model=PROFILE, max_tokens=10, messages=HELLO)
    assert caught.value.response.headers["x-amzn-errortype"] == "ThrottlingException"
    assert "message" in caught.value.response.json()


# -- boto3's bedrock-runtime client: the oracle for the wire format -----------------------


def test_boto3_invoke_model(runtime, gw, ups):
    r = runtime.invoke_model(modelId=PROFILE, body=invoke_body(),
                             contentType="application/json", accept="application/json")
    answer = json.loads(r["body"].read())
    assert answer["type"] == "message" and answer["content"][0]["text"] == "hello from claude"
    assert r["contentType"] == "application/json"


def test_boto3_reads_the_event_stream(runtime, gw, ups):
    r = runtime.invoke_model_with_response_stream(modelId=PROFILE, body=invoke_body())
    events = stream_events(r)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == "hello from claude"


def test_boto3_reads_a_translated_event_stream(runtime, gw, ups):
    r = runtime.invoke_model_with_response_stream(modelId="cheap", body=invoke_body())
    events = stream_events(r)
    assert [e["type"] for e in events][-1] == "message_stop"
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == "hello from the small model"


def test_an_arn_with_an_encoded_slash_is_one_model_id(runtime, gw, ups):
    claude, _ = ups
    r = runtime.invoke_model(modelId=ARN, body=invoke_body())
    assert json.loads(r["body"].read())["content"][0]["text"] == "hello from claude"
    [d] = decisions(gw)
    assert (d["model"], d["route"], d["rule"]) == (ARN, "claude", "bedrock-claude")


def test_errors_are_bedrock_exceptions(runtime, gw):
    with pytest.raises(runtime.exceptions.ResourceNotFoundException):
        runtime.invoke_model(modelId="no-such-route", body=invoke_body())
    with pytest.raises(runtime.exceptions.ValidationException) as caught:
        runtime.invoke_model(modelId=PROFILE, body=invoke_body(model="claude"))
    assert "model: not a field" in caught.value.response["Error"]["Message"]
    with pytest.raises(runtime.exceptions.ValidationException) as caught:
        runtime.invoke_model(modelId=PROFILE, body=invoke_body(anthropic_beta="x"))
    assert "anthropic_beta" in caught.value.response["Error"]["Message"]
    other = bedrock_runtime(gw.url, key="sk-wrong")
    with pytest.raises(other.exceptions.AccessDeniedException) as caught:
        other.invoke_model(modelId=PROFILE, body=invoke_body())
    other.close()
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 401
    assert "sk-wrong" not in json.dumps(caught.value.response, default=str)


def test_a_stream_broken_after_content_ends_with_a_bedrock_exception(runtime, gw, ups):
    claude, _ = ups
    claude.script(stream_error("overloaded_error", "Overloaded", after="partial "))
    r = runtime.invoke_model_with_response_stream(modelId=PROFILE, body=invoke_body())
    seen = []
    with contextlib.closing(r["body"]) as body, \
            pytest.raises(botocore.exceptions.EventStreamError) as caught:
        for e in body:
            seen.append(json.loads(e["chunk"]["bytes"]))
    assert caught.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert any(e.get("delta", {}).get("text") == "partial " for e in seen)


def test_a_silent_stream_is_kept_alive_with_ping_chunks(ups):
    claude, oa = ups
    oa.script(ok(["slow ", "answer"], chunk_delay=0.6))
    with gateway_for(ups, extra="stream_heartbeat_secs = 0.2") as g:
        with httpx.Client(base_url=g.url, timeout=30) as c:
            r = c.post("/model/cheap/invoke-with-response-stream", content=invoke_body(),
                       headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and PING in r.content
    assert r.headers["content-type"] == "application/vnd.amazon.eventstream"
    buf = EventStreamBuffer()
    buf.add_data(r.content)
    events = [json.loads(base64.b64decode(json.loads(m.payload)["bytes"])) for m in buf]
    assert {"type": "ping"} in events and events[-1]["type"] == "message_stop"


def test_header_and_body_betas_are_merged_in_order(gw, ups):
    """Claude Code sends ``anthropic-beta: claude-code-20250219`` as a header and its
    other betas in the body's list: the upstream gets all of them once."""
    claude, _ = ups
    body = invoke_body(anthropic_beta=["interleaved-thinking-2025-05-14",
                                       "claude-code-20250219"])
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        r = c.post(f"/model/{PROFILE}/invoke", content=body,
                   headers={"authorization": f"Bearer {KEY}",
                            "anthropic-beta": "claude-code-20250219"})
    assert r.status_code == 200
    [req] = claude.requests_to(MESSAGES)
    assert req.headers["anthropic-beta"] == \
        "claude-code-20250219,interleaved-thinking-2025-05-14"


def test_the_key_may_come_as_x_api_key(gw):
    """Claude Code sends its ANTHROPIC_CUSTOM_HEADERS on Bedrock calls too."""
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        r = c.post(f"/model/{PROFILE}/invoke", content=invoke_body(),
                   headers={"x-api-key": KEY})
        missing = c.post(f"/model/{PROFILE}/invoke", content=invoke_body())
    assert r.status_code == 200 and r.json()["content"][0]["text"] == "hello from claude"
    assert missing.status_code == 401
    assert missing.headers["x-amzn-errortype"] == "AccessDeniedException"
    assert set(missing.json()) == {"message"}


def test_other_methods_and_shapes_are_not_client_paths(gw):
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        assert c.get(f"/model/{PROFILE}/invoke").status_code == 405
        assert c.post("/model/a/b/invoke", content=invoke_body()).status_code == 404
        assert c.post("/model//invoke", content=invoke_body()).status_code == 404


class Silent(Step):
    """A stream that starts and then says nothing (a model thinking)."""

    async def respond(self, ex: Exchange) -> bool:
        await ex.start_stream()
        await asyncio.sleep(30)
        return True


def test_a_client_leaving_during_hold_back_is_recorded(ups):
    _, oa = ups
    oa.script(Silent())
    body = invoke_body()
    with gateway_for(ups) as g:
        host, port = g.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /model/cheap/invoke-with-response-stream HTTP/1.1\r\n"
                         b"host: x\r\ncontent-type: application/json\r\n"
                         b"authorization: Bearer " + KEY.encode() + b"\r\n"
                         b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert oa.wait_for_requests(1, timeout=10)
        [d] = decisions(g)
    assert (d["protocol"], d["status"], d["route"]) == ("bedrock", 499, "cheap")


# -- /v1/models: ids Claude Code's model picker keeps -------------------------------------


PICKER_CONFIG = """
[providers.claude]
base_url = "{claude}"
protocol = "anthropic"
[providers.oa]
base_url = "{oa}"
[targets.sonnet]
endpoints = [{{ provider = "claude", model = "claude-sonnet-4-5" }}]
[targets.opus]
endpoints = [{{ provider = "claude", model = "us.anthropic.claude-opus-4-1-v1:0" }}]
[targets.local]
endpoints = [{{ provider = "oa", model = "qwen3-coder" }}]
[routes.auto]
targets = ["sonnet", "opus"]
[routes.mixed]
targets = ["sonnet", "local"]
[routes.claude-fast]
targets = ["sonnet"]
[keys.dev]
key_env = "DEV_KEY"
allowed_routes = ["auto", "mixed", "claude-fast", "sonnet"]
"""


def test_routes_ending_on_claude_are_listed_for_claude_codes_picker(ups):
    claude, oa = ups
    text = PICKER_CONFIG.format(claude=claude.url, oa=oa.url)
    with running_gateway(text, env={"DEV_KEY": KEY}) as g, \
            g.client(authorization=f"Bearer {KEY}") as c:
        ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
        one = c.get("/v1/models/anthropic/auto").json()
        assert c.get("/v1/models/anthropic/mixed").status_code == 200  # it names the route
        assert c.get("/v1/models/anthropic/opus").status_code == 404  # not this key's
        with anthropic.Anthropic(base_url=g.url, api_key=KEY, max_retries=0) as client:
            msg = client.messages.create(model="anthropic/auto", max_tokens=10,
                                         messages=HELLO)
        g.recorded(1)
    # every endpoint of auto serves Claude: listed again under an id the picker keeps;
    # mixed ends on a non-Claude model too, claude-fast is kept under its own name
    assert [i for i in ids if i.startswith("anthropic/")] == ["anthropic/auto",
                                                              "anthropic/sonnet"]
    assert "auto" in ids and "mixed" in ids and "claude-fast" in ids
    assert one["id"] == "anthropic/auto" and one["humpyard"]["route"] == "auto"
    assert msg.content[0].text == "hello from claude"
    [sent] = bodies(claude.requests)
    assert sent["model"] == "claude-sonnet-4-5"


def test_model_ids_and_betas_within_limits(gw):
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        long = c.post(f"/model/{'m' * 300}/invoke", content=invoke_body(), headers=auth)
        control = c.post("/model/a%0Ab/invoke", content=invoke_body(), headers=auth)
        betas = c.post(f"/model/{PROFILE}/invoke", headers=auth,
                       content=invoke_body(anthropic_beta=["ok", "bad,comma"]))
        many = c.post(f"/model/{PROFILE}/invoke", headers=auth,
                      content=invoke_body(anthropic_beta=["b"] * 65))
    assert long.status_code == 400 and "model: at most 256" in long.json()["message"]
    assert control.status_code == 400 and "model" in control.json()["message"]
    assert betas.status_code == 400 and "anthropic_beta[1]" in betas.json()["message"]
    assert many.status_code == 400 and "at most 64" in many.json()["message"]
    assert {r.headers["x-amzn-errortype"] for r in (long, control, betas, many)} == {
        "ValidationException"}


def test_explain_plans_a_bedrock_model_id_as_the_request_was_planned(runtime, gw):
    runtime.invoke_model(modelId=PROFILE, body=invoke_body())
    [d] = decisions(gw)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        plan = c.post("/v1/route/explain", json={"model": PROFILE},
                      headers={"authorization": f"Bearer {KEY}"}).json()
    chosen = plan["selected"]
    assert (chosen["route"], chosen["rule"]) == (d["route"], d["rule"]) == (
        "claude", "bedrock-claude")


def test_scoped_and_limited_keys_hold_on_the_bedrock_path(ups):
    extra_keys = """
[keys.narrow]
key_env = "NARROW_KEY"
allowed_routes = ["cheap"]
[keys.limited]
key_env = "LIMITED_KEY"
rpm_limit = 1
"""
    claude, oa = ups
    text = config(claude.url, oa.url) + extra_keys
    env = {**ENV, "NARROW_KEY": "sk-narrow", "LIMITED_KEY": "sk-limited"}
    with running_gateway(text, env=env, admin_key=OPS) as g:
        narrow, limited = bedrock_runtime(g.url, "sk-narrow"), bedrock_runtime(g.url,
                                                                               "sk-limited")
        try:
            with pytest.raises(narrow.exceptions.AccessDeniedException):  # not its route
                narrow.invoke_model(modelId="claude", body=invoke_body())
            # the rule for Bedrock ids leads to that route: skipped for this key, and
            # the id itself names no route
            with pytest.raises(narrow.exceptions.ResourceNotFoundException):
                narrow.invoke_model(modelId=PROFILE, body=invoke_body())
            answer = json.loads(limited.invoke_model(modelId="cheap", body=invoke_body())
                                ["body"].read())
            with pytest.raises(limited.exceptions.ThrottlingException) as caught:
                limited.invoke_model(modelId="cheap", body=invoke_body())
        finally:
            narrow.close()
            limited.close()
        statuses = sorted(d["status"] for d in decisions(g, 4))
    assert answer["content"][0]["text"] == "hello from the small model"
    assert int(caught.value.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"]) >= 1
    assert statuses == [200, 403, 404, 429]
    assert not claude.requests  # no refused request reached an upstream
