"""What the adapter tells Switchyard about the client (``switchyard_headers``)."""

from humpyard.switchyard.adapter import switchyard_headers


def test_only_the_gateways_session_is_passed() -> None:
    client = {"authorization": "Bearer secret", "x-session-id": "theirs",
              "x-openai-subagent": "review"}
    assert switchyard_headers(client, "s-1") == {"x-switchyard-session-id": "s-1"}


def test_no_session_means_no_headers_even_if_the_client_sent_an_invalid_one() -> None:
    assert switchyard_headers({"x-switchyard-session-id": " bad id "}, None) == {}


def test_session_final_is_passed_with_the_session() -> None:
    h = switchyard_headers({"X-Switchyard-Session-Final": "true"}, "s-1")
    assert h == {"x-switchyard-session-id": "s-1", "x-switchyard-session-final": "true"}
