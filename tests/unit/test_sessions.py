"""Session ids: header order, validity, and what is never a session id."""

from __future__ import annotations

import json

import pytest

from humpyard.sessions import session_id


def test_first_valid_header_wins_in_order():
    h = {"x-session-id": "later", "x-claude-code-session-id": "cc-1",
         "x-switchyard-session-id": "sy-1"}
    assert session_id(h) == "sy-1"
    del h["x-switchyard-session-id"]
    assert session_id(h) == "cc-1"


def test_an_invalid_id_means_no_session_not_the_next_header():
    # seed 002: "anything else is ignored, and the request is served without a session"
    assert session_id({"x-switchyard-session-id": "has space",
                       "x-session-id": "ok-1"}) is None
    assert session_id({"x-claude-code-session-id": "", "x-session-id": "ok-1"}) is None
    assert session_id({"x-session-id": "x" * 257, "session_id": "ok-2"}) is None
    assert session_id({"session_id": "caf\u00e9", "x-session-affinity": "aff"}) is None
    meta = json.dumps({"session_id": "bad id"})
    assert session_id({"x-codex-turn-metadata": meta, "session_id": "s"}) is None


def test_invalid_values():
    assert session_id({"x-session-id": "x" * 257}) is None
    assert session_id({"x-session-id": ""}) is None
    assert session_id({"x-session-id": "caf\u00e9"}) is None
    assert session_id({"x-session-id": "x" * 256}) == "x" * 256


def test_codex_turn_metadata_then_session_id_then_affinity():
    meta = json.dumps({"session_id": "codex-1", "turn": 3})
    assert session_id({"x-codex-turn-metadata": meta, "session_id": "s"}) == "codex-1"
    # metadata that names no session (not JSON, no session_id field) carries no id
    assert session_id({"x-codex-turn-metadata": "not json", "session_id": "s"}) == "s"
    assert session_id({"x-codex-turn-metadata": '{"turn": 1}', "session_id": "s"}) == "s"
    assert session_id({"x-session-affinity": "aff", "session_id": "s"}) == "s"
    assert session_id({"x-session-affinity": "aff"}) == "aff"


@pytest.mark.parametrize("name", ["prompt_cache_key", "x-client-request-id"])
def test_never_session_ids(name):
    assert session_id({name: "abc"}) is None
