"""The simulated provider: OpenAI SDK compatibility, profiles, health toggle.

The app runs in-process through Starlette's TestClient (also as the OpenAI
SDK's http_client); a FakeClock absorbs every simulated delay.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from starlette.testclient import TestClient

from humpyard.clock import FakeClock
from humpyard.protocols.anthropic_request import decode_request as anthropic_decode
from humpyard.protocols.responses_request import decode_request as responses_decode
from humpyard.simulate import PROFILES, create_simulator_app, draw_outcome
from humpyard.simulate.agent import Call, Task, agent_call, parse_task
from humpyard.simulate.wire import split_text

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city", "unit"]},
}}
HELLO = [{"role": "user", "content": "hello simulator"}]


def sim(profile: str = "ok", **kw) -> tuple[TestClient, FakeClock]:
    clock = FakeClock()
    return TestClient(create_simulator_app(profile, clock=clock, **kw)), clock


@pytest.fixture
def sdk() -> Iterator[openai.OpenAI]:
    app = create_simulator_app("ok", clock=FakeClock())
    with TestClient(app) as http, openai.OpenAI(
        base_url="http://sim.test/v1", api_key="unused", http_client=http, max_retries=0,
    ) as client:
        yield client


def test_sdk_buffered_answer_echoes_the_last_user_message(sdk: openai.OpenAI) -> None:
    out = sdk.chat.completions.create(model="m1", messages=HELLO)
    assert out.choices[0].message.content == "[sim:m1] you said: hello simulator"
    assert out.choices[0].finish_reason == "stop"
    assert out.model == "m1"
    messages_bytes = len(json.dumps(HELLO, separators=(",", ":")))
    assert out.usage is not None
    assert out.usage.prompt_tokens == messages_bytes // 4
    assert out.usage.completion_tokens == 5
    assert out.usage.total_tokens == out.usage.prompt_tokens + 5


def test_sdk_stream_with_usage_has_openai_chunk_sequence(sdk: openai.OpenAI) -> None:
    with sdk.chat.completions.create(model="m1", messages=HELLO, stream=True,
                                     stream_options={"include_usage": True}) as stream:
        chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    contents = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert len(contents) >= 2
    assert "".join(contents) == "[sim:m1] you said: hello simulator"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_include_usage_sends_no_usage_and_ends_with_done() -> None:
    client, _ = sim()
    with client:
        r = client.post("/v1/chat/completions",
                        json={"model": "m", "messages": HELLO, "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in r.text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert all("usage" not in json.loads(e) for e in events[:-1])


def test_sdk_tool_call_buffered(sdk: openai.OpenAI) -> None:
    out = sdk.chat.completions.create(
        model="m1", tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "Please USE A TOOL for Paris"}])
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "sim", "unit": "c"}


def test_sdk_tool_call_streamed_in_fragments(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model="m1", tools=[WEATHER_TOOL], tool_choice="required", stream=True,
        messages=[{"role": "user", "content": "weather?"}])
    with stream:
        chunks = list(stream)
    first = chunks[0].choices[0].delta.tool_calls[0]
    assert first.id and (first.function.name, first.function.arguments) == ("get_weather", "")
    fragments = [c.choices[0].delta.tool_calls[0].function.arguments
                 for c in chunks[1:] if c.choices and c.choices[0].delta.tool_calls]
    assert len(fragments) >= 2
    assert json.loads("".join(fragments)) == {"city": "sim", "unit": "c"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("tool_choice, text, expect_call", [
    (None, "what is the weather", False),
    ("auto", "use a tool please", True),
    ("none", "use a tool please", False),
    ("required", "anything", True),
])
def test_when_a_tool_is_called(tool_choice: str | None, text: str, expect_call: bool) -> None:
    body: dict = {"model": "m", "tools": [WEATHER_TOOL],
                  "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    if tool_choice:
        body["tool_choice"] = tool_choice
    client, _ = sim()
    with client:
        message = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert ("tool_calls" in message) is expect_call


def test_after_a_tool_result_the_answer_is_text() -> None:
    messages = [{"role": "user", "content": "use a tool"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"}]
    client, _ = sim(model_name="fixed")
    with client:
        out = client.post("/v1/chat/completions", json={
            "model": "ignored", "tools": [WEATHER_TOOL], "messages": messages}).json()
    assert out["model"] == "fixed"
    assert out["choices"][0]["message"]["content"] == "[sim:fixed] tool result: sunny, 21C"


def test_long_user_text_is_truncated_in_the_echo() -> None:
    client, _ = sim()
    with client:
        out = client.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "word " * 100}]}).json()
    text = out["choices"][0]["message"]["content"]
    assert text.endswith("...") and len(text) < 120


def test_flaky_draws_the_documented_mix() -> None:
    rng = random.Random(1234)
    kinds = Counter(draw_outcome("flaky", rng).kind for _ in range(10_000))
    assert kinds["server_error"] == pytest.approx(1500, abs=150)
    assert kinds["rate_limited"] == pytest.approx(1000, abs=120)
    assert kinds["slow"] == pytest.approx(1500, abs=150)
    assert kinds["ok"] == pytest.approx(6000, abs=200)


def test_flaky_over_http_follows_the_seeded_sequence() -> None:
    rng = random.Random(7)
    expected = [draw_outcome("flaky", rng) for _ in range(200)]
    client, clock = sim("flaky", seed=7)
    with client:
        responses = [client.post("/v1/chat/completions", json={"model": "m", "messages": HELLO})
                     for _ in range(200)]
        stats = client.get("/_sim/stats").json()
    status_of = {"ok": 200, "slow": 200, "server_error": 500, "rate_limited": 429}
    assert [r.status_code for r in responses] == [status_of[o.kind] for o in expected]
    assert [r.headers["x-sim-outcome"] for r in responses] == [o.kind for o in expected]
    assert clock.slept == [o.delay_s for o in expected if o.kind == "slow"]
    assert all(0.3 <= s <= 1.5 for s in clock.slept)
    assert stats["outcomes"] == dict(Counter(o.kind for o in expected))

    err = next(r for r in responses if r.status_code == 500)
    assert err.json() == {"error": {"message": "simulated upstream failure",
                                    "type": "server_error"}}
    limited = next(r for r in responses if r.status_code == 429)
    assert limited.headers["retry-after"] == "3"
    assert limited.json()["error"]["message"] == "Rate limit reached. Please try again in 2.5s."


def test_same_seed_same_outcomes_and_rng_may_be_injected() -> None:
    a, _ = sim("flaky", seed=3)
    b, _ = sim("flaky", rng=random.Random(3))
    body = {"model": "m", "messages": HELLO}
    with a, b:
        codes_a = [a.post("/v1/chat/completions", json=body).status_code for _ in range(40)]
        codes_b = [b.post("/v1/chat/completions", json=body).status_code for _ in range(40)]
    assert codes_a == codes_b


def test_down_is_always_503_and_slow_waits_200_to_800_ms() -> None:
    down, _ = sim("down")
    slow, clock = sim("slow", seed=1)
    body = {"model": "m", "messages": HELLO}
    with down, slow:
        assert {down.post("/v1/chat/completions", json=body).status_code
                for _ in range(5)} == {503}
        assert {slow.post("/v1/chat/completions", json=body).status_code
                for _ in range(5)} == {200}
    assert len(clock.slept) == 5 and all(0.2 <= s <= 0.8 for s in clock.slept)


def test_delay_ms_applies_to_every_answer_including_errors() -> None:
    client, clock = sim("down", delay_ms=250)
    with client:
        client.post("/v1/chat/completions", json={"model": "m", "messages": HELLO})
    assert clock.slept == [0.25]


def test_zero_profile_serves_cached_bytes_with_live_token_counts() -> None:
    client, clock = sim("zero")
    short = {"model": "z", "messages": HELLO}
    long = {"model": "z", "messages": [{"role": "user", "content": "x" * 400}]}
    with client:
        a = client.post("/v1/chat/completions", json=short).json()
        b = client.post("/v1/chat/completions", json=long).json()
        streamed = client.post("/v1/chat/completions", json={
            **short, "stream": True, "stream_options": {"include_usage": True}}).text
    assert a["choices"] == b["choices"]
    assert a["choices"][0]["message"]["content"] == "[sim:z] ok"
    assert b["usage"]["prompt_tokens"] > a["usage"]["prompt_tokens"] + 90
    assert b["usage"]["total_tokens"] == b["usage"]["prompt_tokens"] + 2
    events = [json.loads(line[6:]) for line in streamed.split("\n")
              if line.startswith("data: {")]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 2
    assert clock.slept == []


def test_health_toggle_and_stats() -> None:
    client, _ = sim()
    with client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.post("/_sim/health", json={"ready": False}).status_code == 200
        assert client.get("/health").status_code == 503
        assert client.post("/v1/chat/completions",
                           json={"model": "m", "messages": HELLO}).status_code == 200
        client.post("/_sim/health", json={"ready": True})
        assert client.get("/health").status_code == 200
        assert client.post("/_sim/health", json={"ready": "no"}).status_code == 400
        stats = client.get("/_sim/stats").json()
    assert stats["requests"] == {"/health": 3, "/_sim/health": 3,
                                 "/v1/chat/completions": 1, "/_sim/stats": 1}


def test_models_lists_the_model_name() -> None:
    client, _ = sim(model_name="sim-a")
    with client:
        data = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["sim-a"]


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"model": "m"}', b'{"messages": []}',
                                  b'{"messages": ["hi"]}'])
def test_malformed_requests_are_400(body: bytes) -> None:
    client, _ = sim("down")
    with client:
        r = client.post("/v1/chat/completions", content=body)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown simulator profile"):
        create_simulator_app("sometimes")
    with pytest.raises(ValueError, match="seed or rng"):
        create_simulator_app("flaky", seed=1, rng=random.Random(1))
    assert set(PROFILES) == {"ok", "slow", "flaky", "down", "zero"}


@pytest.mark.parametrize("text", ["", "a", "hello", "{}", "one two", "a  b c d e f g h i ",
                                  "[sim:m] you said: hello there"])
def test_split_text_pieces_join_back(text: str) -> None:
    pieces = split_text(text)
    assert "".join(pieces) == text
    assert len(pieces) <= 4
    assert all(pieces) or text == ""


# -- a coding agent's tools (simulate/agent.py) ------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ASK = "create hello.txt containing hi"


def _fixture(agent: str, name: str) -> dict:
    return json.loads((FIXTURES / agent / name).read_text())["body"]


def _with_prompt(chat: dict, prompt: str) -> dict:
    """``chat`` with its last user message's text replaced by ``prompt``."""
    last = next(m for m in reversed(chat["messages"]) if m["role"] == "user")
    last["content"] = prompt
    return chat


def claude_code_chat(prompt: str = ASK, cwd: str | None = "/home/dev/project") -> dict:
    """Claude Code 2.1.197's recorded request, decoded as the gateway hands it on."""
    body = _fixture("claude_code", "tool_round_trip.1.json")
    body["messages"][0]["content"][1]["text"] = prompt
    if cwd:  # the recording elides the system prompt's <env> block, which names it
        body["system"].append({"type": "text", "text": f"<env>\nPrimary working directory: "
                                                       f"{cwd}\n</env>"})
    return anthropic_decode(body)[0]


def codex_chat(prompt: str = ASK, *, patch_tool: bool = False) -> dict:
    """Codex CLI's recorded Responses request, decoded as the gateway hands it on;
    ``patch_tool`` adds the free-form ``apply_patch`` Codex sends for models it knows."""
    body = _fixture("codex", "tool_round_trip.1.json")
    body["input"][-1]["content"][0]["text"] = prompt
    if patch_tool:
        body["tools"].insert(0, {"type": "custom", "name": "apply_patch",
                                 "description": "Edit files with a patch",
                                 "format": {"type": "grammar", "syntax": "lark",
                                            "definition": "start: begin_patch hunk+ end_patch"}})
    return responses_decode(body)[0]


# OpenCode's tools as its OpenAI-compatible provider sends them (write, bash, edit, read).
OPENCODE_TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "required": ["command", "description"], "properties": {
            "command": {"type": "string"}, "timeout": {"type": "number"},
            "workdir": {"type": "string"}, "description": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "edit", "parameters": {
        "type": "object", "required": ["filePath", "oldString", "newString"], "properties": {
            "filePath": {"type": "string"}, "oldString": {"type": "string"},
            "newString": {"type": "string"}, "replaceAll": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "required": ["filePath"], "properties": {
            "filePath": {"type": "string"}, "offset": {"type": "number"},
            "limit": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "required": ["content", "filePath"], "properties": {
            "content": {"type": "string"}, "filePath": {"type": "string"}}}}},
]


def opencode_chat(prompt: str = ASK, cwd: str | None = "/home/dev/project") -> dict:
    env = f"<env>\n  Working directory: {cwd}\n  Platform: linux\n</env>" if cwd else ""
    return {"model": "auto", "stream": True, "tools": copy.deepcopy(OPENCODE_TOOLS),
            "tool_choice": "auto",
            "messages": [{"role": "system", "content": f"You are opencode.\n{env}"},
                         {"role": "user", "content": [{"type": "text", "text": prompt}]}]}


@pytest.mark.parametrize("text, task", [
    ("create hello.txt containing hi", Task("write", path="hello.txt", content="hi")),
    ("Create a file called notes/todo.md with the text: buy milk.",
     Task("write", path="notes/todo.md", content="buy milk")),
    ("write 'hello world' to out.txt", Task("write", path="out.txt", content="hello world")),
    ("<system-reminder>\nctx\n</system-reminder>\nmake hello.txt containing \"hi\"",
     Task("write", path="hello.txt", content="hi")),
    ("run `ls -la` and tell me what you see", Task("run", command="ls -la")),
    ("please execute the command echo hi", Task("run", command="echo hi")),
    ("what is the weather", None),
    ("create something nice", None),
])
def test_the_instruction_is_read_as_a_task(text: str, task: Task | None) -> None:
    assert parse_task(text) == task


def test_claude_code_gets_its_write_tool_with_an_absolute_path() -> None:
    call = agent_call(claude_code_chat())
    assert call == Call("Write", {"file_path": "/home/dev/project/hello.txt", "content": "hi\n"})


def test_claude_code_without_a_known_directory_writes_through_bash() -> None:
    call = agent_call(claude_code_chat(cwd=None))
    assert call is not None and call.name == "Bash"
    assert call.arguments["command"] == "printf '%s\\n' hi > hello.txt"


def test_claude_code_runs_a_command_with_bash_not_a_subagent() -> None:
    call = agent_call(claude_code_chat("run `echo hi > x.txt`"))
    assert call is not None and call.name == "Bash"
    assert call.arguments["command"] == "echo hi > x.txt"


def test_codex_writes_with_exec_command_in_its_working_directory() -> None:
    call = agent_call(codex_chat())
    assert call == Call("exec_command", {"cmd": "printf '%s\\n' hi > hello.txt",
                                         "workdir": "/home/dev/project"})


def test_codex_with_apply_patch_adds_the_file_by_patch() -> None:
    call = agent_call(codex_chat(patch_tool=True))
    assert call == Call("apply_patch", {"input": "*** Begin Patch\n*** Add File: hello.txt\n"
                                                 "+hi\n*** End Patch\n"})


def test_opencode_gets_its_write_tool() -> None:
    call = agent_call(opencode_chat())
    assert call == Call("write", {"filePath": "/home/dev/project/hello.txt", "content": "hi\n"})


def test_opencode_runs_bash_with_the_description_its_schema_requires() -> None:
    call = agent_call(opencode_chat("run `cat hello.txt`"))
    assert call == Call("bash", {"command": "cat hello.txt", "workdir": "/home/dev/project",
                                 "description": "Run the requested command"})


def test_an_unrecognised_schema_gets_no_call() -> None:
    body = opencode_chat()
    for tool in body["tools"]:  # every tool renamed: nothing the simulator knows
        tool["function"]["name"] += "_v9"
    assert agent_call(body) is None
    assert agent_call({**opencode_chat(), "tool_choice": "none"}) is None


def test_after_the_tool_result_the_agent_gets_a_short_text_not_another_call() -> None:
    chat = opencode_chat()
    call = agent_call(chat)
    assert call is not None
    chat["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json()}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Wrote file successfully."},
        # Claude Code follows a tool result with reminders only: still the same task
        {"role": "user", "content": "<system-reminder>\nctx\n</system-reminder>"}]
    assert agent_call(chat) is None
    client, _ = sim(model_name="m")
    with client:
        message = client.post("/v1/chat/completions", json={**chat, "stream": False}
                              ).json()["choices"][0]["message"]
    assert "tool_calls" not in message
    assert message["content"] == ("[sim:m] asked to write hello.txt; the tool said: "
                                  "Wrote file successfully.")


@pytest.mark.parametrize("stream", [False, True])
def test_the_simulator_answers_claude_codes_request_with_the_write_call(stream: bool) -> None:
    client, _ = sim()
    with client, openai.OpenAI(base_url="http://sim.test/v1", api_key="unused",
                               http_client=client, max_retries=0) as sdk:
        body = claude_code_chat()
        if stream:
            with sdk.chat.completions.create(**{**body, "stream": True}) as events:
                parts = [c.choices[0].delta.tool_calls[0] for c in events
                         if c.choices and c.choices[0].delta.tool_calls]
            name = parts[0].function.name
            arguments = "".join(p.function.arguments or "" for p in parts)
        else:
            out = sdk.chat.completions.create(**{**body, "stream": False})
            (tool_call,) = out.choices[0].message.tool_calls
            name, arguments = tool_call.function.name, tool_call.function.arguments
    assert name == "Write"
    assert json.loads(arguments) == {"file_path": "/home/dev/project/hello.txt",
                                     "content": "hi\n"}


def test_zero_profile_keeps_a_bounded_number_of_templates() -> None:
    """The ``zero`` profile cached one answer per (model, stream, usage) for ever: a
    client naming a new model each time grew the simulator without bound (3,000 names
    of 200 characters: about 2.5 MB). It keeps at most ``ZERO_TEMPLATES`` now."""
    import tracemalloc
    client, _ = sim("zero")
    with client:
        client.post("/v1/chat/completions", json={"model": "warm", "messages": HELLO})
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(3000):
            answer = client.post("/v1/chat/completions",
                                 json={"model": f"{i:05d}" + "m" * 195, "messages": HELLO})
            assert answer.status_code == 200
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    assert grown < 500_000, grown
