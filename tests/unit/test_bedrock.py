"""Bedrock's pieces one by one: the test's event-stream frames against botocore's
decoder, the frame decoder's limits, error types → failure classes, the beta
table, the paths, and credentials refreshed before they expire."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json

import pytest
from botocore.credentials import RefreshableCredentials
from botocore.eventstream import EventStreamBuffer

from humpyard.protocols.bedrock import (
    ConverseEvents,
    bedrock_betas,
    converse_request,
    invoke_body,
    invoke_path,
    is_anthropic,
)
from humpyard.upstream.aws_sign import AwsSigner, NoCredentials
from humpyard.upstream.bedrock import FrameDecoder, classify_bedrock
from humpyard.upstream.classify import FailureClass
from humpyard.upstream.errors import EventTooLarge, ProtocolViolation
from tests.support.fake_bedrock import chunk_frame, event_frame, exception_frame, frame

# -- frames --------------------------------------------------------------------------------


def test_the_fakes_frames_are_what_botocore_decodes():
    raw = chunk_frame({"type": "message_stop"}) + exception_frame("throttlingException", "slow")
    buf = EventStreamBuffer()
    buf.add_data(raw)
    chunk, exc = list(buf)
    assert chunk.headers == {":event-type": "chunk", ":content-type": "application/json",
                             ":message-type": "event"}
    inner = json.loads(base64.b64decode(json.loads(chunk.payload)["bytes"]))
    assert inner == {"type": "message_stop"}
    assert exc.headers[":exception-type"] == "throttlingException"
    assert json.loads(exc.payload) == {"message": "slow"}


def test_frames_are_decoded_across_any_split_of_the_bytes():
    raw = b"".join(event_frame("messageStart", {"role": "assistant"}) for _ in range(3))
    for size in (1, 5, 16, 64):
        dec = FrameDecoder(1 << 16)
        got = [f for i in range(0, len(raw), size) for f in dec.feed(raw[i:i + size])]
        assert [(f.kind, f.name, json.loads(f.payload)) for f in got] == \
            [("event", "messageStart", {"role": "assistant"})] * 3


def test_a_frame_over_the_limit_fails_as_soon_as_its_prelude_says_so():
    big = event_frame("chunk", {"bytes": "x" * 5000})
    dec = FrameDecoder(2048, "127.0.0.1:9")
    with pytest.raises(EventTooLarge):
        dec.feed(big[:12])  # nothing of its payload read yet


def test_a_frame_with_a_bad_crc_is_a_protocol_violation():
    raw = bytearray(frame({":message-type": "event", ":event-type": "x"}, b"{}"))
    raw[-1] ^= 0xFF
    with pytest.raises(ProtocolViolation):
        FrameDecoder(1 << 16).feed(bytes(raw))


# -- errors ----------------------------------------------------------------------------------


def _typed(status: int, kind: str, message: str = "m") -> FailureClass:
    head = json.dumps({"message": message}).encode()
    return classify_bedrock(status, head, {"x-amzn-errortype": f"{kind}:http://x/"}).failure_class


def test_error_types_map_to_classes_by_type_not_status():
    assert _typed(429, "ThrottlingException") == FailureClass.RATE_LIMIT
    assert _typed(400, "ThrottlingException") == FailureClass.RATE_LIMIT  # the type decides
    assert _typed(503, "ServiceUnavailableException") == FailureClass.SERVER_ERROR
    assert _typed(429, "ModelNotReadyException") == FailureClass.SERVER_ERROR
    assert _typed(408, "ModelTimeoutException") == FailureClass.TIMEOUT
    assert _typed(403, "AccessDeniedException") == FailureClass.UNAVAILABLE
    assert _typed(404, "ResourceNotFoundException") == FailureClass.UNAVAILABLE
    assert _typed(400, "ValidationException", "Input is too long for requested model.") \
        == FailureClass.OVERFLOW
    assert _typed(400, "ValidationException", "extraneous key [foo]") == FailureClass.REQUEST
    # the body's __type when the header is missing
    body = json.dumps({"__type": "com.amazon.coral#ThrottlingException"}).encode()
    assert classify_bedrock(400, body, {}).failure_class == FailureClass.RATE_LIMIT
    # no type at all: the status, as for any upstream
    assert classify_bedrock(502, b"", {}).failure_class == FailureClass.SERVER_ERROR


# -- bodies and paths --------------------------------------------------------------------------


def test_model_ids_profiles_and_arns_are_encoded_into_the_path():
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x"
    assert invoke_path(arn, True) == (
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
        "us.anthropic.claude-x/invoke-with-response-stream")
    assert invoke_path("global.anthropic.claude-opus-4-5-v1:0", False).endswith(
        "v1%3A0/invoke")
    assert invoke_path("amazon.nova-lite-v1:0", False).endswith("/converse")
    assert is_anthropic("us.anthropic.claude-3-5-haiku") and not is_anthropic("meta.llama3")


def test_betas_are_kept_renamed_or_dropped_with_a_note():
    notes: list[str] = []
    assert bedrock_betas(["context-1m-2025-08-07", "oauth-2025-04-20",
                          "advanced-tool-use-2025-11-20", "tool-search-tool-2025-10-19"],
                         notes) == ["context-1m-2025-08-07", "tool-search-tool-2025-10-19"]
    assert notes == ["anthropic-beta oauth-2025-04-20 dropped: Bedrock does not take it"]


def test_invoke_body_drops_model_and_stream_and_keeps_everything_else():
    body = {"model": "m", "stream": True, "max_tokens": 5, "messages": [],
            "anthropic_beta": ["output-128k-2025-02-19"], "metadata": {"user_id": "u"}}
    out = invoke_body(body, ["context-1m-2025-08-07"], [])
    assert out == {"max_tokens": 5, "messages": [], "metadata": {"user_id": "u"},
                   "anthropic_version": "bedrock-2023-05-31",
                   "anthropic_beta": ["output-128k-2025-02-19", "context-1m-2025-08-07"]}


def test_converse_request_and_stream_events():
    notes: list[str] = []
    out = converse_request({"max_tokens": 9, "system": "be brief", "temperature": 0.5,
                            "messages": [{"role": "user", "content": "hi"}],
                            "tools": [{"name": "t", "input_schema": {"type": "object"}}],
                            "tool_choice": {"type": "any"}}, notes)
    assert out == {"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                   "system": [{"text": "be brief"}],
                   "inferenceConfig": {"maxTokens": 9, "temperature": 0.5},
                   "toolConfig": {"tools": [{"toolSpec": {
                       "name": "t", "description": "t", "inputSchema": {"json": {
                           "type": "object"}}}}], "toolChoice": {"any": {}}}}
    ev = ConverseEvents("nova")
    names = [n for kind, data in [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "a"}}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("messageStop", {"stopReason": "end_turn"}),
        ("metadata", {"usage": {"inputTokens": 3, "outputTokens": 1}})]
        for n, _ in ev.feed(kind, data)]
    assert names == ["message_start", "content_block_start", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]


# -- credentials ----------------------------------------------------------------------------------


def test_refreshable_credentials_are_refreshed_before_they_expire():
    calls: list[int] = []
    now = datetime.datetime.now(datetime.UTC)

    def refresh() -> dict[str, str]:
        calls.append(1)
        # the first set expires in 5 s (inside botocore's refresh window), later ones in 1 h
        expiry = now + datetime.timedelta(seconds=5 if len(calls) == 1 else 3600)
        return {"access_key": f"AKIA{len(calls)}", "secret_key": "s", "token": "t",
                "expiry_time": expiry.isoformat()}

    creds = RefreshableCredentials.create_from_metadata(refresh(), refresh, "test")
    signer = AwsSigner(credentials=creds)

    async def sign() -> str:
        headers = await signer.sign("us-east-1", "https://h/model/m/invoke", "h", b"{}", {})
        return dict(headers)["authorization"]

    first = asyncio.run(sign())
    assert "Credential=AKIA2/" in first  # the expiring set was replaced before signing
    assert "Credential=AKIA2/" in asyncio.run(sign()) and len(calls) == 2


def test_no_credentials_is_an_unavailable_failure_naming_no_secret():
    class Empty:
        def get_frozen_credentials(self) -> None:
            raise RuntimeError("secret-ish detail")

    with pytest.raises(NoCredentials) as err:
        asyncio.run(AwsSigner(credentials=Empty()).frozen())
    assert err.value.failure_class == "unavailable" and "secret" not in str(err.value)


# -- prices --------------------------------------------------------------------------------------


def test_bedrock_endpoints_and_inference_profiles_are_found_in_the_catalogue():
    from humpyard.prices.catalog import parse_catalog

    catalog = parse_catalog({"amazon-bedrock": {"models": {
        "anthropic.claude-sonnet-4-5-20250929-v1:0": {
            "cost": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}}}})
    provider, how = catalog.find_provider("https://bedrock-runtime.eu-west-1.amazonaws.com",
                                          None)
    assert provider is not None and provider.id == "amazon-bedrock", how
    for name in ("us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                 "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
                 "anthropic.claude-sonnet-4-5-20250929-v1:0"):
        model = provider.model(name)
        assert model is not None and (model.price_input, model.price_output) == (3, 15)
    assert provider.model("us.meta.llama-x") is None
