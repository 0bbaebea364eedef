"""System messages inside a conversation, folded where chat templates take them."""

from __future__ import annotations

from humpyard.protocols.system_fold import fold_system_messages, reminder

SYS = {"role": "system", "content": "be brief"}
U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "hello"}
CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": "{}"}}]}
TOOL = {"role": "tool", "tool_call_id": "c1", "content": "42"}


def roles(messages):
    return [m["role"] for m in messages]


def test_nothing_to_fold_leaves_messages_alone():
    messages = [SYS, U, A, U]
    out, folded = fold_system_messages(messages)
    assert out == messages and folded == 0


def test_leading_run_becomes_one_system_message():
    out, folded = fold_system_messages([SYS, {"role": "developer", "content": "use tools"}, U])
    assert out == [{"role": "system", "content": "be brief\n\nuse tools"}, U]
    assert folded == 0


def test_after_a_user_turn_it_is_appended_to_that_turn():
    out, folded = fold_system_messages([SYS, U, {"role": "system", "content": "agents: a, b"}, A])
    assert out == [SYS, {"role": "user", "content": "hi\n" + reminder("agents: a, b")}, A]
    assert folded == 1
    assert reminder("x") == "<system-reminder>\nx\n</system-reminder>"


def test_user_parts_get_a_text_part():
    image = {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
    user = {"role": "user", "content": [image]}
    out, _ = fold_system_messages([user, {"role": "system", "content": "note"}])
    assert out == [{"role": "user", "content": [image, {"type": "text",
                                                         "text": reminder("note")}]}]


def test_after_an_assistant_turn_it_goes_before_the_next_user_message():
    out, _ = fold_system_messages([U, A, {"role": "developer", "content": "now plan"}, U])
    assert out == [U, A, {"role": "user", "content": reminder("now plan") + "\nhi"}]


def test_tool_results_stay_next_to_their_call():
    out, folded = fold_system_messages([U, CALL, {"role": "system", "content": "s"}, TOOL])
    assert roles(out) == ["user", "assistant", "tool", "user"]
    assert out[-1] == {"role": "user", "content": reminder("s")}
    assert folded == 1


def test_before_an_assistant_turn_it_becomes_a_user_message_where_it_stood():
    out, _ = fold_system_messages([U, A, {"role": "system", "content": "s"}, A])
    assert out == [U, A, {"role": "user", "content": reminder("s")}, A]


def test_text_parts_and_empty_system_messages():
    out, folded = fold_system_messages([
        {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                       "text": "b"}]},
        U, {"role": "system", "content": ""}, A])
    assert out == [{"role": "system", "content": "a\nb"}, U, A] and folded == 0


def test_input_is_not_modified():
    messages = [U, {"role": "system", "content": "s"}]
    fold_system_messages(messages)
    assert messages == [U, {"role": "system", "content": "s"}]
