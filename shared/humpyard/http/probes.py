"""``GET /healthz`` and ``GET /readyz``: what load balancers, ECS and Kubernetes probe.

Neither needs a key, and neither shows anything from the configuration or a
store error's text (the reason is logged instead), so an unauthenticated
caller learns only "up" and "ready" (docs/operations.md, "Health probes").

- ``/healthz`` (liveness): the process answers HTTP. Always 200; it touches no
  state, so a slow store or upstream never gets the process restarted.
- ``/readyz`` (readiness): a configuration is loaded (``serve`` refuses to start
  without one and a failed reload keeps the one before), the ledger writer is
  running and the store answers ``ping`` within ``READY_TIMEOUT_SECS``; 503
  otherwise, naming the check that failed. Each transition is logged once. The
  store's answer is shared by concurrent probes and reused for
  ``STORE_CHECK_SECS``, and at most one ``ping`` runs at a time: one that has
  not answered is not asked again alongside (``_store_check``).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response

from humpyard.errors import StoreError
from humpyard.http.errors import json_response
from humpyard.http.guard import gateway

log = logging.getLogger("humpyard.probes")

READY_TIMEOUT_SECS = 2.0
"""How long ``/readyz`` waits for the store before it counts as unreachable (probes
typically time out after 1 to 5 seconds)."""
STORE_CHECK_SECS = 1.0
"""A store answer is reused for this long, and concurrent probes share the one check
in flight: a flood of unauthenticated ``/readyz`` calls asks the store about once a
second and never fills the worker threads that keyed store reads use."""

_NO_STORE = {"cache-control": "no-store"}


async def healthz(request: Request) -> Response:
    """``GET /healthz``: 200 while the process serves HTTP."""
    return json_response({"status": "ok"}, headers=_NO_STORE)


async def readyz(request: Request) -> Response:
    """``GET /readyz``: 200 when the gateway can serve and record, else 503."""
    gw = gateway(request)
    store, why = await _shared_store_check(request)
    checks = {"config": "ok" if gw.config is not None else "not loaded",
              "writer": "ok" if getattr(gw.writer, "running", True) else "stopped",
              "store": store}
    ready = all(v == "ok" for v in checks.values())
    state = request.app.state
    if getattr(state, "probe_ready", True) != ready:  # log transitions, not every probe
        state.probe_ready = ready
        if ready:
            log.warning("ready again: every readiness check passes")
        else:
            log.warning("not ready: %s%s", ", ".join(f"{k} {v}" for k, v in checks.items()
                                                      if v != "ok"), f" ({why})" if why else "")
    return json_response({"status": "ready" if ready else "not ready", "checks": checks},
                         status=200 if ready else 503, headers=_NO_STORE)


async def _shared_store_check(request: Request) -> tuple[str, str]:
    """``_store_check``, at most one in flight and reused for ``STORE_CHECK_SECS``."""
    state, gw = request.app.state, gateway(request)
    cached = getattr(state, "probe_store", None)
    if cached is not None and gw.clock.monotonic() - cached[0] < STORE_CHECK_SECS:
        return cached[1]  # type: ignore[no-any-return]
    task = getattr(state, "probe_task", None)
    if task is None or task.done():
        task = asyncio.ensure_future(_store_check(state, gw.store))
        state.probe_task = task
    result: tuple[str, str] = await asyncio.shield(task)
    state.probe_store = (gw.clock.monotonic(), result)
    return result


async def _store_check(state: State, store: object) -> tuple[str, str]:
    """("ok" | "unreachable" | "timeout", the reason for the log).

    The ``ping`` runs on a thread that a timeout here cannot stop: a store that
    does not answer holds it for its client's own timeouts and retries (for
    DynamoDB, seconds; a black hole's connects, longer). While it is held, a new
    check answers "timeout" at once instead of starting another: probes every
    few seconds would otherwise each hold one more of the threads that
    ``asyncio.to_thread`` shares with the rest of the process."""
    ping = getattr(store, "ping", None)
    if ping is None:  # a test's stand-in store without the method: nothing to ask
        return "ok", ""
    held = getattr(state, "probe_ping", None)
    if held is not None and not held.done():  # waited for READY_TIMEOUT_SECS already
        return "timeout", f"no answer within {READY_TIMEOUT_SECS:.1f} s"
    pinging = asyncio.get_running_loop().run_in_executor(None, ping)
    # Retrieved whenever it ends: once ``wait_for`` cancels the shield, the shield no
    # longer does, and asyncio would log a failure that ends later as never retrieved.
    pinging.add_done_callback(_retrieve)
    state.probe_ping = pinging
    try:  # shielded: a timeout leaves the ping to finish
        await asyncio.wait_for(asyncio.shield(pinging), READY_TIMEOUT_SECS)
    except TimeoutError:
        return "timeout", f"no answer within {READY_TIMEOUT_SECS:.1f} s"
    except StoreError as exc:
        return "unreachable", str(exc)
    except Exception as exc:  # noqa: BLE001 - a probe answers 503, never a 500
        return "unreachable", f"{type(exc).__name__}: {exc}"
    return "ok", ""


def _retrieve(done: asyncio.Future[None]) -> None:
    """Mark a ping's outcome as seen (the check that wanted it has answered already)."""
    if not done.cancelled():
        done.exception()
