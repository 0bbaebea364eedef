"""``humpyard serve`` on DynamoDB while the tables cannot be reached for a while.

A real ``serve`` child talks to a moto server through a ``TcpRelay`` that the
test cuts (every connection reset, every new one refused) and mends: a
network partition or an endpoint that is down, as the store's client sees it.
Requests keep being served; what the process could not write then is written
when the store answers again, and nothing is counted lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from lambda_support import SerialMotoServer, gateway_config
from test_serve_on_dynamodb import AWS_ENV, fresh_tables, store_toml

from humpyard import awaited, background
from tests.durability.process import ServeProcess
from tests.support import FakeUpstream, ok
from tests.support.polling import until
from tests.support.tcp_relay import TcpRelay

APP, OPS = "hk-app-outage-key", "hk-ops-outage-key"
KEYS_TOML = """
[keys.app]
key_env = "APP_KEY"
budget = { usd = 100.0, period = "day" }

[keys.ops]
key_env = "OPS_KEY"
admin = true
"""
DOLLAR = {"prompt_tokens": 1_000_000, "completion_tokens": 0, "total_tokens": 1_000_000}


@contextmanager
def serving(moto: SerialMotoServer, tmp_path: Path, *, cut: bool = False
            ) -> Iterator[tuple[ServeProcess, TcpRelay]]:
    """A ``serve`` of the key ``app`` ($1 a request on ``primary``) on fresh tables that
    it reaches through a relay, ``cut`` before it starts or not (stopped, and the relay
    mended, at the end)."""
    port = int(moto.url.rsplit(":", 1)[1])
    with FakeUpstream() as primary, FakeUpstream() as backup, TcpRelay(port) as relay:
        primary.default = ok("a dollar", usage=DOLLAR)  # $1 a request at $1 per million
        state, ledger = fresh_tables(moto.url)
        if cut:
            relay.cut()
        path = tmp_path / "humpyard.toml"
        path.write_text(gateway_config(primary.url, backup.url) + KEYS_TOML
                        + store_toml(relay.url, state, ledger))
        proc = ServeProcess(path, tmp_path / "serve.log",
                            env={**AWS_ENV, "APP_KEY": APP, "OPS_KEY": OPS})
        proc.start(30)
        try:
            yield proc, relay
        finally:
            relay.mend()
            proc.stop()


def _metric(proc: ServeProcess, name: str) -> float:
    text = httpx.get(proc.url + "/metrics", timeout=10,
                     headers={"authorization": f"Bearer {OPS}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_what_an_unreachable_store_could_not_take_is_written_when_it_answers(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    """Before: every decision made while the store was cut was logged and counted
    lost (``humpyard_ledger_lost_total``), and the admin read was a 500."""
    with serving(moto, tmp_path) as (proc, relay):
        def chat() -> str:
            r = httpx.post(proc.url + "/v1/chat/completions", timeout=30,
                           headers={"authorization": f"Bearer {APP}"},
                           json={"model": "auto",
                                 "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            assert r.headers["x-humpyard-target"] == "primary"
            return r.headers["x-humpyard-request-id"]

        def listed() -> set[str]:
            r = httpx.get(proc.url + "/v1/decisions", params={"limit": 100}, timeout=30,
                          headers={"authorization": f"Bearer {OPS}"})
            assert r.status_code == 200, r.text
            return {d["request_id"] for d in r.json()["decisions"]}

        ids = [chat() for _ in range(2)]
        until(lambda: set(ids) <= listed(), "the first decisions written")

        relay.cut()
        ids += [chat() for _ in range(6)]  # served while the store is away
        until(lambda: _metric(proc, "humpyard_ledger_lag_seconds") >= 1.0,
              "the writer to be holding what it could not write", timeout=20)
        down = httpx.get(proc.url + "/v1/decisions", timeout=30,
                         headers={"authorization": f"Bearer {OPS}"})
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "store_unavailable"
        assert httpx.get(proc.url + "/readyz", timeout=10).status_code == 503
        time.sleep(1.0)  # the writer tries again meanwhile, and fails again

        relay.mend()
        until(lambda: set(ids) <= listed(), "every decision written once the store "
              "answers", timeout=30)
        assert _metric(proc, "humpyard_ledger_lost_total") == 0
        until(lambda: _metric(proc, "humpyard_budget_spend_usd") >= len(ids),
              f"the spend of all {len(ids)} requests counted", timeout=30)
        assert _metric(proc, "humpyard_budget_spend_usd") < len(ids) + 0.01
    log = (tmp_path / "serve.log").read_text()
    assert "ledger decision not written" not in log
    assert "ledger write waiting" in log


def test_a_stalled_store_holds_up_no_request(moto: SerialMotoServer, tmp_path: Path) -> None:
    """The store's network goes silent (no reset, no answer: a partition) while a
    budgeted key uses up its lease, so its requests need lease writes.
    Before: the event loop itself waited for reads of the shared view (every request
    stalled with it; one took 75 s), and each request of the key waited for its own
    lease write's timeouts, behind the background work's."""
    with serving(moto, tmp_path) as (proc, relay):
        def chat() -> float:
            started = time.monotonic()
            r = httpx.post(proc.url + "/v1/chat/completions", timeout=120,
                           headers={"authorization": f"Bearer {APP}"},
                           json={"model": "auto",
                                 "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            return time.monotonic() - started

        chat()
        relay.stall()
        took = [chat() for _ in range(30)]  # $30: three slices of the $100 budget
        # A request waits at most 3 s for a lease write, and after a failure none
        # asks for a pause (1 s, doubling): a few waited, none for the timeouts.
        assert max(took) < 8, took
        assert len([t for t in took if t > 1]) <= 4, took


def test_a_serve_started_while_the_store_is_unreachable_says_so_briefly_and_recovers(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    """``serve`` starts while its tables refuse every connection, serves for a while,
    then the tables answer. Before: a warning per failed read of the shared view
    (every half ``state_refresh_ms``: 125 lines in 30 s) and a traceback for each
    background job's failure (the purge and the override sweep at once, the sweep
    again every 30 s)."""
    with serving(moto, tmp_path, cut=True) as (proc, relay):
        ids = []
        for _ in range(10):
            r = httpx.post(proc.url + "/v1/chat/completions", timeout=30,
                           headers={"authorization": f"Bearer {APP}"},
                           json={"model": "auto",
                                 "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            ids.append(r.headers["x-humpyard-request-id"])
        until(lambda: "retention purge failed" in proc.output()
              and "override expiry sweep failed" in proc.output(),
              "the background jobs to have failed once", timeout=20)
        assert httpx.get(proc.url + "/readyz", timeout=10).status_code == 503
        relay.mend()
        said = until(lambda: re.search(r"shared state read again after (\d+) failed",
                                       proc.output()),
                     "a read of the shared view to succeed", timeout=30)
        assert int(said.group(1)) >= 2  # many failed reads, one line (below)
        until(lambda: httpx.get(proc.url + "/readyz", timeout=10).status_code == 200,
              "ready once the tables answer", timeout=30)

        def listed() -> set[str]:
            r = httpx.get(proc.url + "/v1/decisions", params={"limit": 100}, timeout=30,
                          headers={"authorization": f"Bearer {OPS}"})
            return {d["request_id"] for d in r.json()["decisions"]} if r.is_success else set()

        until(lambda: set(ids) <= listed(), "the decisions made in the outage written",
              timeout=30)
    log = proc.output()
    assert "Traceback" not in log
    assert log.count("shared state could not be read") == 1, log[-3000:]
    assert "ledger decision not written" not in log


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_stalled_store_holds_a_bounded_number_of_threads(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    """A partition while a budgeted key's requests and unauthenticated ``/readyz``
    probes keep coming. Every store call that waits for the partition holds a thread
    for its timeouts; the threads such calls may take are bounded by kind (the calls a
    request waits for, the background jobs, the lease writes, one readiness ping, the
    shared view's reader), so the process's thread count stays flat however many
    requests and probes come."""
    with serving(moto, tmp_path) as (proc, relay):
        assert proc.proc is not None
        pid = proc.proc.pid

        def chat() -> int:
            try:
                return httpx.post(proc.url + "/v1/chat/completions", timeout=30,
                                  headers={"authorization": f"Bearer {APP}"},
                                  json={"model": "auto", "messages": [
                                      {"role": "user", "content": "hi"}]}).status_code
            except httpx.HTTPError:
                return 0

        assert chat() == 200
        relay.stall()
        peaks: list[int] = []
        answered: list[int] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peaks.append(_threads(pid))
                time.sleep(0.05)

        def clients(n: int) -> None:
            answered.extend(chat() for _ in range(n))

        def probes() -> None:
            end = time.monotonic() + 12
            while time.monotonic() < end:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(proc.url + "/readyz", timeout=10)

        sampler = threading.Thread(target=sample)
        sampler.start()
        workers = [threading.Thread(target=clients, args=(4,)) for _ in range(8)]
        workers += [threading.Thread(target=probes) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        done.set()
        sampler.join()
        assert answered == [200] * 32  # a request waits at most 3 s for the store
        # What a stalled store's calls may hold, kind by kind: the calls requests wait
        # for, the background jobs, the leases' writes, one readiness ping, the shared
        # view's reader, and the default executor (which the ping and the rest share).
        bound = (awaited.THREADS + background.THREADS + 1 + 1 + 1
                 + min(32, (os.cpu_count() or 1) + 4))
        assert max(peaks) - peaks[0] <= bound, (peaks[0], max(peaks), bound)
        # and not one per request: 32 requests and a probe flood waited on the store
        assert max(peaks) - peaks[0] < 32
