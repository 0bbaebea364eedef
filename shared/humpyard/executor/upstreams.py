"""How the executor speaks to one provider: its upstream protocol.

Every provider speaks one protocol (``[providers.<name>] protocol``, default
``openai``); ``upstream_protocols(clock)[provider.protocol]`` is the
``UpstreamProtocol`` the executor (``walk.py``) uses for each attempt at it:

- ``path``: where the request goes, after ``base_url``;
- ``prepare``: the body to send and any per-request headers, fitted to the
  endpoint (``max_output_tokens``, ``reasoning``), with notes on what the
  fitting or the translation changed or dropped;
- ``read``: a buffered 200 answer → the ``Served`` body, its bytes when they
  can go to the client as they are, and its usage (OpenAI-shaped);
- ``hold_back``: a streamed 200 → the held events and the rest (``stream.py``);
- ``classify``: an error answer → its failure class (``upstream/classify.py``);
- ``count_path`` and ``prepare_count``: where and how the provider counts a
  prompt's tokens itself (None when it cannot: ``executor/count.py``).

``OpenAIUpstream`` sends the gateway's own chat body with the endpoint's
model. ``AnthropicUpstream`` translates it to Anthropic Messages and back
(``protocols/anthropic_upstream*``) — unless the client spoke Anthropic
Messages itself (``Native``): then the client's body goes through with only
the model replaced (its ``cache_control``, thinking and documents intact),
with the client's ``anthropic-version`` and ``anthropic-beta``, and the answer
comes back untranslated (``Served.native``). docs/clients.md, "Anthropic
upstreams".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from humpyard.clock import Clock
from humpyard.config.spec import AnswerLimits, EndpointSpec, ProviderSpec
from humpyard.executor.bedrock import BedrockUpstream
from humpyard.executor.calls import Answer, Request, dumps
from humpyard.executor.stream import HeldStream, hold_back, hold_back_anthropic
from humpyard.protocols.adapt import fit_chat, fit_message
from humpyard.protocols.anthropic_errors import anthropic_error_facts
from humpyard.protocols.anthropic_upstream import chat_usage, decode_response, encode_request
from humpyard.protocols.anthropic_upstream_stream import ChunkTranslator
from humpyard.records import Native
from humpyard.upstream.classify import Classification, classify_status
from humpyard.upstream.response import UpstreamResponse

_dumps = dumps


class OpenAIUpstream:
    """OpenAI chat completions at ``{base_url}/chat/completions`` (the default)."""

    name = "openai"
    relayed = "openai"  # what a native answer is, for the client's encoder
    path = "/chat/completions"
    answer = "a chat completion"  # what a 200's body must be
    count_path: str | None = None

    def prepare(self, body: dict[str, Any], ep: EndpointSpec, provider: ProviderSpec,
                stream: bool, native: Native | None) -> Request:
        """The chat body with the endpoint's model (and ``include_usage`` when streamed)."""
        notes = None
        if ep.adapts:
            body, notes = fit_chat(body, max_output_tokens=ep.max_output_tokens,
                                   reasoning=ep.reasoning)
        out = dict(body)
        out["model"] = ep.model
        if stream:
            opts = dict(out.get("stream_options") or {})
            opts["include_usage"] = True
            out["stream_options"] = opts
        return Request(_dumps(out), None, False, notes or None)

    def read(self, raw: bytes, native: bool) -> Answer | None:
        """A chat completion (relayed byte for byte), or None when it is not one."""
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or "choices" not in data:
            return None
        usage = data.get("usage")
        return Answer(data, raw, usage if isinstance(usage, dict) else {})

    async def hold_back(self, resp: UpstreamResponse, *, native: bool, wanted_usage: bool,
                        secrets: tuple[str | None, ...], model: str,
                        limits: AnswerLimits, claude: bool | None = None) -> HeldStream:
        return await hold_back(resp, wanted_usage, secrets=secrets, limits=limits)

    def classify(self, status: int, head: bytes,
                 headers: Mapping[str, str] | None = None) -> Classification:
        return classify_status(status, head)

    def prepare_count(self, native: Native, ep: EndpointSpec,
                      provider: ProviderSpec) -> Request | None:
        """OpenAI chat completions has no token counting endpoint."""
        return None


FORWARDED = ("anthropic-version", "anthropic-beta")
"""The headers of a ``/v1/messages`` client that go on to an Anthropic upstream."""


def _printable(value: str) -> bool:
    return value.isascii() and value.isprintable()


class AnthropicUpstream:
    """Anthropic Messages at ``{base_url}/messages``, the key as ``x-api-key``."""

    name = "anthropic"
    relayed = "anthropic"
    path = "/messages"
    answer = "a message"
    count_path: str | None = "/messages/count_tokens"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def prepare(self, body: dict[str, Any], ep: EndpointSpec, provider: ProviderSpec,
                stream: bool, native: Native | None) -> Request:
        """The client's own Messages body with the endpoint's model when it spoke
        Anthropic Messages, else ``encode_request`` of the chat body."""
        notes: list[str] = []
        if native is not None and native.protocol == self.name:
            message = native.body
            if ep.adapts:
                message, notes = fit_message(message, max_output_tokens=ep.max_output_tokens,
                                             reasoning=ep.reasoning)
            out = {**message, "model": ep.model}
            return Request(_dumps(_streamed(out, stream)), self._forward(native, provider),
                           True, notes or None)
        if ep.adapts:
            body, notes = fit_chat(body, max_output_tokens=ep.max_output_tokens,
                                   reasoning=ep.reasoning)
        out, more = encode_request(body, model=ep.model)
        return Request(_dumps(_streamed(out, stream)), None, False, (notes + more) or None)

    @staticmethod
    def _forward(native: Native, provider: ProviderSpec) -> dict[str, str] | None:
        """The client's ``anthropic-version`` and ``anthropic-beta``; betas the provider
        sends as a static header come first, the client's after them."""
        out: dict[str, str] = {}
        for name in FORWARDED:
            value = native.headers.get(name)
            if value and _printable(value):
                out[name] = value
        beta = out.get("anthropic-beta")
        static = next((v for k, v in provider.headers if k.lower() == "anthropic-beta"), None)
        if beta and static:
            names = [b.strip() for b in f"{static},{beta}".split(",") if b.strip()]
            out["anthropic-beta"] = ",".join(dict.fromkeys(names))
        return out or None

    def read(self, raw: bytes, native: bool) -> Answer | None:
        """A Messages answer: as it came for a native call, else as a chat completion."""
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or "error" in data or not (
                data.get("type") == "message" or isinstance(data.get("content"), list)):
            return None
        if native:
            return Answer(data, raw, chat_usage(data.get("usage")))
        chat = decode_response(data, created=int(self.clock.now()))
        return Answer(chat, None, chat["usage"])

    async def hold_back(self, resp: UpstreamResponse, *, native: bool, wanted_usage: bool,
                        secrets: tuple[str | None, ...], model: str,
                        limits: AnswerLimits, claude: bool | None = None) -> HeldStream:
        translator = None if native else ChunkTranslator(created=int(self.clock.now()),
                                                         model=model)
        return await hold_back_anthropic(resp, wanted_usage, secrets, translator, limits)

    def classify(self, status: int, head: bytes,
                 headers: Mapping[str, str] | None = None) -> Classification:
        return classify_status(*anthropic_error_facts(status, head))

    def prepare_count(self, native: Native, ep: EndpointSpec,
                      provider: ProviderSpec) -> Request | None:
        """A count_tokens body from an Anthropic client, with the endpoint's model."""
        if native.protocol != self.name:
            return None
        return Request(_dumps({**native.body, "model": ep.model}),
                       self._forward(native, provider), True, None)


def _streamed(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    if stream:
        body["stream"] = True
    else:
        body.pop("stream", None)
    return body


UpstreamProtocol = OpenAIUpstream | AnthropicUpstream | BedrockUpstream


def upstream_protocols(clock: Clock) -> Mapping[str, UpstreamProtocol]:
    """Each ``protocol`` a provider may name → what speaks it (Bedrock:
    ``executor/bedrock.py``)."""
    return {"openai": OpenAIUpstream(), "anthropic": AnthropicUpstream(clock),
            "bedrock": BedrockUpstream(clock)}
