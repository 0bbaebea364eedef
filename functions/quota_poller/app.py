"""Lambda entry point: the EventBridge schedule (``QuotaPollSchedule`` in the template).

Each run (runs do not overlap in practice: one a minute at most, each a few
seconds; if two did, both would write the same snapshots and the expiry
audit is exactly-once by contract):

1. polls every provider that names a ``quota_source`` (``QuotaPoller.poll_once``
   never raises; a failing source leaves its snapshot to go stale);
2. folds the latency buckets every instance flushed into one figure per
   target and publishes it (``humpyard_target_latency_seconds``), and
   records the expiry of overrides that ran out (audit entries);
3. publishes every gauge (override age, endpoint states, latency figures, budgets,
   quota percent) and whatever counters are waiting as EMF, so
   ``HumpyardOverrideLong`` is evaluated even when no client calls.

Returns a small summary, also logged.
"""

from __future__ import annotations

from typing import Any

from humpyard.aws.build import Instance, Once

_instance = Once(Instance.build)


async def _run(instance: Instance) -> dict[str, Any]:
    gw = instance.gateway
    await gw.quota.poll_once()
    now = gw.clock.now()
    figures = gw.latency_book.figures(now)
    for target, fig in figures.items():
        gw.metrics.target_latency.set(fig.ms / 1000, target=target)
    expired = gw.expire_overrides()  # the expiry audit, on this schedule (docs/routing.md)
    gw.invalidate()
    await instance.flush(gauges=True)
    return {"quota_providers": len(gw.quota.providers()), "latency_targets": len(figures),
            "overrides_expired": [ov.id for ov in expired]}


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """EventBridge scheduled event in; a summary out."""
    instance = _instance.get()
    with instance.logger.append_context_keys(schedule_event_id=event.get("id")):
        summary = instance.run(_run(instance))
        instance.logger.info("scheduled run done", extra=summary)
    return summary
