"""The gateway's metric set, declared once with fixed names and labels.

Label values are names from the configuration (routes, targets, providers,
``provider/model`` endpoints, key ids), HTTP status codes, and small fixed
vocabularies (outcomes, skip reasons, override kinds, window names). They are
never secrets: ``humpyard_budget_spend_usd{key}`` carries the key's
configured id (``[keys.<id>]``), not the key. Pass the keys to
``Metrics.forbid_label_values`` to have that checked.
"""

from __future__ import annotations

from humpyard.metrics.registry import Counter, Gauge, Histogram, Metrics

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
                   600)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
RESEND_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                 10)


class GatewayMetrics:
    """Every metric the gateway records, as attributes over one ``Metrics`` registry.

    Attribute → metric {labels}:

    - ``requests`` → ``humpyard_requests_total{route,target,status}`` counter; status is
      the HTTP status code sent to the client; "-" stands for an unknown route/target.
    - ``request_duration`` → ``humpyard_request_duration_seconds{route}`` histogram.
    - ``upstream_attempts`` → ``humpyard_upstream_attempts_total{target,provider,outcome}``
      counter; outcome is "ok" or the failure class.
    - ``target_latency`` → ``humpyard_target_latency_seconds{target}`` gauge: the smoothed
      figure ``fastest`` routes rank by.
    - ``health_skips`` → ``humpyard_health_skips_total{route,target}`` counter.
    - ``capability_skips`` → ``humpyard_capability_skips_total{route,target,reason}`` counter.
    - ``fallback_blocked`` → ``humpyard_fallback_blocked_total{route}`` counter.
    - ``retry_after_honored`` → ``humpyard_retry_after_honored_total`` counter.
    - ``overrides_active`` → ``humpyard_overrides_active{kind}`` gauge.
    - ``override_oldest_age`` → ``humpyard_override_oldest_age_seconds`` gauge (0: none).
    - ``routability_resends`` → ``humpyard_routability_resends_total{endpoint}`` counter.
    - ``routability_resend_seconds`` → ``humpyard_routability_resend_seconds`` histogram.
    - ``gateway_overhead`` → ``humpyard_gateway_overhead_seconds`` histogram: request time
      spent outside upstream calls.
    - ``endpoint_state`` → ``humpyard_endpoint_state{endpoint,state}`` gauge, 1 for the
      current state and 0 for the others.
    - ``quota_percent`` → ``humpyard_quota_percent{provider,window}`` gauge; only fresh
      quota data has a series.
    - ``budget_spend_usd`` → ``humpyard_budget_spend_usd{key}`` gauge, labelled with the
      key's id.
    - ``ledger_queue_depth`` → ``humpyard_ledger_queue_depth`` gauge: ledger items
      (decisions and spend totals) submitted and not yet written.
    - ``ledger_lag`` → ``humpyard_ledger_lag_seconds`` gauge: age of the oldest of them
      (0 when none).
    - ``ledger_batch_size`` → ``humpyard_ledger_batch_size`` histogram: items per write.
    - ``ledger_write_seconds`` → ``humpyard_ledger_write_seconds`` histogram: time per write.
    - ``ledger_lost`` → ``humpyard_ledger_lost_total{kind,reason}`` counter; kind is
      ``decision`` or ``spend``, reason ``overload`` (shed at the queue's bound) or
      ``error`` (the store refused or failed the write). See docs/operations.md.
    - ``refused`` → ``humpyard_refused_total{reason}`` counter: requests refused before
      routing, by the error's code (``invalid_api_key``, ``invalid_request``,
      ``payload_too_large``, ``unsupported_encoding``, ``unsupported_transfer_coding``,
      ``headers_too_large``, ``client_closed``, ``not_found``
      for a path nothing serves, ``forbidden`` for an admin event without an IAM
      caller in Lambda); at most ``refused_per_minute`` of them are written to the
      ledger.
    - ``upstream_in_flight`` → ``humpyard_upstream_in_flight{provider}`` gauge: upstream
      calls holding a concurrency slot (docs/upstream.md "Concurrency").
    - ``upstream_waiting`` → ``humpyard_upstream_waiting{provider}`` gauge: calls waiting
      for a slot.
    - ``upstream_slot_timeouts`` → ``humpyard_upstream_slot_timeouts_total{provider}``
      counter: calls that got no slot within ``[router] slot_wait_secs``.
    - ``transaction_conflicts`` → ``humpyard_dynamodb_transaction_conflicts_total`` counter:
      DynamoDB transactions cancelled by a conflict (and retried); docs/decisions/0002.
    - ``tokens`` → ``humpyard_tokens_total{key,route,target,kind}`` counter: tokens the
      answering target reported, kind ``input`` (every prompt token), ``output``,
      ``cache_read`` and ``cache_write`` (the part of the input read from and written
      to the provider's prompt cache); key is the key id, "-" on an open gateway.
    - ``cost_usd`` → ``humpyard_cost_usd_total{key,route,target}`` counter: USD the
      answers cost at the target's configured price.
    - ``translation_drops`` → ``humpyard_translation_drops_total{protocol,what}``
      counter: translation notes (what a client protocol's translation could not
      carry as sent); protocol is the client's (``openai``, ``anthropic``,
      ``responses``), what one of ``metrics.translation.KINDS``.
    - ``client_disconnects`` → ``humpyard_client_disconnects_total{phase}`` counter:
      clients that left before their answer was complete (recorded as 499), by what
      the request was doing: ``waiting`` (a buffered answer), ``hold_back`` (a
      stream before its first content) or ``relaying`` (a stream being sent).
    - ``connections_refused`` → ``humpyard_connections_refused_total{reason}`` counter:
      client connections ``humpyard serve`` refused or closed by its ``[server]``
      limits; reason ``max_connections`` (a 503 at the ``[server]`` cap),
      ``header_timeout`` (no complete request head within ``header_timeout_secs``),
      ``headers_too_large`` (a 431 past ``max_header_bytes``, counted while reading)
      ``body_timeout`` (a body still arriving ``body_timeout_secs`` after its head) or
      ``send_timeout`` (a client that took none of its answer for ``send_timeout_secs``)
      or ``malformed`` (bytes that are not HTTP/1.1, answered 400 ``bad_request``).
    - ``log_lines_dropped`` → ``humpyard_log_lines_dropped_total`` counter: log lines
      ``humpyard serve`` dropped because stderr's reader stopped taking them and the
      queue before it was full (``logpipe.py``); the event loop never waits for it.

    Declaring the set twice over one registry returns the same metric objects.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        m = metrics
        self.requests: Counter = m.counter(
            "humpyard_requests_total", "Client requests answered, by HTTP status.",
            ("route", "target", "status"))
        self.request_duration: Histogram = m.histogram(
            "humpyard_request_duration_seconds", "Client request duration, first byte in "
            "to last byte out.", ("route",), REQUEST_BUCKETS)
        self.upstream_attempts: Counter = m.counter(
            "humpyard_upstream_attempts_total", "Upstream attempts, by outcome (ok or the "
            "failure class).", ("target", "provider", "outcome"))
        self.target_latency: Gauge = m.gauge(
            "humpyard_target_latency_seconds", "Smoothed latency figure fastest routes rank by.",
            ("target",))
        self.health_skips: Counter = m.counter(
            "humpyard_health_skips_total", "Targets skipped because every endpoint was "
            "cooling down or unready.", ("route", "target"))
        self.capability_skips: Counter = m.counter(
            "humpyard_capability_skips_total", "Targets removed by declared capabilities.",
            ("route", "target", "reason"))
        self.fallback_blocked: Counter = m.counter(
            "humpyard_fallback_blocked_total", "Failures that fallback_on did not let move to "
            "the next target.", ("route",))
        self.retry_after_honored: Counter = m.counter(
            "humpyard_retry_after_honored_total", "Cooldowns set from a provider's stated "
            "retry time.")
        self.overrides_active: Gauge = m.gauge(
            "humpyard_overrides_active", "Runtime overrides in force.", ("kind",))
        self.override_oldest_age: Gauge = m.gauge(
            "humpyard_override_oldest_age_seconds", "Age of the oldest override in force "
            "(0 when none).")
        self.routability_resends: Counter = m.counter(
            "humpyard_routability_resends_total", "Never-delivered requests re-sent to the "
            "same endpoint.", ("endpoint",))
        self.routability_resend_seconds: Histogram = m.histogram(
            "humpyard_routability_resend_seconds", "Time spent re-dialling an endpoint that "
            "refused the connection.", (), RESEND_BUCKETS)
        self.gateway_overhead: Histogram = m.histogram(
            "humpyard_gateway_overhead_seconds", "Request time spent outside upstream calls.",
            (), OVERHEAD_BUCKETS)
        self.endpoint_state: Gauge = m.gauge(
            "humpyard_endpoint_state", "1 for the endpoint's current health state, 0 for "
            "the others.", ("endpoint", "state"))
        self.quota_percent: Gauge = m.gauge(
            "humpyard_quota_percent", "Provider-reported percent of a quota window used "
            "(fresh data only).", ("provider", "window"), unit="Percent")
        self.budget_spend_usd: Gauge = m.gauge(
            "humpyard_budget_spend_usd", "A key's spend in its current budget period, by "
            "key id.", ("key",), unit="None")
        self.ledger_queue_depth: Gauge = m.gauge(
            "humpyard_ledger_queue_depth", "Ledger items submitted and not yet written.",
            unit="Count")
        self.ledger_lag: Gauge = m.gauge(
            "humpyard_ledger_lag_seconds", "Age of the oldest ledger item not yet written "
            "(0 when none).")
        self.ledger_batch_size: Histogram = m.histogram(
            "humpyard_ledger_batch_size", "Ledger items per write.", (), BATCH_BUCKETS,
            unit="Count")
        self.ledger_write_seconds: Histogram = m.histogram(
            "humpyard_ledger_write_seconds", "Time per ledger write.", (), WRITE_BUCKETS)
        self.ledger_lost: Counter = m.counter(
            "humpyard_ledger_lost_total", "Ledger items not written, by kind (decision, "
            "spend) and reason (overload, error); each is logged with its payload.",
            ("kind", "reason"))
        self.refused: Counter = m.counter(
            "humpyard_refused_total", "Requests refused before routing (a wrong key, a "
            "malformed body, an unknown path), written to the ledger or not.", ("reason",))
        self.upstream_in_flight: Gauge = m.gauge(
            "humpyard_upstream_in_flight", "Upstream calls holding a concurrency slot.",
            ("provider",), unit="Count")
        self.upstream_waiting: Gauge = m.gauge(
            "humpyard_upstream_waiting", "Upstream calls waiting for a concurrency slot.",
            ("provider",), unit="Count")
        self.upstream_slot_timeouts: Counter = m.counter(
            "humpyard_upstream_slot_timeouts_total", "Upstream calls that got no concurrency "
            "slot in time.", ("provider",))
        self.transaction_conflicts: Counter = m.counter(
            "humpyard_dynamodb_transaction_conflicts_total", "DynamoDB transactions "
            "cancelled by a conflict (retried).")
        self.translation_drops: Counter = m.counter(
            "humpyard_translation_drops_total", "Fields a client protocol's translation "
            "could not carry as sent (each is a note in the request's decision), by what.",
            ("protocol", "what"))
        self.client_disconnects: Counter = m.counter(
            "humpyard_client_disconnects_total", "Clients that left before their answer "
            "was complete (recorded as 499), by phase (waiting, hold_back, relaying).",
            ("phase",))
        self.connections_refused: Counter = m.counter(
            "humpyard_connections_refused_total", "Client connections refused or closed "
            "by the [server] limits (max_connections, header_timeout, headers_too_large, "
            "body_timeout, send_timeout) or refused as not HTTP/1.1 (malformed).", ("reason",))
        self.log_lines_dropped: Counter = m.counter(
            "humpyard_log_lines_dropped_total", "Log lines dropped because stderr's reader "
            "took none for a while and the queue before it was full.")

        self.tokens: Counter = m.counter(
            "humpyard_tokens_total", "Tokens answered requests used, by key id, route, "
            "target and kind (input, output, cache_read, cache_write).",
            ("key", "route", "target", "kind"))
        self.cost_usd: Counter = m.counter(
            "humpyard_cost_usd_total", "USD answered requests cost at the configured "
            "prices, by key id, route and target.", ("key", "route", "target"), unit="None")
        self.direct_writes: Counter = m.counter(
            "humpyard_stream_direct_writes_total", "Stream reads relayed from the upstream's "
            "connection to the client's directly (docs/decisions/0021-direct-relay.md), by "
            "the client's protocol.", ("protocol",))

    def names(self) -> frozenset[str]:
        """The metric names this set declares."""
        return frozenset(m.name for m in (
            self.requests, self.request_duration, self.upstream_attempts, self.target_latency,
            self.health_skips, self.capability_skips, self.fallback_blocked,
            self.retry_after_honored, self.overrides_active, self.override_oldest_age,
            self.routability_resends, self.routability_resend_seconds, self.gateway_overhead,
            self.endpoint_state, self.quota_percent, self.budget_spend_usd,
            self.ledger_queue_depth, self.ledger_lag, self.ledger_batch_size,
            self.ledger_write_seconds, self.ledger_lost, self.transaction_conflicts,
            self.upstream_in_flight, self.upstream_waiting, self.upstream_slot_timeouts,
            self.refused, self.translation_drops, self.client_disconnects,
            self.connections_refused, self.log_lines_dropped, self.tokens, self.cost_usd,
            self.direct_writes))
