"""Amazon Bedrock as an upstream, end to end over real sockets.

The gateway runs on loopback in front of ``FakeBedrock`` (``tests/support``),
which recomputes every request's SigV4 signature with botocore and refuses a
bad one. The clients are the official ``anthropic`` and ``openai`` SDKs
(chat and Responses, as Codex sends them). Each test checks what the client
parsed and what the fake received.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from humpyard.errors import ConfigError
from tests.support.fake_bedrock import (
    ACCESS_KEY,
    SECRET_KEY,
    SESSION_TOKEN,
    FakeBedrock,
    StreamFail,
    fail,
    reply,
)
from tests.support.gateway import Running, config_from, running_gateway

CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CLAUDE_PATH = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"
NOVA = "amazon.nova-pro-v1:0"
PRICE = "{ input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 }"
HELLO = [{"role": "user", "content": "hello"}]
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
OPENAI_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": WEATHER["input_schema"]}}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The standard chain finds the fake's credentials in the environment, and
    nothing else (no profile files, no instance metadata)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def config(east: str, west: str | None = None, *, model: str = CLAUDE,
           route: str = "") -> str:
    endpoints = f'{{ provider = "east", model = "{model}", price = {PRICE} }}'
    providers = f"""
[providers.east]
protocol = "bedrock"
region = "us-east-1"
base_url = "{east}"
"""
    if west is not None:
        endpoints += f', {{ provider = "west", model = "{model}", price = {PRICE} }}'
        providers += f"""
[providers.west]
protocol = "bedrock"
region = "us-west-2"
base_url = "{west}"
"""
    return f"""{providers}
[targets.claude]
endpoints = [{endpoints}]
[routes.r]
targets = ["claude"]
{route}
[health]
failure_threshold = 0
"""


@contextmanager
def gateway(text: str) -> Iterator[Running]:
    with running_gateway(text) as g:
        yield g


@contextmanager
def claude_sdk(gw: Running) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gw.url, api_key="client-key", max_retries=0,
                             timeout=30) as client:
        yield client


@contextmanager
def openai_sdk(gw: Running) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0,
                       timeout=30) as client:
        yield client


def decisions(gw: Running, count: int = 1) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        found = gw.decisions()
        if len(found) >= count or time.monotonic() > deadline:
            return list(reversed(found[:count]))
        time.sleep(0.02)


CACHED: dict[str, Any] = {
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in the picture?",
         "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(b"\x89PNG fake").decode()}}]}],
    "thinking": {"type": "enabled", "budget_tokens": 512},
    "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}],
}
BETAS = ("claude-code-20250219,interleaved-thinking-2025-05-14,"
         "prompt-caching-scope-2026-01-05,advanced-tool-use-2025-11-20")


# -- Anthropic clients: the body goes to InvokeModel as the client sent it ------------


def test_an_anthropic_sdk_call_reaches_invoke_model_signed_with_its_betas_in_the_body():
    usage = {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 1000,
             "cache_creation_input_tokens": 200}
    with FakeBedrock() as east, gateway(config(east.url)) as gw:
        east.script(reply("A red square.", usage=usage))
        with claude_sdk(gw) as client:
            raw = client.messages.with_raw_response.create(
                model="r", **CACHED, extra_headers={"anthropic-beta": BETAS})
            msg = raw.parse()
        [got] = east.received
        d = decisions(gw)[0]
    assert got.signature_ok and got.path == f"{CLAUDE_PATH}/invoke"
    assert got.model == CLAUDE and got.operation == "invoke"
    sent = json.loads(raw.http_request.content)
    body = got.json
    assert "model" not in body and "stream" not in body
    assert body["anthropic_version"] == "bedrock-2023-05-31"
    # kept, renamed, dropped as the table in docs/upstream.md says
    assert body["anthropic_beta"] == ["interleaved-thinking-2025-05-14",
                                      "tool-search-tool-2025-10-19"]
    for key in ("system", "messages", "thinking", "tools", "max_tokens"):
        assert body[key] == sent[key], key  # cache_control, images, thinking intact
    assert got.headers["x-amz-security-token"] == SESSION_TOKEN
    assert "x-api-key" not in got.headers and "client-key" not in json.dumps(got.headers)
    assert msg.content[0].text == "A red square."
    assert msg.usage.cache_read_input_tokens == 1000
    assert d["usage"] == {"input_tokens": 1250, "output_tokens": 20,
                          "cache_read_tokens": 1000, "cache_write_tokens": 200}
    assert d["cost_usd"] == pytest.approx((50 * 3 + 1000 * 0.3 + 200 * 3.75 + 20 * 15) / 1e6)
    assert any("claude-code-20250219 dropped" in n for a in d["attempts"]
               for n in a.get("notes") or []), d["attempts"]


def test_an_anthropic_stream_is_relayed_from_the_event_stream_with_a_tool_call():
    with FakeBedrock() as east, gateway(config(east.url)) as gw:
        east.script(reply("Let me look.", tool=("get_weather", {"city": "Oslo"})))
        with claude_sdk(gw) as client, client.messages.stream(
                model="r", max_tokens=256, messages=HELLO, tools=[WEATHER]) as stream:
            texts = list(stream.text_stream)
            final = stream.get_final_message()
        [got] = east.received
    assert got.signature_ok and got.operation == "invoke-with-response-stream"
    assert "stream" not in got.json
    assert got.headers["accept"] == "application/vnd.amazon.eventstream"
    assert "".join(texts) == "Let me look."
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Oslo"}
    assert final.stop_reason == "tool_use"


def test_count_tokens_asks_bedrock_count_tokens():
    with FakeBedrock(count=1234) as east, gateway(config(east.url)) as gw:
        with claude_sdk(gw) as client:
            counted = client.messages.count_tokens(model="r", messages=HELLO)
        [got] = east.received
    assert counted.input_tokens == 1234
    assert got.signature_ok and got.operation == "count-tokens"
    inner = json.loads(base64.b64decode(got.json["input"]["invokeModel"]["body"]))
    assert inner["messages"] == HELLO and inner["anthropic_version"] == "bedrock-2023-05-31"


# -- OpenAI clients: translated to Messages (Claude) or Converse (other models) --------


@pytest.mark.parametrize("model", [CLAUDE, NOVA])
def test_an_openai_sdk_gets_buffered_and_streamed_answers(model):
    with FakeBedrock() as east, gateway(config(east.url, model=model)) as gw:
        east.script(reply("hi there", usage={"input_tokens": 5, "output_tokens": 2}),
                    reply("streamed words here"))
        with openai_sdk(gw) as client:
            done = client.chat.completions.create(model="r", messages=HELLO, max_tokens=50)
            chunks = list(client.chat.completions.create(
                model="r", messages=HELLO, max_tokens=50, stream=True,
                stream_options={"include_usage": True}))
        first, second = east.received
    claude = model == CLAUDE
    assert [first.operation, second.operation] == (
        ["invoke", "invoke-with-response-stream"] if claude else ["converse", "converse-stream"])
    assert first.signature_ok and second.signature_ok
    if claude:
        assert first.json["messages"] == [{"role": "user",
                                           "content": [{"type": "text", "text": "hello"}]}]
        assert first.json["max_tokens"] == 50
    else:
        assert first.json["messages"] == [{"role": "user", "content": [{"text": "hello"}]}]
        assert first.json["inferenceConfig"] == {"maxTokens": 50}
    assert done.choices[0].message.content == "hi there"
    assert done.usage.prompt_tokens == 5 and done.usage.completion_tokens == 2
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() == "streamed words here"
    assert chunks[-1].usage.completion_tokens == 7


@pytest.mark.parametrize("model", [CLAUDE, NOVA])
def test_an_openai_tool_round_trip(model):
    with FakeBedrock() as east, gateway(config(east.url, model=model)) as gw:
        east.script(reply("", tool=("get_weather", {"city": "Oslo"})), reply("Sunny."))
        with openai_sdk(gw) as client:
            first = client.chat.completions.create(model="r", messages=HELLO,
                                                   tools=[OPENAI_WEATHER], stream=False)
            [call] = first.choices[0].message.tool_calls
            assert (call.function.name, json.loads(call.function.arguments)) == \
                ("get_weather", {"city": "Oslo"})
            chunks = list(client.chat.completions.create(model="r", stream=True, messages=[
                *HELLO, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}],
                tools=[OPENAI_WEATHER]))
        _, second = east.received
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() \
        == "Sunny."
    turns = second.json["messages"]
    if model == CLAUDE:
        assert turns[1]["content"][-1]["type"] == "tool_use"
        assert turns[2]["content"][0] == {"type": "tool_result", "tool_use_id": call.id,
                                          "content": "sunny, 21 C"}
    else:
        assert turns[1]["content"][-1]["toolUse"]["input"] == {"city": "Oslo"}
        assert turns[2]["content"][0]["toolResult"] == {
            "toolUseId": call.id, "content": [{"text": "sunny, 21 C"}]}
        assert second.json["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"


def test_a_codex_style_responses_stream_is_served_from_bedrock():
    with FakeBedrock() as east, gateway(config(east.url)) as gw:
        east.script(reply("", tool=("get_weather", {"city": "Oslo"})))
        with openai_sdk(gw) as client, client.responses.stream(
                model="r", input="Weather in Oslo?", store=False,
                tools=[{"type": "function", "name": "get_weather", "description": "w",
                        "parameters": WEATHER["input_schema"]}]) as stream:
            final = stream.get_final_response()
        [got] = east.received
    assert got.signature_ok and got.operation == "invoke-with-response-stream"
    [call] = [o for o in final.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}


# -- failures: classes and failover ----------------------------------------------------


def test_throttling_in_one_region_fails_over_to_the_next_region():
    with FakeBedrock(region="us-east-1") as east, FakeBedrock(region="us-west-2") as west, \
            gateway(config(east.url, west.url)) as gw:
        east.script(fail(429, "ThrottlingException", "Too many requests"),
                    StreamFail("throttlingException"))
        west.script(reply("from the west"), reply("streamed from the west"))
        with claude_sdk(gw) as client:
            msg = client.messages.create(model="r", max_tokens=64, messages=HELLO)
            with client.messages.stream(model="r", max_tokens=64, messages=HELLO) as stream:
                streamed = stream.get_final_message()
        ds = decisions(gw, 2)
        assert all(r.signature_ok for r in east.received + west.received)
    assert msg.content[0].text == "from the west"
    assert streamed.content[0].text == "streamed from the west"
    for d in ds:
        assert [a["failure_class"] for a in d["attempts"]] == ["rate_limit", None], d
        assert [a["provider"] for a in d["attempts"]] == ["east", "west"]


@pytest.mark.parametrize(("step", "cls", "status"), [
    (fail(400, "ValidationException", "prompt is too long: 250000 tokens > 200000 maximum"),
     "overflow", None),
    (fail(400, "ValidationException", "messages.0.content: Field required"), "request", 400),
    (fail(403, "AccessDeniedException", "You don't have access to the model"),
     "unavailable", None),
    (fail(404, "ResourceNotFoundException", "Model not found"), "unavailable", None),
    (fail(503, "ServiceUnavailableException", "busy"), "server_error", None),
    (fail(424, "ModelNotReadyException", "warming"), "server_error", None),
    (fail(408, "ModelTimeoutException", "slow"), "timeout", None),
])
def test_bedrock_error_types_map_to_failure_classes(step, cls, status):
    with FakeBedrock() as east, FakeBedrock(region="us-west-2") as west, \
            gateway(config(east.url, west.url)) as gw:
        east.script(step)
        with claude_sdk(gw) as client:
            if status is None:  # the next region answers
                msg = client.messages.create(model="r", max_tokens=8, messages=HELLO)
                assert msg.content[0].text == "hello from bedrock"
            else:
                with pytest.raises(anthropic.BadRequestError):
                    client.messages.create(model="r", max_tokens=8, messages=HELLO)
        d = decisions(gw)[0]
    assert d["attempts"][0]["failure_class"] == cls
    assert len(d["attempts"]) == (2 if status is None else 1)


@pytest.mark.parametrize(("frame", "status", "error"), [
    ("throttlingException", 429, anthropic.RateLimitError),
    ("validationException", 400, anthropic.BadRequestError),
    ("someNewException", 502, anthropic.InternalServerError)])
def test_an_exception_frame_before_content_answers_the_status_its_type_has(
        frame, status, error):
    """Every endpoint's stream opening with an exception frame was answered 502, whatever
    the frame: a throttled stream came to the SDK as a server error (retried at once, not
    backed off), a validation error as the gateway's. It is the status Bedrock gives the
    type as an HTTP error now; a type added later stays a 502, and fails over."""
    with FakeBedrock(region="us-east-1") as east, FakeBedrock(region="us-west-2") as west, \
            gateway(config(east.url, west.url)) as gw:
        east.script(StreamFail(frame))
        west.script(StreamFail(frame))
        with claude_sdk(gw) as client, pytest.raises(error) as err, client.messages.stream(
                model="r", max_tokens=64, messages=HELLO) as stream:
            stream.get_final_message()
        d = decisions(gw)[0]
    assert err.value.status_code == status
    assert d["status"] == status
    tried = 1 if frame == "validationException" else 2  # a request's own fault stops
    assert len(d["attempts"]) == tried, d["attempts"]


def test_a_wrong_secret_is_refused_by_the_fake_and_never_served(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-right-secret-key-at-all-000000000")
    with FakeBedrock() as east, gateway(config(east.url)) as gw:
        with claude_sdk(gw) as client, pytest.raises(anthropic.APIStatusError):
            client.messages.create(model="r", max_tokens=8, messages=HELLO)
        [got] = east.received
        d = decisions(gw)[0]
    assert not got.signature_ok
    assert d["attempts"][0]["failure_class"] == "unavailable"


def test_credentials_never_reach_logs_decisions_or_errors(caplog, capfd, monkeypatch):
    caplog.set_level(logging.DEBUG)
    with FakeBedrock() as east, gateway(config(east.url)) as gw:
        east.script(fail(429, "ThrottlingException", "slow down"), reply("ok"))
        with claude_sdk(gw) as client:
            with pytest.raises(anthropic.RateLimitError) as err:
                client.messages.create(model="r", max_tokens=8, messages=HELLO)
            client.messages.create(model="r", max_tokens=8, messages=HELLO)
        ds = decisions(gw, 2)
        with gw.client() as c:
            cfg = c.get("/v1/config").text
    out, errs = capfd.readouterr()
    seen = caplog.text + out + errs + json.dumps(ds) + str(err.value) + cfg
    assert east.received and all(r.signature_ok for r in east.received)
    assert SECRET_KEY not in seen and SESSION_TOKEN not in seen


def test_credentials_an_upstream_quotes_back_are_redacted_everywhere(caplog, capfd):
    """A signature mismatch is answered with the canonical request quoted, session
    token included. It reached the client's error, the decision, the WARNING log line
    and the ledger: the echo was redacted of a provider key only, and a Bedrock
    provider has none. The secret parts of the credentials a call was signed with are
    redacted too now."""
    caplog.set_level(logging.DEBUG)
    quoted = (f"The request signature we calculated does not match. The Canonical String "
              f"for this request should have been 'POST\n/model/x/invoke\n\n"
              f"x-amz-security-token:{SESSION_TOKEN}\n' (secret {SECRET_KEY})")
    with FakeBedrock() as east, gateway(config(east.url)) as gw:
        east.script(fail(403, "InvalidSignatureException", quoted))
        with claude_sdk(gw) as client, pytest.raises(anthropic.APIStatusError) as err:
            client.messages.create(model="r", max_tokens=8, messages=HELLO)
        ds = decisions(gw)
    out, errs = capfd.readouterr()
    seen = caplog.text + out + errs + json.dumps(ds) + str(err.value)
    assert "The request signature we calculated does not match" in str(err.value)
    assert "[redacted]" in str(err.value) and "[redacted]" in json.dumps(ds)
    assert SECRET_KEY not in seen and SESSION_TOKEN not in seen


def test_a_call_is_signed_once_it_has_its_concurrency_slot():
    """A call waiting for a slot (``max_concurrent``; up to ``slot_wait_secs``, which may
    be an hour) was signed before the wait, so a long one sent a signature AWS calls
    expired (it takes five minutes). It is signed when the slot is had now: the second
    call's ``x-amz-date`` is after the first call's answer."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import datetime

    def slow(got: Any) -> Any:
        time.sleep(2.2)  # the fake's loop: the second call waits for the slot meanwhile
        return reply("first")

    with FakeBedrock() as east, gateway(config(east.url).replace(
            'region = "us-east-1"', 'region = "us-east-1"\nmax_concurrent = 1', 1)) as gw:
        east.script(slow, reply("second"))
        with claude_sdk(gw) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.messages.create, model="r", max_tokens=8,
                                messages=HELLO)
            deadline = time.monotonic() + 10
            while not east.received:  # the first holds the slot before the second asks
                assert time.monotonic() < deadline
                time.sleep(0.02)
            second = pool.submit(client.messages.create, model="r", max_tokens=8,
                                 messages=HELLO)
            assert [first.result(30).content[0].text, second.result(30).content[0].text] == \
                ["first", "second"]
        dates = [datetime.strptime(r.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
                 for r in east.received]
    assert all(r.signature_ok for r in east.received)
    assert (dates[1] - dates[0]).total_seconds() >= 2


# -- configuration ----------------------------------------------------------------------


def test_bedrock_config_errors_name_the_field():
    base = '[providers.b]\nprotocol = "bedrock"\n'
    rest = ('[targets.t]\nendpoints = [{ provider = "b", model = "m" }]\n'
            '[routes.r]\ntargets = ["t"]\n')
    with pytest.raises(ConfigError, match="api_key_env"):
        config_from(base + 'region = "us-east-1"\napi_key_env = "K"\n' + rest)
    with pytest.raises(ConfigError, match="region"):
        config_from(base + rest)
    with pytest.raises(ConfigError, match="region"):
        config_from('[providers.b]\nbase_url = "https://x"\nregion = "us-east-1"\n' + rest)
    cfg = config_from(base + 'region = "eu-central-1"\n' + rest)
    assert cfg.providers["b"].base_url == "https://bedrock-runtime.eu-central-1.amazonaws.com"
    assert cfg.providers["b"].region == "eu-central-1"


def test_an_exception_frame_after_the_first_content_ends_the_clients_stream():
    from tests.support.fake_bedrock import BreakAfterContent

    with FakeBedrock() as east, FakeBedrock(region="us-west-2") as west, \
            gateway(config(east.url, west.url)) as gw:
        east.script(BreakAfterContent())
        with claude_sdk(gw) as client, client.messages.stream(
                model="r", max_tokens=64, messages=HELLO) as stream:
            texts: list[str] = []
            with pytest.raises(anthropic.APIStatusError):
                for text in stream.text_stream:
                    texts.append(text)
        d = decisions(gw)[0]
        assert west.received == []  # nothing fails over after content went out
    assert "".join(texts) == "partial "
    assert d["outcome"] == "stream_broken", d


def test_an_anthropic_client_on_a_converse_model_gets_an_anthropic_answer():
    with FakeBedrock() as east, gateway(config(east.url, model=NOVA)) as gw:
        east.script(reply("nova says hi"), reply("nova streams"))
        with claude_sdk(gw) as client:
            msg = client.messages.create(model="r", max_tokens=32, messages=HELLO)
            with client.messages.stream(model="r", max_tokens=32, messages=HELLO) as stream:
                final = stream.get_final_message()
        ops = [r.operation for r in east.received]
    assert ops == ["converse", "converse-stream"]
    assert msg.content[0].text == "nova says hi"
    assert final.content[0].text.strip() == "nova streams"


PROFILE = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3d4e5f6"


def test_claude_behind_an_application_inference_profile_is_invoked_when_said():
    """An application inference profile's ARN names no model, so Claude behind one went
    through Converse and its client's cache_control and thinking were dropped. The
    endpoint's ``claude = true`` says what the id cannot: InvokeModel, the body as sent."""
    text = config("{url}", model=PROFILE).replace(
        f'model = "{PROFILE}"', f'model = "{PROFILE}", claude = true')
    assert "claude = true" in text
    with FakeBedrock() as east, gateway(text.replace("{url}", east.url)) as gw:
        east.script(reply("via the profile"), reply("streamed via the profile"))
        cached = [{"type": "text", "text": "big system prompt",
                   "cache_control": {"type": "ephemeral"}}]
        with claude_sdk(gw) as client:
            msg = client.messages.create(model="r", max_tokens=32, messages=HELLO,
                                         system=cached)
            with client.messages.stream(model="r", max_tokens=32, messages=HELLO,
                                        system=cached) as stream:
                final = stream.get_final_message()
        got = east.received
        ds = decisions(gw, 2)
    assert [r.operation for r in got] == ["invoke", "invoke-with-response-stream"]
    assert all(r.model == PROFILE and r.signature_ok for r in got)
    assert got[0].json["system"] == cached  # cache_control as the client sent it
    assert msg.content[0].text == "via the profile"
    assert final.content[0].text == "streamed via the profile"
    assert not [n for d in ds for n in d["notes"] if "dropped" in n]


def test_claude_is_only_for_a_bedrock_provider():
    with pytest.raises(ConfigError, match=r'targets.t.endpoints\[0\].claude: only for a '
                                          r'provider with protocol = "bedrock"'):
        config_from('[providers.o]\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[targets.t]\nendpoints = [{ provider = "o", model = "m", claude = true }]\n')


def test_a_bedrock_provider_without_botocore_says_to_install_the_aws_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "botocore" else real(name, *a))
    with pytest.raises(ConfigError, match=r"humpyard\[aws\]"):
        config_from('[providers.b]\nprotocol = "bedrock"\nregion = "us-east-1"\n'
                    '[targets.t]\nendpoints = [{ provider = "b", model = "m" }]\n'
                    '[routes.r]\ntargets = ["t"]\n')


def test_both_regions_throttled_fall_back_to_anthropics_api():
    from tests.support.anthropic_steps import message
    from tests.support.fake_upstream import FakeUpstream

    with FakeBedrock() as east, FakeBedrock(region="us-west-2") as west, \
            FakeUpstream(default=message("from anthropic")) as api:
        text = config(east.url, west.url).replace('targets = ["claude"]',
                                                  'targets = ["claude", "direct"]')
        text += f"""
[providers.anthropic]
base_url = "{api.url}"
protocol = "anthropic"
[targets.direct]
endpoints = [{{ provider = "anthropic", model = "claude-sonnet-4-5" }}]
"""
        east.script(fail(429, "ThrottlingException", "slow down"))
        west.script(fail(429, "ThrottlingException", "slow down"))
        with gateway(text) as gw, claude_sdk(gw) as client:
            msg = client.messages.create(model="r", max_tokens=8, messages=HELLO,
                                         extra_headers={"anthropic-beta": BETAS})
            d = decisions(gw)[0]
        [sent] = api.requests
    assert msg.content[0].text == "from anthropic"
    assert [a["provider"] for a in d["attempts"]] == ["east", "west", "anthropic"]
    # Anthropic's API gets the client's betas as they were, as a header
    assert sent.headers["anthropic-beta"] == BETAS and "anthropic_beta" not in sent.json
