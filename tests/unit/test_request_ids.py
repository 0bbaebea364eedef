"""Request ids carry the time they were issued (ADR 0019): what the DynamoDB ledger keys on."""

from __future__ import annotations

from humpyard.records import issued_at, new_request_id, request_time

T0 = 1_800_000_000.1


def test_an_id_carries_its_exact_time_and_sorts_by_it() -> None:
    ids = [new_request_id(T0 + d) for d in (0.0, 0.001, 1.0, 86_400.0)]
    assert [request_time(i) for i in ids] == [T0, T0 + 0.001, T0 + 1.0, T0 + 86_400.0]
    assert sorted(ids) == ids and len(set(ids)) == 4
    same = [new_request_id(T0) for _ in range(3)]
    assert len(set(same)) == 3  # the counter tells ids of one instant apart
    assert all(i.startswith("req_") and len(i) == 36 for i in ids + same)


def test_other_strings_carry_no_time() -> None:
    for other in ("r1", "req_nope", "req_0a1b2c3d4e5f000000000001", "req_" + "G" * 32,
                  "req_" + "1_" * 16, " req_" + "0" * 31, ""):
        assert request_time(other) is None, other


def test_a_request_takes_its_ids_time_when_the_clocks_agree() -> None:
    rid = new_request_id(T0)
    assert issued_at(rid, T0 + 0.002) == T0  # issued a moment before, by this clock
    assert issued_at(rid, T0 + 3600) == T0 + 3600  # another clock: the caller's time
    assert issued_at("r1", T0) == T0
