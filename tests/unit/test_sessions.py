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


def test_invalid_ids_are_skipped():
    assert session_id({"x-switchyard-session-id": "has space",
                       "x-session-id": "ok-1"}) == "ok-1"
    assert session_id({"x-session-id": "x" * 257}) is None
    assert session_id({"x-session-id": ""}) is None
    assert session_id({"x-session-id": "caf\u00e9"}) is None
    assert session_id({"x-session-id": "x" * 256}) == "x" * 256


def test_codex_turn_metadata_then_session_id_then_affinity():
    meta = json.dumps({"session_id": "codex-1", "turn": 3})
    assert session_id({"x-codex-turn-metadata": meta, "session_id": "s"}) == "codex-1"
    assert session_id({"x-codex-turn-metadata": "not json", "session_id": "s"}) == "s"
    assert session_id({"x-session-affinity": "aff", "session_id": "s"}) == "s"
    assert session_id({"x-session-affinity": "aff"}) == "aff"


@pytest.mark.parametrize("name", ["prompt_cache_key", "x-client-request-id"])
def test_never_session_ids(name):
    assert session_id({name: "abc"}) is None
