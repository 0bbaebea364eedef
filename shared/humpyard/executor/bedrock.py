"""Amazon Bedrock as a provider's protocol (``protocol = "bedrock"``).

The same ``UpstreamProtocol`` contract as ``executor/upstreams.py``; the
bodies and paths are ``protocols/bedrock.py``'s, the signature is added by
the upstream client (``upstream/aws_sign.py``), frames and error types are
``upstream/bedrock.py``'s.

- A client that spoke Anthropic Messages (``Native``) and an endpoint on a
  Claude model: its own body goes to InvokeModel as ``invoke_body`` makes it
  (its betas in the body), and the answer comes back untranslated, as from
  an Anthropic upstream (``Served.native`` is ``"anthropic"``).
- Any other client on a Claude model: the chat body as Anthropic Messages
  (``encode_request``), the answer translated back as from an Anthropic upstream.
- Other models: Converse; the answer (and each ConverseStream event) is read
  as the Anthropic message (events) it amounts to, then translated for the client.

A streamed answer is an event stream: its frames are decoded as they arrive
(``_Frames``) into the Anthropic events the stream reader of an Anthropic
upstream takes (``stream.hold_back_anthropic``): hold-back, failover before
the first content, limits and usage are the same. An exception frame before the
first content fails over with its own class (a ``throttlingException`` is a
rate limit); after it, it ends the client's stream.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from humpyard.clock import Clock
from humpyard.config.spec import AnswerLimits, EndpointSpec, ProviderSpec
from humpyard.executor.calls import Answer, Request, dumps
from humpyard.executor.events import Events
from humpyard.executor.stream import HeldStream, _Broken, hold_back_anthropic
from humpyard.protocols.adapt import fit_chat, fit_message
from humpyard.protocols.anthropic_upstream import chat_usage, decode_response, encode_request
from humpyard.protocols.anthropic_upstream_stream import ChunkTranslator
from humpyard.protocols.bedrock import (
    ConverseEvents,
    converse_message,
    converse_request,
    count_body,
    invoke_body,
    invoke_path,
    is_claude,
    model_path,
    split_betas,
)
from humpyard.protocols.sse import SSEEvent
from humpyard.records import Native
from humpyard.upstream.bedrock import (
    FrameDecoder,
    classify_bedrock,
    classify_type,
    exception_status,
    stream_exception_type,
)
from humpyard.upstream.classify import Classification
from humpyard.upstream.response import UpstreamResponse

NATIVE_CLIENTS = ("anthropic", "bedrock")
"""Client protocols whose own body InvokeModel takes (Anthropic Messages, and
Bedrock's own InvokeModel format)."""


class BedrockUpstream:
    """Bedrock Runtime at ``{base_url}/model/{id}/…`` (the path is per request)."""

    name = "bedrock"
    relayed = "anthropic"  # what a native answer is, for the client's encoder
    path = "/model"  # unused: every Request names its path
    answer = "a Bedrock answer"
    count_path: str | None = None  # per model: the count Request names it

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def prepare(self, body: dict[str, Any], ep: EndpointSpec, provider: ProviderSpec,
                stream: bool, native: Native | None) -> Request:
        notes: list[str] = []
        path = invoke_path(ep.model, stream, ep.claude)
        claude = is_claude(ep.model, ep.claude)
        if native is not None and native.protocol in NATIVE_CLIENTS and claude:
            message = native.body
            if ep.adapts:
                message, notes = fit_message(message, max_output_tokens=ep.max_output_tokens,
                                             reasoning=ep.reasoning)
            out = invoke_body(message, split_betas(native.headers.get("anthropic-beta")), notes)
            return Request(dumps(out), _accept(stream), True, notes or None, path)
        if ep.adapts:
            body, notes = fit_chat(body, max_output_tokens=ep.max_output_tokens,
                                   reasoning=ep.reasoning)
        message, more = encode_request(body, model=ep.model)
        notes += more
        out = invoke_body(message, [], notes) if claude else converse_request(message, notes)
        return Request(dumps(out), _accept(stream), False, notes or None, path)

    def read(self, raw: bytes, native: bool) -> Answer | None:
        """A Messages answer (InvokeModel) or a Converse answer, as for ``prepare``."""
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        if "output" in data:  # Converse
            message = converse_message(data, "")
            if message is None:
                return None
            chat = decode_response(message, created=int(self.clock.now()))
            return Answer(chat, None, chat["usage"])
        if data.get("type") != "message" and not isinstance(data.get("content"), list):
            return None
        if native:
            return Answer(data, raw, chat_usage(data.get("usage")))
        chat = decode_response(data, created=int(self.clock.now()))
        return Answer(chat, None, chat["usage"])

    async def hold_back(self, resp: UpstreamResponse, *, native: bool, wanted_usage: bool,
                        secrets: tuple[str | None, ...], model: str,
                        limits: AnswerLimits, claude: bool | None = None) -> HeldStream:
        converse = None if is_claude(model, claude) else ConverseEvents(model)
        translator = None if native else ChunkTranslator(created=int(self.clock.now()),
                                                         model=model)
        return await hold_back_anthropic(resp, wanted_usage, secrets, translator, limits,
                                         events=_Frames(resp, limits, converse))

    def classify(self, status: int, head: bytes,
                 headers: Mapping[str, str] | None = None) -> Classification:
        return classify_bedrock(status, head, headers)

    def prepare_count(self, native: Native, ep: EndpointSpec,
                      provider: ProviderSpec) -> Request | None:
        """CountTokens for a Claude model (its InvokeModel body, base64 in JSON)."""
        if native.protocol not in NATIVE_CLIENTS or not is_claude(ep.model, ep.claude):
            return None
        notes: list[str] = []
        message = {"max_tokens": 1, **native.body}
        invoke = invoke_body(message, split_betas(native.headers.get("anthropic-beta")), notes)
        return Request(dumps(count_body(invoke)), None, True, None,
                       model_path(ep.model, "count-tokens"))


class _Frames(Events):
    """Bedrock's event stream read as Anthropic SSE events, within the answer limits.

    InvokeModelWithResponseStream's ``chunk`` frames carry an Anthropic event,
    base64 in ``{"bytes": …}``; ConverseStream's frames are turned into
    Anthropic events by ``converse``. An ``exception`` or ``error`` frame is a
    ``_Broken`` stream classified by its type."""

    __slots__ = ("frames", "converse")

    def __init__(self, resp: UpstreamResponse, limits: AnswerLimits,
                 converse: ConverseEvents | None) -> None:
        super().__init__(resp, limits)
        self.frames = FrameDecoder(limits.max_sse_event_bytes, resp.address)
        self.converse = converse

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self.count_held(chunk)
        out: list[SSEEvent] = []
        for frame in self.frames.feed(chunk):
            if frame.kind != "event":
                kind = stream_exception_type(frame.name) if frame.kind == "exception" \
                    else frame.name
                status = exception_status(kind)  # a type added later: a 502, failed over
                raise _Broken(f"upstream stream error: {kind}: {_message(frame.payload)}",
                              classify_type(kind, status, frame.payload), status=status)
            data = _object(frame.payload)
            if self.converse is not None:
                for name, event in self.converse.feed(frame.name, data):
                    out.append(_sse(name, event))
                continue
            if frame.name != "chunk":
                continue  # an event type added later
            try:
                inner = base64.b64decode(str(data.get("bytes") or ""), validate=True)
                event = json.loads(inner)
            except ValueError:
                raise _Broken("upstream sent a chunk that is not a base64 JSON event") from None
            if not isinstance(event, dict):
                raise _Broken("upstream sent a stream event that is not an object")
            out.append(_sse(str(event.get("type") or ""), event, inner))
        return out


STREAM_ACCEPT = {"accept": "application/vnd.amazon.eventstream"}


def _accept(stream: bool) -> dict[str, str] | None:
    """A streamed call asks for the event stream (a buffered one keeps ``application/json``)."""
    return STREAM_ACCEPT if stream else None


def _object(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload) if payload else {}
    except ValueError:
        raise _Broken("upstream sent an event-stream frame that is not JSON") from None
    if not isinstance(data, dict):
        raise _Broken("upstream sent an event-stream frame that is not an object")
    return data


def _message(payload: bytes) -> str:
    try:
        data = json.loads(payload)
    except ValueError:
        return payload[:200].decode("utf-8", errors="replace")
    msg = data.get("message") or data.get("Message") if isinstance(data, dict) else None
    return str(msg)[:500] if msg else "no message"


def _sse(name: str, event: dict[str, Any], raw: bytes | None = None) -> SSEEvent:
    text = raw.decode() if raw is not None else json.dumps(event, ensure_ascii=False,
                                                            separators=(",", ":"))
    if "\n" in text or "\r" in text:  # one data line per event
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    wire = f"event: {name}\ndata: {text}\n\n".encode()
    return SSEEvent(data=text, event=name, wire=wire)
