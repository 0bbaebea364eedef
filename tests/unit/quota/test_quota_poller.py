"""QuotaPoller with a FakeClock, a dict-backed store and httpx.MockTransport."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from quota_fakes import KEY, FakeQuotaStore, usage_body

from humpyard.clock import FakeClock
from humpyard.config import Config, ProviderSpec, load_config_text
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.quota.base import QuotaReading
from humpyard.quota.poller import HISTORY_EVERY_SECS, QuotaPoller

START = 1_800_000_000.0


def make_config(base_url: str = "https://opencode.ai/zen/go/v1", *, quota: bool = True,
                key: str = KEY, extra: str = "") -> Config:
    source = 'quota_source = "opencode-go"' if quota else ""
    return load_config_text(f"""
quota_poll_secs = 60
quota_stale_secs = 300

[providers.opencode]
base_url = "{base_url}"
api_key_env = "OC_KEY"
{source}

[providers.plain]
base_url = "https://plain.example/v1"

{extra}

[targets.t]
endpoints = [{{ provider = "opencode", model = "m" }}]
""", env={"OC_KEY": key, "OTHER_KEY": "sk-other-secret"})


class Upstream:
    """A scriptable provider: ``status``/``body`` per request, or ``hang``."""

    def __init__(self) -> None:
        self.status = 200
        self.body: Any = usage_body()
        self.hang = False
        self.calls: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request)
        if self.hang:
            await asyncio.Event().wait()
        if isinstance(self.body, bytes):
            return httpx.Response(self.status, content=self.body)
        return httpx.Response(self.status, json=self.body)


class Harness:
    def __init__(self, config: Config | None = None, *, timeout: float | None = None,
                 cost_since: Callable[[str, float], float] | None = None,
                 sources: Any = None, store: FakeQuotaStore | None = None) -> None:
        self.clock = FakeClock(start=START)
        self.store = store or FakeQuotaStore()
        self.upstream = Upstream()
        self.metrics = GatewayMetrics(Metrics())
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(self.upstream))
        self.poller = QuotaPoller(config or make_config(), self.store, self.clock, self.client,
                                  self.metrics, cost_since=cost_since, timeout=timeout,
                                  sources=sources)
        self.returned: list[Any] = []

    def poll(self) -> None:
        self.returned.append(asyncio.run(self.poller.poll_once()))

    def view(self) -> dict[str, Any]:
        out = self.poller.view()
        self.returned.append(out)
        return out

    def entry(self, name: str = "opencode") -> dict[str, Any]:
        (found,) = [e for e in self.view()["providers"] if e["provider"] == name]
        return found


def test_never_polled_is_unknown() -> None:
    h = Harness()
    assert h.view() == {"providers": [{
        "provider": "opencode", "source": "opencode-go", "windows": {}, "state": "unknown",
        "reason": "never polled"}]}


def test_fresh_then_stale_after_quota_stale_secs() -> None:
    h = Harness()
    h.poll()
    e = h.entry()
    assert (e["state"], e["reason"]) == ("fresh", None)
    assert e["windows"]["rolling"] == {"percent": 12.5, "status": "ok",
                                       "resets_at": "2027-01-15T08:00:00Z", "age_secs": 0.0}
    assert set(e["windows"]) == {"rolling", "weekly", "monthly"}
    assert h.store.snapshots["opencode"]["fetched_at"] == START

    h.clock.advance(300)
    assert h.entry()["state"] == "fresh"
    h.clock.advance(1)
    e = h.entry()
    assert e["state"] == "stale"
    assert e["reason"] == "the data is 301s old, older than quota_stale_secs (300s)"
    assert e["windows"]["rolling"]["age_secs"] == 301.0


def test_a_failing_poll_keeps_the_windows_until_they_are_stale() -> None:
    h = Harness()
    h.poll()
    h.clock.advance(120)
    h.upstream.status = 500
    h.poll()
    e = h.entry()
    assert e["state"] == "fresh"
    assert e["reason"] == "last poll failed: the provider answered HTTP 500"
    assert e["windows"]["rolling"]["age_secs"] == 120.0
    h.clock.advance(200)
    h.poll()
    e = h.entry()
    assert e["state"] == "stale"
    assert e["reason"].endswith("; last poll: the provider answered HTTP 500")
    h.upstream.status = 200
    h.poll()
    assert (h.entry()["state"], h.entry()["reason"]) == ("fresh", None)


@pytest.mark.parametrize("status,body,reason", [
    (401, {}, "no successful read yet: the key is unknown to the provider"),
    (403, {}, "no successful read yet: the key has no subscription"),
    (200, b"nonsense", "no successful read yet: the answer is not JSON"),
    (200, usage_body(rolling=101), "no successful read yet: usage window 'rolling' has "
                                   "percent 101, outside 0-100"),
])
def test_a_first_poll_that_fails_is_unknown_with_the_reason(status: int, body: Any,
                                                            reason: str) -> None:
    h = Harness()
    h.upstream.status, h.upstream.body = status, body
    h.poll()
    e = h.entry()
    assert (e["state"], e["reason"], e["windows"]) == ("unknown", reason, {})
    assert h.store.history == []


def test_providers_are_polled_concurrently_each_within_the_timeout() -> None:
    extra = """
[providers.second]
base_url = "http://127.0.0.1:9/v1"
api_key_env = "OTHER_KEY"
quota_source = "opencode-go"
"""

    class Split(Upstream):
        async def __call__(self, request: httpx.Request) -> httpx.Response:
            self.hang = request.url.host == "opencode.ai"
            return await super().__call__(request)

    h = Harness(make_config(extra=extra), timeout=0.05)
    h.upstream = Split()
    h.client = httpx.AsyncClient(transport=httpx.MockTransport(h.upstream))
    h.poller._client = h.client
    h.poll()
    assert h.entry("opencode")["reason"] == "no successful read yet: no answer within 0.05s"
    assert h.entry("second")["state"] == "fresh"
    assert [e["provider"] for e in h.view()["providers"]] == ["opencode", "second"]


def samples(h: Harness, window: str | None = None) -> list[dict[str, Any]]:
    return [s for s in h.store.history if window is None or s["window"] == window]


def test_history_sampling_rules() -> None:
    costs: list[tuple[str, float]] = []

    def cost_since(provider: str, since_ts: float) -> float:
        costs.append((provider, since_ts))
        return 0.75

    h = Harness(cost_since=cost_since)
    h.poll()
    assert [(s["window"], s["ts"], s["percent"], s["status"]) for s in samples(h)] == [
        ("rolling", START, 12.5, "ok"), ("weekly", START, 40.0, "ok"),
        ("monthly", START, 70.0, "ok")]
    first = samples(h, "rolling")[0]
    assert first["provider"] == "opencode"
    assert first["cost_usd_since_previous"] == 0.0  # nothing to compare with yet
    assert costs == []

    h.clock.advance(60)
    h.poll()
    assert len(samples(h)) == 3  # nothing changed: no sample

    h.clock.advance(60)
    h.upstream.body = usage_body(rolling=13.0)
    h.poll()
    changed = samples(h, "rolling")[-1]
    assert (changed["percent"], changed["ts"]) == (13.0, START + 120)
    assert changed["cost_usd_since_previous"] == 0.75
    assert costs == [("opencode", START)]
    assert len(samples(h)) == 4

    h.clock.advance(60)
    h.upstream.body = usage_body(rolling=13.0, status="rate-limited")
    h.poll()
    h.clock.advance(60)
    h.upstream.body = usage_body(rolling=13.0, status="rate-limited",
                                 resets="2027-01-15T13:00:00Z")
    h.poll()
    assert [s["status"] for s in samples(h, "rolling")] == ["ok", "ok", "rate-limited",
                                                             "rate-limited"]
    assert samples(h, "rolling")[-1]["resets_at"] != samples(h, "rolling")[-2]["resets_at"]
    assert len(samples(h)) == 6

    # Unchanged windows are sampled again once their last sample is 15 minutes old.
    h.clock.advance(HISTORY_EVERY_SECS - 240 - 1)
    h.poll()
    assert len(samples(h)) == 6
    h.clock.advance(1)
    h.poll()
    assert [s["window"] for s in samples(h)[6:]] == ["weekly", "monthly"]
    assert samples(h, "weekly")[-1]["ts"] == START + HISTORY_EVERY_SECS


def test_no_history_from_a_failed_poll_and_a_failing_cost_callable_counts_zero() -> None:
    def cost_since(provider: str, since_ts: float) -> float:
        raise RuntimeError("ledger down")

    h = Harness(cost_since=cost_since)
    h.poll()
    h.upstream.status = 500
    h.clock.advance(HISTORY_EVERY_SECS * 2)
    h.poll()
    assert len(samples(h)) == 3
    h.upstream.status = 200
    h.poll()
    assert [s["cost_usd_since_previous"] for s in samples(h)[3:]] == [0.0, 0.0, 0.0]


def test_history_view_formats_reset_times() -> None:
    h = Harness()
    h.poll()
    out = h.poller.history(provider="opencode", limit=2)
    assert len(out["samples"]) == 2
    assert {s["resets_at"] for s in out["samples"]} <= {
        "2027-01-15T08:00:00Z", "2027-01-18T00:00:00Z", "2027-02-01T00:00:00Z"}


def test_reload_keeps_the_snapshot_while_url_and_source_are_unchanged() -> None:
    h = Harness()
    h.poll()
    h.poller.reload(make_config(key="sk-rotated-key"))  # only the key changed
    assert h.entry()["state"] == "fresh"
    assert h.metrics.quota_percent.value(provider="opencode", window="rolling") == 12.5

    h.poller.reload(make_config("https://opencode.ai/zen/go/v2"))
    e = h.entry()
    assert (e["state"], e["reason"], e["windows"]) == ("unknown", "never polled", {})
    assert h.metrics.quota_percent.value(provider="opencode", window="rolling") is None

    h.poller.reload(make_config())  # back to the first URL: the old data is gone too
    assert h.entry()["state"] == "unknown"


def test_reload_that_removes_the_source_drops_the_provider() -> None:
    h = Harness()
    h.poll()
    h.poller.reload(make_config(quota=False))
    assert h.view() == {"providers": []}
    assert h.metrics.quota_percent.samples() == {}
    h.poll()  # nothing to poll
    assert len(h.upstream.calls) == 1


def test_a_snapshot_of_an_old_url_in_the_store_does_not_count() -> None:
    h = Harness()
    h.poll()
    other = Harness(make_config("https://opencode.ai/zen/go/v2"))
    other.store = h.store
    other.poller._store = h.store
    assert other.entry()["state"] == "unknown"


def test_quota_percent_gauge_follows_fresh_data_only() -> None:
    h = Harness()
    h.poll()
    assert h.metrics.quota_percent.samples() == {
        ("opencode", "rolling"): 12.5, ("opencode", "weekly"): 40.0,
        ("opencode", "monthly"): 70.0}
    h.upstream.status = 500
    h.clock.advance(301)
    h.poll()
    assert h.metrics.quota_percent.samples() == {}


def test_poll_once_never_raises() -> None:
    h = Harness()
    h.store.fail = {"get_quota_snapshots", "put_quota_snapshot", "append_quota_history"}
    h.poll()
    h.store.fail = {"get_quota_snapshots"}
    e = h.entry()
    assert (e["state"], e["reason"]) == ("unknown", "the quota store could not be read")

    class Broken:
        name = "opencode-go"

        async def fetch(self, client: Any, provider: ProviderSpec,
                        timeout: float) -> QuotaReading:
            raise ValueError("boom")

    h = Harness(sources={"opencode-go": Broken()})
    h.poll()
    assert h.entry()["reason"] == "no successful read yet: the quota source failed: ValueError"


def test_run_polls_every_quota_poll_secs_until_stopped() -> None:
    h = Harness()

    async def main() -> None:
        stop = asyncio.Event()
        puts = h.store.put_quota_snapshot

        def counting_put(provider: str, snapshot: dict[str, Any]) -> None:
            puts(provider, snapshot)
            if len(h.upstream.calls) == 3:
                stop.set()

        h.store.put_quota_snapshot = counting_put  # type: ignore[method-assign]
        await asyncio.wait_for(h.poller.run(stop), 5)

    asyncio.run(main())
    assert len(h.upstream.calls) == 3
    assert h.clock.slept == [60, 60]
    assert h.store.snapshots["opencode"]["fetched_at"] == START + 120


def test_run_stops_while_waiting() -> None:
    class SlowClock(FakeClock):
        async def sleep(self, seconds: float) -> None:
            await asyncio.Event().wait()

    h = Harness()
    h.poller._clock = SlowClock(start=START)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(h.poller.run(stop))
        for _ in range(20):
            await asyncio.sleep(0)
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert len(h.upstream.calls) == 1


def test_the_key_never_appears_in_logs_snapshots_history_or_views(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    class Echo:
        """A careless source that puts the key in its reason."""

        name = "opencode-go"

        async def fetch(self, client: Any, provider: ProviderSpec,
                        timeout: float) -> QuotaReading:
            return QuotaReading.failed(f"rejected key {provider.api_key}")

    def cost_since(provider: str, since_ts: float) -> float:
        raise RuntimeError(f"cannot price calls made with {KEY}")

    h = Harness(cost_since=cost_since, timeout=0.05)
    scenarios: list[tuple[int, Any, bool]] = [
        (200, usage_body(), False), (401, {}, False), (403, {}, False), (500, {}, False),
        (200, b"not json " + KEY.encode(), False), (200, {"usage": {KEY: {}}}, False),
        (200, usage_body(status=KEY[:60]), False), (200, usage_body(rolling=50), False),
        (200, usage_body(), True)]
    for status, body, hang in scenarios:
        h.upstream.status, h.upstream.body, h.upstream.hang = status, body, hang
        h.clock.advance(HISTORY_EVERY_SECS)
        h.poll()
        h.view()
        h.returned.append(h.poller.history())
    h.store.fail = {"put_quota_snapshot", "get_quota_snapshots"}
    h.poll()
    h.view()

    echo = Harness(sources={"opencode-go": Echo()})
    echo.poll()
    echo.returned.append(echo.store.snapshots)
    assert "[redacted]" in echo.entry()["reason"]

    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in h.upstream.calls)
    assert len(caplog.records) > 3
    for record in caplog.records:
        assert KEY not in record.getMessage()
        assert KEY not in caplog.text
    for harness in (h, echo):
        dumped = json.dumps([harness.returned, harness.store.snapshots, harness.store.history])
        assert KEY not in dumped


def test_a_follower_reads_what_the_poller_stored_and_never_polls() -> None:
    """``follows`` (a worker other than worker 0 of ``serve --workers N``): a round reads
    the stored snapshots into this process's gauge and calls no source; a reload leaves
    the store to the polling process."""
    poller = Harness()
    poller.poll()
    follower = Harness(store=poller.store)  # one store: the workers' shared file
    follower.poller.follows = True
    asyncio.run(follower.poller.follow_once())
    assert follower.upstream.calls == []
    assert follower.metrics.quota_percent.value(provider="opencode", window="rolling") == 12.5
    assert follower.entry()["state"] == "fresh"
    before = json.dumps(poller.store.snapshots, sort_keys=True)
    follower.poller.reload(make_config("https://elsewhere.example/v1"))
    assert json.dumps(poller.store.snapshots, sort_keys=True) == before
