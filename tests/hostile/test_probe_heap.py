"""The probe measures the gateway, not the test process's collector.

Late in a full run the test process holds millions of objects; a full collection
there held the probe's thread for 300-500 ms and failed
``test_odd_model_ids_and_leaving_clients_leave_a_probe_flat`` with a gateway
whose p50 had not moved. While a probe is open the heap it found is frozen, so a
collection walks only what was made since (``tests/support/probe.py``).
"""

from __future__ import annotations

import gc

from tests.support.probe import Probe

HEAP = 200_000


def test_an_open_probe_keeps_the_heap_it_found_out_of_every_collection():
    heap = [[i] for i in range(HEAP)]  # tracked containers, like a late run's
    with Probe("http://127.0.0.1:9", "m"), Probe("http://127.0.0.1:9", "m"):
        # Nested probes: the heap stays frozen until the last one closes.
        assert gc.get_freeze_count() >= HEAP
        made_since = [[i] for i in range(1000)]
        # A full collection now walks only what was made since the freeze, and still that.
        tracked = sum(len(gc.get_objects(generation)) for generation in range(3))
        assert len(made_since) <= tracked < HEAP, tracked
    assert gc.get_freeze_count() == 0  # nothing stays frozen, so nothing outlives the test
    assert len(gc.get_objects()) >= len(heap)  # the heap is the collector's again
