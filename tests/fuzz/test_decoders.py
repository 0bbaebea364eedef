"""Property tests of everything that decodes client or operator input.

Each decoder has one allowed way to fail: the request decoders raise
``RequestError`` (a 400 naming the field), the body helpers answer 400, 413
or 431, the configuration loader raises ``ConfigError``. Any other exception
would be a 500 (or a crash at start-up) and fails the test. Inputs are drawn
two ways: arbitrary JSON, and bodies that are nearly right (the real field
names, values of any type) so the search gets past the first check.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from humpyard.config import load_config_text
from humpyard.errors import ConfigError, HumpyardError, RequestError
from humpyard.http.body import lower_headers, read_json
from humpyard.http.errors import error_response
from humpyard.protocols.anthropic import decode_request
from humpyard.protocols.openai import validate_chat

FAST = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])

# -- values -------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-10**30, max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["user", "assistant", "system", "tool", "text", "image", "tool_use",
                     "tool_result", "auto", "any", "none", "base64", "url", "r", ""]),
)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


def near(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of ``fields`` (each value from its strategy or anything at all)."""
    return st.fixed_dictionaries({}, optional={
        k: st.one_of(v, json_values) for k, v in fields.items()})


text_block = near({"type": st.just("text"), "text": st.text(max_size=8)})
image_block = near({"type": st.just("image"), "source": near({
    "type": st.sampled_from(["base64", "url", "file"]), "media_type": st.just("image/png"),
    "data": st.text(max_size=8), "url": st.text(max_size=8)})})
blocks = st.lists(st.one_of(text_block, image_block, near({
    "type": st.sampled_from(["tool_use", "tool_result", "thinking", "document"]),
    "id": st.text(max_size=4), "name": st.text(max_size=4), "input": json_values,
    "tool_use_id": st.text(max_size=4), "content": st.one_of(st.text(max_size=4),
                                                             st.lists(text_block, max_size=2)),
    "is_error": st.booleans(), "source": json_values})), max_size=3)
anthropic_bodies = near({
    "model": st.sampled_from(["r", "claude"]),
    "max_tokens": st.one_of(st.integers(min_value=-2, max_value=2_000_000),
                            st.integers(min_value=10**20, max_value=10**40)),
    "system": st.one_of(st.text(max_size=8), st.lists(text_block, max_size=2)),
    "messages": st.lists(near({"role": st.sampled_from(["user", "assistant", "system"]),
                               "content": st.one_of(st.text(max_size=8), blocks)}),
                         max_size=3),
    "temperature": st.floats(allow_nan=False), "top_p": st.floats(allow_nan=False),
    "top_k": st.integers(), "stop_sequences": st.lists(st.text(max_size=4), max_size=2),
    "stream": st.booleans(),
    "tools": st.lists(near({"name": st.text(max_size=4), "description": st.text(max_size=4),
                            "input_schema": st.just({"type": "object"}),
                            "type": st.sampled_from(["custom", "bash_20250124"])}),
                      max_size=2),
    "tool_choice": near({"type": st.sampled_from(["auto", "any", "tool", "none", "x"]),
                         "name": st.text(max_size=4),
                         "disable_parallel_tool_use": st.booleans()}),
    "metadata": near({"user_id": st.text(max_size=4)}),
    "thinking": near({"type": st.sampled_from(["enabled", "disabled"]),
                      "budget_tokens": st.integers()}),
})
chat_bodies = near({
    "model": st.sampled_from(["r", "gpt"]),
    "messages": st.lists(near({"role": st.sampled_from(["user", "assistant", "tool", "x"]),
                               "content": st.one_of(st.text(max_size=8),
                                                    st.lists(json_values, max_size=2))}),
                         max_size=3),
    "stream": st.booleans(), "tools": st.lists(json_values, max_size=2),
    "max_tokens": st.integers(), "max_completion_tokens": st.integers(), "n": st.integers(),
    "temperature": st.floats(allow_nan=False), "top_p": st.floats(allow_nan=False),
})


def json_ready(obj: Any) -> None:
    """What the gateway forwards must encode as strict, UTF-8 JSON."""
    json.dumps(obj, ensure_ascii=False, allow_nan=False).encode()


# -- request decoders -----------------------------------------------------------------


@FAST
@given(body=st.one_of(json_values, chat_bodies))
def test_validate_chat_accepts_or_names_the_field(body):
    try:
        out = validate_chat(body)
    except RequestError as e:
        assert e.status == 400 and e.message
        return
    assert out is body and isinstance(out["model"], str) and out["messages"]


@FAST
@given(body=st.one_of(json_values, anthropic_bodies))
def test_decode_request_accepts_or_names_the_field(body):
    try:
        openai_body, notes = decode_request(body)
    except RequestError as e:
        assert e.status == 400 and e.message
        return
    assert isinstance(notes, list)
    json_ready(openai_body)
    # what the Anthropic decoder produces, the OpenAI validator takes or refuses cleanly
    try:
        validate_chat(openai_body)
    except RequestError:
        pass


@FAST
@given(body=st.one_of(json_values, anthropic_bodies))
def test_count_tokens_body_never_breaks_the_estimate(body):
    from humpyard.planning.estimate import estimate_prompt_tokens
    if isinstance(body, dict):
        body = {"max_tokens": 1, **body}
    try:
        openai_body, _ = decode_request(body)
    except RequestError:
        return
    high, low = estimate_prompt_tokens(openai_body)
    assert 0 <= low <= high


# -- body helpers, through a tiny app ---------------------------------------------------


async def echo(request: Request):
    try:
        headers = lower_headers(request)
        body = await read_json(request, 4096)
    except HumpyardError as e:
        return error_response(e)
    return JSONResponse({"headers": len(headers), "type": type(body).__name__})

ECHO = Starlette(routes=[Route("/echo", echo, methods=["POST"])])


def call(app: Any, body: bytes, headers: list[tuple[bytes, bytes]],
         pieces: int) -> tuple[int, bytes]:
    """One request straight through ASGI (raw header bytes, the body in ``pieces``)."""
    size = max(1, math.ceil(len(body) / pieces)) if body else 1
    chunks = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
                for i, c in enumerate(chunks)]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/echo", "raw_path": b"/echo",
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


header_lists = st.lists(st.tuples(st.binary(min_size=1, max_size=20), st.binary(max_size=40)),
                        max_size=8)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"1e999", b"[-1e400]",
                     b'"\\ud800"', b'{"k": "\\udfff"}', b'"\\ud83d\\ude00"', b"\xff\xfe",
                     b"[" * 70 + b"]" * 70, b"9" * 5000, b"{" * 5000, b" "]),
)


@FAST
@given(body=bodies, headers=header_lists, pieces=st.integers(min_value=1, max_value=4))
def test_read_json_and_headers_answer_400_413_or_431(body, headers, pieces):
    status, out = call(ECHO, body, headers, pieces)
    assert status in (200, 400, 413, 431), out
    data = json.loads(out)
    if status != 200:
        assert data["error"]["message"]


@FAST
@given(count=st.integers(min_value=0, max_value=150), size=st.integers(0, 600))
def test_header_limits(count, size):
    headers = [(b"x-h%d" % i, b"v" * size) for i in range(count)]
    status, _ = call(ECHO, b"{}", headers, 1)
    total = sum(len(k) + len(v) for k, v in headers)
    assert status == (431 if count > 100 or total > 32 * 1024 else 200)


# -- the configuration loader -----------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "t1", "t2", "r", "auto", "x y", ""])
config_values = st.one_of(
    scalars, st.floats(), NAMES, st.sampled_from(["http://127.0.0.1:1/v1", "https://x/v1",
                                                 "ftp://x", "/health", "health"]),
    st.lists(NAMES, max_size=3), st.lists(st.floats(), max_size=3),
    st.dictionaries(NAMES, scalars, max_size=2),
)


def section(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), st.one_of(config_values, json_values),
                           max_size=len(keys))


provider = section(["base_url", "api_key_env", "headers", "max_retries", "timeout_secs",
                    "connect_timeout_secs", "health_path", "connect_retry_window_secs",
                    "quota_source", "bogus"])
endpoint = section(["provider", "model", "context_window", "tools", "vision", "price"])
target = st.one_of(section(["endpoints", "class", "strengths", "quality"]),
                   st.fixed_dictionaries({"endpoints": st.lists(endpoint, max_size=2)}))
route = section(["type", "targets", "pool", "weights", "seed", "explore", "min_samples",
                 "max_age_secs", "quality_weight", "latency_target_ms", "unknown_quality",
                 "allowed_classes", "fallback_on", "then", "efficient", "capable", "judge",
                 "mode", "confidence_threshold", "confirmations"])
rule = st.fixed_dictionaries({"route": st.one_of(NAMES, json_values)}, optional={
    "name": NAMES, "when": section(["model", "key", "profile", "tag", "header", "agent",
                                    "task", "subagent", "stream", "prompt_tokens", "tools",
                                    "images"])})
configs = st.fixed_dictionaries({}, optional={
    "providers": st.dictionaries(NAMES, st.one_of(provider, json_values), max_size=2),
    "targets": st.dictionaries(NAMES, st.one_of(target, json_values), max_size=2),
    "routes": st.dictionaries(NAMES, st.one_of(route, json_values), max_size=2),
    "select": st.lists(rule, max_size=2),
    "health": section(["failure_threshold", "cooldown_secs", "max_cooldown_secs",
                       "max_retry_after_secs", "skip_cold_targets"]),
    "router": section(["probe_interval_secs", "probe_timeout_secs"]),
    "ledger": section(["path", "decision_retention_days"]),
    "keys": st.dictionaries(NAMES, section(["key_env", "key_sha256", "allowed_routes",
                                            "manage_overrides", "budget"]), max_size=2),
    "overrides": section(["default_secs", "max_secs"]),
    "max_body_bytes": config_values, "state_refresh_ms": config_values,
    "quota_poll_secs": config_values, "reload_poll_secs": config_values,
})


VALID: dict[str, Any] = {
    "providers": {"a": {"base_url": "http://127.0.0.1:1/v1", "health_path": "/health"},
                  "b": {"base_url": "https://api.example/v1", "api_key_env": "K"}},
    "targets": {"t1": {"class": "public", "strengths": ["code"], "quality": 0.5,
                       "endpoints": [{"provider": "a", "model": "m1", "context_window": 8000}]},
                "t2": {"endpoints": [{"provider": "b", "model": "m2",
                                      "price": {"input": 1.0, "output": 2.0}}]}},
    "routes": {"r": {"targets": ["t1", "t2"], "fallback_on": ["rate_limit"]},
               "p": {"type": "fastest", "pool": {"strength": "code"},
                     "then": {"targets": ["t2"]}},
               "w": {"type": "random", "targets": ["t1", "t2"], "weights": [1.0, 0.0]}},
    "select": [{"when": {"model": "auto", "prompt_tokens": {"min": 10}}, "route": "r"}],
    "keys": {"ci": {"key_env": "K", "allowed_routes": ["r"],
                    "budget": {"usd": 1.0, "period": "day"}}},
}
SPOTS = [("providers", "a", "base_url"), ("providers", "b", "timeout_secs"),
         ("targets", "t1", "endpoints"), ("targets", "t1", "class"),
         ("targets", "t1", "strengths"), ("targets", "t2", "endpoints"),
         ("routes", "r", "targets"), ("routes", "r", "fallback_on"), ("routes", "p", "pool"),
         ("routes", "p", "then"), ("routes", "p", "type"), ("routes", "w", "weights"),
         ("routes", "w", "type"), ("keys", "ci", "allowed_routes"), ("keys", "ci", "budget"),
         ("routes", "r", "allowed_classes"), ("routes", "r", "type")]


@st.composite
def perturbed(draw: st.DrawFn) -> dict[str, Any]:
    """The valid configuration above with one to three values replaced or removed."""
    doc = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(SPOTS + [("select", 0, "route")]))
        section = doc[where[0]][where[1]]
        if draw(st.booleans()) and where[2] in section:
            del section[where[2]]
        else:
            section[where[2]] = draw(config_values)
    return doc


def toml_value(v: Any) -> str:
    """``v`` as a TOML value (inline tables and arrays; strings JSON-escaped)."""
    if v is None:
        return '""'  # TOML has no null
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_string(s: str) -> str:
    # JSON's escapes are TOML's, except that TOML takes no surrogate pairs and wants DEL escaped
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml(doc: dict[str, Any]) -> str:
    return "".join(f"{toml_string(k)} = {toml_value(v)}\n" for k, v in doc.items())


@settings(FAST, max_examples=400)
@given(doc=st.one_of(configs, perturbed()))
def test_config_loader_raises_only_config_error(doc):
    try:
        config = load_config_text(toml(doc), env={"K": "sk-x"})
    except ConfigError as e:
        assert e.message
        return
    assert config.routes is not None


@FAST
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(
    lambda b: b.decode("latin-1"))))
def test_config_loader_takes_any_text(text):
    try:
        load_config_text(text, env={})
    except ConfigError:
        pass
