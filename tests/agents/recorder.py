"""A recording fake provider that real coding agents can talk to.

``Recorder`` is a small threaded HTTP server on a free loopback port. It
speaks just enough of two upstream protocols for ``claude -p`` and
``codex exec`` to finish a turn, and records every request it receives
(method, path, lowercased headers, parsed JSON body) *before* answering::

    with Recorder(tool=ToolPlan("Bash", {"command": "echo hi"})) as rec:
        run_claude(rec.url, "say hi", ...)
        bodies = [r.json for r in rec.requests if r.path == "/v1/messages"]

What it answers:

- ``POST .../messages``: Anthropic Messages, streamed (SSE) or buffered per
  the body's ``stream`` flag. ``POST .../messages/count_tokens`` gives a
  count.
- ``POST .../responses``: the OpenAI Responses API as SSE (Codex always
  streams).
- ``GET .../models``: an empty list in both shapes. ``HEAD``/``GET`` of
  anything else: 200 with ``{}``.

Replies follow ``tool``: when the request offers a tool of that name and no
tool result is in the conversation yet, the answer is a call of that tool;
once a tool result is present, the answer is a text that quotes it
(``"tool said: ..."``), so a test can see the round trip complete. Without a
plan, or for side requests that offer no tools, the answer is ``text``.
With ``reasoning``, a tool call comes after a thinking block (Anthropic, with
a signature) or a reasoning item (Responses, with ``encrypted_content``), so
the agent sends it back on its next turn as it would to the real provider.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple


class Recorded(NamedTuple):
    """One request as received; header names are lowercased."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any


@dataclass(frozen=True)
class ToolPlan:
    """Call tool ``name`` with ``arguments`` when it is offered and not yet answered."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """The server; use as a context manager. ``requests`` is safe to read at any time."""

    def __init__(self, *, text: str = "hello from the fake", tool: ToolPlan | None = None,
                 reasoning: bool = False):
        self.text = text
        self.tool = tool
        self.reasoning = reasoning
        self._lock = threading.Lock()
        self._requests: list[Recorded] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._requests)

    def bodies(self, suffix: str) -> list[Any]:
        """The JSON bodies of the POSTs whose path ends with ``suffix``."""
        return [r.json for r in self.requests if r.method == "POST" and r.path.endswith(suffix)]

    def record(self, request: Recorded) -> None:
        with self._lock:
            self._requests.append(request)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler_for(rec: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _receive(self) -> Any:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items()}
            rec.record(Recorded(self.command, path, headers, body))
            return body

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._receive()
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            self._receive()
            if self.path.split("?", 1)[0].endswith("/models"):
                self._json(200, {"object": "list", "data": [], "models": []})
            else:
                self._json(200, {})

        def do_POST(self) -> None:  # noqa: N802
            body = self._receive()
            body = body if isinstance(body, dict) else {}
            path = self.path.split("?", 1)[0]
            if path.endswith("/messages/count_tokens"):
                self._json(200, {"input_tokens": 42})
            elif path.endswith("/messages"):
                reply = anthropic_reply(body, rec.text, rec.tool, rec.reasoning)
                if body.get("stream"):
                    self._sse(anthropic_events(reply))
                else:
                    self._json(200, reply)
            elif path.endswith("/responses"):
                self._sse(responses_events(body, rec.text, rec.tool, rec.reasoning))
            else:
                self._json(404, {"error": {"type": "not_found_error", "message": path}})

        def _json(self, status: int, doc: Any) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, events: list[tuple[str, dict]]) -> None:
            data = b"".join(
                f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode() for name, doc in events)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


# --- Anthropic Messages -------------------------------------------------------


def _offers(tools: Any, name: str) -> bool:
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("name") == name for t in tools)


def _anthropic_tool_result(messages: Any) -> str | None:
    """The text of the last ``tool_result`` block in the conversation, if any."""
    found = None
    for msg in messages if isinstance(messages, list) else []:
        content = msg.get("content") if isinstance(msg, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "".join(b.get("text", "") for b in inner if isinstance(b, dict))
                found = str(inner or "")
    return found


def anthropic_reply(body: dict, text: str, tool: ToolPlan | None,
                    reasoning: bool = False) -> dict:
    """The Anthropic ``message`` this fake answers ``body`` with."""
    result = _anthropic_tool_result(body.get("messages"))
    content: list[dict]
    if result is not None:
        content, stop = [{"type": "text", "text": f"tool said: {result.strip()}"}], "end_turn"
    elif tool is not None and _offers(body.get("tools"), tool.name):
        content = [{"type": "tool_use", "id": "toolu_fake_1", "name": tool.name,
                    "input": tool.arguments}]
        if reasoning:
            content.insert(0, {"type": "thinking", "thinking": "The user wants the tool.",
                               "signature": "c2lnbmF0dXJlLWZha2U="})
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": text}], "end_turn"
    return {"id": "msg_fake", "type": "message", "role": "assistant",
            "model": body.get("model", "fake"), "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


def anthropic_events(message: dict) -> list[tuple[str, dict]]:
    """``message`` as the Anthropic stream events that carry it."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1}}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start",
                                                         "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            events.append(("content_block_start", {
                "type": "content_block_start", "index": i,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            events.append(("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "thinking_delta", "thinking": block["thinking"]}}))
            delta = {"type": "signature_delta", "signature": block["signature"]}
        elif block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text",
                                                                     "text": ""}}))
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            events.append(("content_block_start", {
                "type": "content_block_start", "index": i,
                "content_block": {**block, "input": {}}}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": message["stop_reason"],
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": message["usage"]
                                               ["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


# --- OpenAI Responses ---------------------------------------------------------


def _responses_tool_output(items: Any) -> str | None:
    found = None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
            found = str(output or "")
    return found


def _offers_function(tools: Any, name: str) -> bool:
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "function" and t.get("name") == name
        for t in tools)


def responses_events(body: dict, text: str, tool: ToolPlan | None,
                     reasoning: bool = False) -> list[tuple[str, dict]]:
    """A complete Responses API event stream answering ``body``."""
    output_text = None
    items: list[dict] = []
    result = _responses_tool_output(body.get("input"))
    item: dict[str, Any]
    if result is not None:
        output_text = f"tool said: {result.strip()}"
    elif tool is not None and _offers_function(body.get("tools"), tool.name):
        item = {"type": "function_call", "id": "fc_fake_1", "call_id": "call_fake_1",
                "name": tool.name, "arguments": json.dumps(tool.arguments),
                "status": "completed"}
        if reasoning:
            items.append({"type": "reasoning", "id": "rs_fake_1", "encrypted_content":
                          "gAAAAABfakeEncryptedReasoning==",
                          "summary": [{"type": "summary_text", "text": "Use the tool."}]})
    else:
        output_text = text
    if output_text is not None:
        item = {"type": "message", "id": "msg_fake_1", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": output_text, "annotations": []}]}
    response: dict[str, Any] = {
        "id": "resp_fake", "object": "response", "created_at": 1_700_000_000,
        "status": "in_progress", "model": body.get("model", "fake"), "output": [],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }
    items.append(item)
    seq = iter(range(1_000))
    events: list[tuple[str, dict]] = [
        ("response.created", {"type": "response.created", "sequence_number": next(seq),
                              "response": response})]
    for index, one in enumerate(items):
        events.append(("response.output_item.added", {
            "type": "response.output_item.added", "sequence_number": next(seq),
            "output_index": index, "item": {**one, "status": "in_progress"}}))
        if one is item and output_text is not None:
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "sequence_number": next(seq),
                "item_id": item["id"], "output_index": index, "content_index": 0,
                "delta": output_text}))
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "sequence_number": next(seq),
            "output_index": index, "item": one}))
    done = {**response, "status": "completed", "output": items,
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}
    events.append(("response.completed", {"type": "response.completed",
                                          "sequence_number": next(seq), "response": done}))
    return events
