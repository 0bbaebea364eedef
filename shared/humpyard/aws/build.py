"""One ``Instance`` per Lambda instance: the gateway and its app, built once.

``Instance.build()`` (on the first invocation, never at import) checks the
environment (``LambdaEnv``), reads the keys secret if one is named, loads
the TOML configuration and wires the gateway to DynamoDB: ``DynamoDBStore``
for overrides, ledger, spend and quota; one ``SharedState`` per instance,
the one read (every ``state_refresh_ms`` at most) that brings breakers,
overrides, spend and latency buckets back together; ``SharedHealth`` for
breakers (a probe lease is a conditional write, so one instance probes);
and ``SharedLatency`` for the figures ``fastest`` routes rank by.

Ledger writes go through the ``BackgroundWriter`` (bounded, batched, counted
in ``humpyard_ledger_*``) to the store, whose own retries cover throttling,
5xx and connection errors with backoff; a decision is a conditional put, so
a retry never records it twice. A write that still fails is logged with
its whole payload as JSON and counted in ``humpyard_ledger_lost_total``.
Stats are summed in the instance and written every ``STATS_FLUSH_SECS``
(with a request's flush, when due) and on shutdown.
Everything is reused while the instance is warm; nothing is module-global
but the ``Once`` each entry point holds.

``Instance.flush()`` is what every request (``FlushMiddleware``) and every
scheduled run ends with: the writer drained (bounded by
``HUMPYARD_FLUSH_TIMEOUT_SECS``; the stats when due), latency samples when
``LATENCY_FLUSH_SECS`` have passed, and the metrics handed to the instance's
``MetricsCadence`` (``aws/emission.py``), which prints them to stdout as
CloudWatch EMF when due: counters and histograms add up in the instance and go
out once a minute (or every 100 requests, and at once when an alarmed counter
moved), gauges at most every ``HUMPYARD_GAUGE_INTERVAL_SECS``; the scheduled
poller prints everything on every run. So an instance writes at most one
latency item per 30 s and one stats item per group and hour a minute, and its
log bytes do not grow with each request (docs/deploy.md, "What it costs");
``close`` writes the rest.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Generic, TypeVar

from humpyard.aws.config_source import (
    AppConfigSource,
    ConfigReloader,
    ConfigSource,
    FileSource,
    S3Source,
)
from humpyard.aws.emission import MetricsCadence
from humpyard.aws.env import LambdaEnv
from humpyard.aws.flush import FlushMiddleware
from humpyard.aws.log import lambda_logger
from humpyard.aws.secrets import secret_environ
from humpyard.aws.tracing import TracingMiddleware, traced, tracer
from humpyard.clock import Clock, SystemClock
from humpyard.config import load_config_text
from humpyard.errors import ConfigError, ForbiddenError, HumpyardError
from humpyard.gateway import Gateway
from humpyard.recording import record_refusal

if TYPE_CHECKING:
    import httpx
    from aws_lambda_powertools import Tracer
    from aws_lambda_powertools.logging import Logger

log = logging.getLogger("humpyard.aws")

T = TypeVar("T")

STATS_FLUSH_SECS = 300.0
"""How long stats wait in an instance before they are written (see ``dynamodb_stats``)."""
LATENCY_FLUSH_SECS = 30.0
"""How often an instance writes its latency samples and re-reads everyone's: the buckets
are a minute wide, so a half-minute delay moves no figure by more than a bucket would."""


def _secretsmanager_client() -> Any:
    from humpyard.aws.clients import client
    return client("secretsmanager")


def build_gateway(env: LambdaEnv, *, dynamodb: Any = None, secretsmanager: Any = None,
                  s3: Any = None, appconfig: Any = None,
                  environ: Mapping[str, str] | None = None, clock: Clock | None = None,
                  transport: httpx.AsyncBaseTransport | None = None) -> Gateway:
    """The gateway of one instance, wired to the DynamoDB tables ``env`` names.

    ``dynamodb``/``secretsmanager``/``s3``/``appconfig`` (AWS clients), ``clock`` and
    ``transport`` are the seams; ``environ`` (default ``os.environ``) is what
    ``api_key_env``/``key_env`` resolve against, with the secret's pairs laid
    over it.
    """
    from humpyard.aws.clients import dynamodb_client
    from humpyard.store.dynamodb import DynamoDBStore
    from humpyard.store.writer import BackgroundWriter

    clock = clock or SystemClock()
    values = dict(os.environ if environ is None else environ)
    if env.secrets_arn:
        values.update(secret_environ(secretsmanager or _secretsmanager_client(),
                                     env.secrets_arn))
    source = config_source(env, s3, appconfig, clock)
    text, version = source.read()
    config = load_config_text(text, source=source.name, env=values)
    retention = config.ledger.decision_retention_days if config.ledger else 30
    store = DynamoDBStore(env.state_table, env.ledger_table, clock=clock,
                          client=dynamodb if dynamodb is not None else dynamodb_client(),
                          retention_days=retention, stats_flush_secs=STATS_FLUSH_SECS)
    writer = BackgroundWriter(store, clock=clock)
    # The store shares breakers and latency: the Gateway builds SharedHealth and
    # SharedLatency on its one SharedState itself.
    gw = Gateway(config, store, transport=transport, clock=clock, writer=writer,
                 latency_flush_secs=LATENCY_FLUSH_SECS)
    store.on_conflict = gw.metrics.transaction_conflicts.inc
    gw.record_before_reply = True  # the instance may be frozen after its last byte
    gw.reloader = ConfigReloader(source, lambda: gw.config, gw.swap_config, values, clock,
                                 version=version)
    return gw


def config_source(env: LambdaEnv, s3: Any = None, appconfig: Any = None,
                  clock: Clock | None = None) -> ConfigSource:
    """The S3 object ``HUMPYARD_CONFIG_S3`` names, or the AppConfig profile
    ``HUMPYARD_CONFIG_APPCONFIG`` names, else the bundled file."""
    from humpyard.aws.clients import client
    if env.config_s3 and env.config_appconfig:
        raise ConfigError("HUMPYARD_CONFIG_S3 and HUMPYARD_CONFIG_APPCONFIG are both set; "
                          "the configuration comes from one of them")
    if env.config_s3:
        return S3Source(env.config_s3, s3 if s3 is not None else client("s3"))
    if env.config_appconfig:
        return AppConfigSource(env.config_appconfig, appconfig if appconfig is not None
                               else client("appconfigdata"), clock or SystemClock())
    return FileSource(env.config_file)


@dataclass
class Instance:
    """A warm Lambda instance: its gateway, the wrapped app, its logger and event loop,
    and its X-Ray tracer when ``HUMPYARD_TRACING`` is on (``aws/tracing.py``)."""

    env: LambdaEnv
    gateway: Gateway
    logger: Logger
    tracer: Tracer | None = None
    surfaces: tuple[str, ...] = ("client",)
    stdout: IO[str] | None = None  # None: sys.stdout, as it is when printing
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    cadence: MetricsCadence = field(init=False, repr=False)
    _http: Callable[..., Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        env = self.env
        self.cadence = MetricsCadence(
            self.gateway.metrics.metrics, self.stdout, self.gateway.clock,
            namespace=env.namespace, service=env.service,
            interval_secs=env.metrics_interval_secs,
            gauge_interval_secs=env.gauge_interval_secs,
            refresh_gauges=self.gateway.refresh_gauges)

    @classmethod
    def build(cls, environ: Mapping[str, str] | None = None, *,
              surfaces: tuple[str, ...] = ("client",), **seams: Any) -> Instance:
        """Check the environment and build everything (see ``build_gateway`` for ``seams``).

        ``surfaces``: what of the app's route table this function serves (its entry
        point says; ``http/app.py``): the client function never has an admin path."""
        env = LambdaEnv.from_environ(environ)
        logger = lambda_logger(env.service)
        xray = tracer(env)  # before the AWS clients, so their calls are traced
        gw = build_gateway(env, environ=environ, **seams)
        # OpenTelemetry through the ADOT layer (or OTEL_* set by hand): telemetry.py
        from humpyard import telemetry
        gw.spans = telemetry.from_environ(os.environ if environ is None else environ)
        for warning in gw.config.warnings:
            logger.warning("configuration: %s", warning)
        logger.info("instance ready", extra={"config": str(env.config_file),
                                             "state_table": env.state_table,
                                             "ledger_table": env.ledger_table})
        return cls(env=env, gateway=gw, logger=logger, tracer=xray, surfaces=tuple(surfaces))

    def asgi_app(self, *, adopt_trace_header: bool = True) -> Any:
        """The gateway's Starlette app, flushed before the last byte of every response
        (``FlushMiddleware``), each request traced when tracing is on.

        ``adopt_trace_header``: the trace comes from the ``x-amzn-trace-id`` header
        (the Lambda Web Adapter), not from the runtime (Mangum; see ``aws/tracing.py``).
        """
        from humpyard.http.app import create_app

        app = create_app(self.gateway.config, gateway=self.gateway, surfaces=self.surfaces)
        flushed = FlushMiddleware(app, self.flush, self.logger.set_correlation_id,
                                  on_shutdown=self.shutdown,
                                  before_request=self.gateway.reloader.maybe_reload,
                                  now=self.gateway.clock.now)
        if self.tracer is None:
            return flushed
        return TracingMiddleware(flushed, self.tracer, adopt_trace_header=adopt_trace_header)

    def http(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Serve one API Gateway REST proxy event: Mangum (lifespan off) over ``asgi_app``.

        Log lines carry the Lambda context (function, request id, cold start)
        besides the correlation id. Every invocation runs on the instance's loop.
        Refused before the app sees it (``boundary``): a path with an encoded slash
        (Mangum decodes the path once more, which would turn ``/v1%2Fhealth`` into
        ``/v1/health``), and on an admin function an event without an IAM caller.
        """
        refused = boundary(event, self.surfaces)
        if refused is not None:
            record_refusal(self.gateway.services, refused[1])
            self.flush_now()
            return refused[0]
        if self._http is None:
            from mangum import Mangum

            asyncio.set_event_loop(self.loop)
            mangum = Mangum(self.asgi_app(adopt_trace_header=False), lifespan="off")
            self._http = self.logger.inject_lambda_context(mangum, clear_state=False)
        asyncio.set_event_loop(self.loop)
        return self._http(event, context)  # type: ignore[no-any-return]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the instance's loop (the upstream client is bound to it)."""
        asyncio.set_event_loop(self.loop)
        return self.loop.run_until_complete(coro)

    async def flush(self, *, gauges: bool = False) -> None:
        """Make the work so far durable and observable; see the module docstring.

        ``gauges``: print the gauges whether or not they are due (the poller)."""
        await traced(self.tracer, "## ledger flush",
                     lambda: asyncio.to_thread(self.flush_now, gauges=gauges))

    def flush_now(self, *, gauges: bool = False) -> None:
        """``flush`` for callers outside the event loop (blocking)."""
        gw = self.gateway
        if not gw.writer.flush(self.env.flush_timeout_secs):
            log.error("ledger writes still pending (the store unavailable, or %.1f s "
                      "passed); pending=%d", self.env.flush_timeout_secs, gw.writer.pending)
        leases = gw.allowance.leases
        if leases is not None and not leases.drain(self.env.flush_timeout_secs):
            log.error("lease writes still pending after %.1f s",  # per-key limit slots,
                      self.env.flush_timeout_secs)  # settled tokens: written when it thaws
        flush_health = getattr(gw.health, "flush", None)
        if flush_health is not None and not flush_health(self.env.flush_timeout_secs):
            log.error("breaker writes still pending after %.1f s",
                      self.env.flush_timeout_secs)  # written when the instance thaws
        flush_due = getattr(gw.latency_book, "flush_due", None)
        if flush_due is not None:
            flush_due()  # never raises: failed samples stay pending
        if gauges:
            self.cadence.print_all()
        else:
            self.cadence.after_request()
        if gw.spans is not None:  # the instance may be frozen after this request
            gw.spans.flush()

    async def shutdown(self) -> None:
        """The instance is going away: write pending latency samples, close the gateway,
        print the metrics still waiting."""
        self.logger.info("instance shutting down")
        flush_latency = getattr(self.gateway.latency_book, "flush", None)
        if flush_latency is not None:
            await asyncio.to_thread(flush_latency)
        await self.gateway.aclose()
        try:
            self.cadence.print_pending()
        except (OSError, ValueError):  # stdout gone; nothing else to tell it to
            log.warning("could not print the metrics still waiting at shutdown")

    def close(self) -> None:
        """``shutdown`` on the instance's own loop, then close the loop (tests, Mangum)."""
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.shutdown())
            self.loop.close()


def boundary(event: Mapping[str, Any], surfaces: tuple[str, ...]
             ) -> tuple[dict[str, Any], HumpyardError] | None:
    """The proxy answer (and the refusal's reason) for an event no app may see, or None.

    API Gateway hands the path as the client wrote it; a ``%2F`` inside a segment
    is not a separator, so such a path names nothing here (404) whatever it would
    decode to. An admin function also answers only events API Gateway signed off
    with IAM (``requestContext.identity`` names the caller), so the admin surface
    does not rest on the API's routing alone.
    """
    path = str(event.get("path") or "")
    if "%" in path and not _named(path, surfaces):
        return _refusal(HumpyardError("no such path: an encoded '/' or '\\' is not a "
                                      "separator", status=404, code="not_found"))
    if "admin" in surfaces:
        identity = (event.get("requestContext") or {}).get("identity") or {}
        if not (identity.get("userArn") or identity.get("caller")):
            return _refusal(ForbiddenError("the admin API answers IAM-signed requests only"))
    return None


@functools.cache
def _remainders(surfaces: tuple[str, ...]) -> tuple[tuple[bytes, ...], ...]:
    from humpyard.http.app import remainder_prefixes, route_table
    return remainder_prefixes(r for s, r in route_table() if s in surfaces)


def _named(path: str, surfaces: tuple[str, ...]) -> bool:
    from humpyard.http.app import named_by_segments
    return named_by_segments(path.encode("latin-1", "replace"), _remainders(surfaces))


def _refusal(err: HumpyardError) -> tuple[dict[str, Any], HumpyardError]:
    body = {"error": {"message": err.message, "type": err.type, "code": err.code}}
    return ({"statusCode": err.status, "headers": {"content-type": "application/json"},
             "body": json.dumps(body), "isBase64Encoded": False}, err)


class Once(Generic[T]):
    """Build a value on first use and keep it: the per-instance cache of an entry point.

    A build that raises is not kept, so the next invocation tries again (and
    reports the same clear error if nothing changed).
    """

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._build()
                value = self._value
        return value
