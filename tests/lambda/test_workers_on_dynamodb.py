"""``serve --workers 2`` on ``[store] backend = "dynamodb"`` when a worker dies mid-probe.

The breakers are one item of the state table that any process reads, so the
parent gives back the dead worker's probe lease there too, as it does in the
workers' SQLite file (``tests/durability/test_worker_faults.py``): the next
request of any worker probes, rather than none until the lease lapses (the
longest timeout plus 60 s).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from lambda_support import SerialMotoServer, gateway_config
from test_serve_on_dynamodb import AWS_ENV, chat, chat_calls, fresh_tables, store_toml

from tests.durability.process import ServeProcess
from tests.durability.test_worker_faults import _connected_to, _port_of
from tests.durability.test_workers import _quietly, children, poll
from tests.support import FakeUpstream, delay, ok
from tests.support.steps import reset


def test_a_killed_workers_probe_lease_is_given_back_in_the_table(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    with FakeUpstream() as primary, FakeUpstream() as backup:
        backup.default = ok("from backup")
        state, ledger = fresh_tables(moto.url)
        path = tmp_path / "humpyard.toml"
        path.write_text(gateway_config(primary.url, backup.url, cooldown_secs=1)
                        + store_toml(moto.url, state, ledger))
        proc = ServeProcess(path, tmp_path / "workers.log", env=AWS_ENV,
                            args=("--workers", "2")).start(60)
        probing = threading.Thread(target=lambda: _quietly(lambda: chat(proc, expect=0)),
                                   daemon=True)
        try:
            primary.script(reset())  # a failure that leaves no kept connection
            assert chat(proc).headers["x-humpyard-target"] == "backup"  # tripped
            tripped = time.monotonic()
            primary.default = delay(60, ok("late"))  # the probe, running when killed
            poll(lambda: time.monotonic() - tripped > 1.5, what="the cooldown's end")
            probing.start()
            poll(lambda: chat_calls(primary) == 2, what="the probe to reach the endpoint")
            (prober,) = _connected_to(children(proc.pid), _port_of(primary.url))
            primary.default = ok("well again")
            os.kill(prober, signal.SIGKILL)
            poll(lambda: chat(proc).headers["x-humpyard-target"] == "primary", timeout=15,
                 what="a request to probe the endpoint again")
            assert "1 probe lease(s)" in proc.output()
        finally:
            proc.stop()
