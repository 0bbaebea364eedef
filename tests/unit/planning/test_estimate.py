import base64

from humpyard.planning.estimate import (
    IMAGE_TOKENS_HIGH,
    IMAGE_TOKENS_LOW,
    analyse_request,
    estimate_prompt_tokens,
    request_traits,
)


def body(*messages: dict, **extra: object) -> dict:
    return {"model": "m", "messages": list(messages), **extra}


def user(content: object) -> dict:
    return {"role": "user", "content": content}


def test_plain_text_is_about_bytes_over_three_and_six() -> None:
    high, low = estimate_prompt_tokens(body(user("x" * 3000)))
    assert 1000 <= high <= 1010  # 1000 + one message overhead + priming
    assert low == 500


def test_high_is_never_below_low_and_roughly_twice_it() -> None:
    for n in (0, 1, 7, 100, 10_000):
        high, low = estimate_prompt_tokens(body(user("a" * n)))
        assert high >= low
        if n >= 1000:
            assert 1.9 <= high / low <= 2.1


def test_utf8_bytes_count_not_characters() -> None:
    ascii_high, _ = estimate_prompt_tokens(body(user("a" * 300)))
    multibyte_high, _ = estimate_prompt_tokens(body(user("é" * 300)))  # 2 bytes each
    assert multibyte_high - ascii_high == 100


def test_lone_surrogates_do_not_raise() -> None:
    assert estimate_prompt_tokens(body(user("\ud800" * 3)))[0] > 0


def test_each_message_adds_overhead() -> None:
    one, _ = estimate_prompt_tokens(body(user("")))
    three, _ = estimate_prompt_tokens(body(user(""), user(""), user("")))
    assert three - one == 8


def test_content_parts_and_tool_calls_count() -> None:
    b = body(
        {"role": "system", "content": "s" * 30},
        user([{"type": "text", "text": "t" * 30}]),
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": "a" * 300}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r" * 30},
    )
    high, low = estimate_prompt_tokens(b)
    assert high >= (30 + 30 + 300 + 30) // 3
    assert low >= (30 + 30 + 300 + 30) // 6


def test_tool_definitions_count_as_their_json() -> None:
    tools = [{"type": "function", "function": {
        "name": "search", "description": "d" * 600,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    without, _ = estimate_prompt_tokens(body(user("hi")))
    with_tools, low = estimate_prompt_tokens(body(user("hi"), tools=tools))
    assert with_tools - without >= 200
    assert low >= 100


def test_an_image_is_a_fixed_count_not_the_bytes_of_its_data_url() -> None:
    big = "data:image/png;base64," + base64.b64encode(b"\0" * 3_000_000).decode()
    small = "data:image/png;base64,AAAA"
    part = {"type": "text", "text": "look"}
    b_big = body(user([part, {"type": "image_url", "image_url": {"url": big}}]))
    b_small = body(user([part, {"type": "image_url", "image_url": {"url": small}}]))
    assert estimate_prompt_tokens(b_big) == estimate_prompt_tokens(b_small)
    high, low = estimate_prompt_tokens(b_big)
    assert IMAGE_TOKENS_HIGH <= high < IMAGE_TOKENS_HIGH + 20
    assert IMAGE_TOKENS_LOW <= low < IMAGE_TOKENS_LOW + 5


def test_traits() -> None:
    assert request_traits(body(user("x"))) == (False, False)
    assert request_traits(body(user("x"), tools=[{"type": "function"}])) == (True, False)
    assert request_traits(body(user("x"), tools=[])) == (False, False)
    img = user([{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
    assert request_traits(body(img)) == (False, True)
    shape = analyse_request(body(img, tools=[{"type": "function"}]))
    assert (shape.tools, shape.images) == (True, True)


def test_odd_bodies_never_raise() -> None:
    for b in ({}, {"messages": None}, {"messages": "x"}, {"messages": [1, None, "s"]},
              {"messages": [{"role": "user", "content": [1, {"type": "weird", "x": [1.5]}]}]},
              {"messages": [{"role": "user", "content": {"odd": True}}], "tools": "nope"}):
        high, low = estimate_prompt_tokens(b)
        assert high >= low >= 0
