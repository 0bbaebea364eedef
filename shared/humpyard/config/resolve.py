"""Cross-reference checks and resolution: raw file → ``Config``.

Every error names the key path (in the notation of ``config/problems.py``)
and the bad value, an unknown name comes with the closest configured one, and
all errors found are reported together, with the schema errors found before
(``problems``), so one ``humpyard check`` run shows everything to fix.
"""

from __future__ import annotations

import hashlib
import importlib.util
import ipaddress
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from humpyard.config.models import RawConfig, Router, SelectRule
from humpyard.config.problems import Salvage, did_you_mean, path
from humpyard.config.provider_models import Provider
from humpyard.config.public import public_document
from humpyard.config.resolve_routes import (
    DEFAULT_FALLBACK,
    check_select,
    resolve_routes,
    route_known,
    route_names,
)
from humpyard.config.spec import (
    AnswerLimits,
    BudgetSpec,
    ClientsSpec,
    Config,
    EndpointSpec,
    HealthSpec,
    KeySpec,
    LedgerSpec,
    OverridesSpec,
    ProviderSpec,
    RouterSpec,
    RouteSpec,
    SelectRuleSpec,
    ServerSpec,
    StoreSpec,
    TargetSpec,
    WhenSpec,
)
from humpyard.errors import ConfigError

UNSET_ENV_MODES = ("serve", "check", "strict")
"""How an unset variable named by ``api_key_env`` or ``key_env`` counts: ``serve``
(the default) warns for a provider's (its calls go without a key) and refuses a
client key's (a gateway must not start with a key missing); ``check`` warns for
both (``humpyard check`` on a machine without the secrets); ``strict`` refuses
both (``humpyard check --strict``). docs/configuration.md, "Unset key variables"."""


def resolve(raw: RawConfig, env: Mapping[str, str], *, source: str = "<memory>",
            digest: str = "", problems: Sequence[str] = (), salvage: Salvage | None = None,
            warnings: Sequence[str] = (), includes: tuple[str, ...] = (),
            unset_env: str = "serve") -> Config:
    """Check every name the file uses and build the runtime ``Config``.

    ``problems`` are errors found before (the schema's, an include's); with
    ``salvage`` (what failed the schema) a reference to a broken entry is not
    reported again as unknown. ``ConfigError`` lists every error, then the warnings.
    ``unset_env`` is one of ``UNSET_ENV_MODES``.
    """
    if unset_env not in UNSET_ENV_MODES:
        raise ValueError(f"unset_env: one of {UNSET_ENV_MODES}, got {unset_env!r}")
    errors: list[str] = list(problems)
    warned: list[str] = list(warnings)
    known = salvage or Salvage()
    _check_names_themselves(raw, errors)
    providers = _providers(raw, env, errors, unset=errors if unset_env == "strict" else warned)
    targets = _targets(raw, errors, known)
    routes = resolve_routes(raw, targets, errors, known)
    for tname in targets:
        if tname not in routes:
            routes[tname] = RouteSpec(name=tname, type="passthrough", targets=(tname,),
                                      fallback_on=DEFAULT_FALLBACK, implicit=True)
    check_select(raw, routes, errors, known)
    keys = _keys(raw, routes, env, errors, known,
                 unset=warned if unset_env == "check" else errors)
    if not targets and not errors and not known.any_broken("targets"):
        warned.append("the configuration declares no targets: there is nothing to route to, "
                      "and every request gets 404 unknown_model")
    store = _store(raw, errors, known)
    if errors:
        raise ConfigError(f"invalid configuration ({source}):\n  " + "\n  ".join(
            [*errors, *(f"warning: {w}" for w in warned)]))
    h, rt, ov = raw.health, raw.router, raw.overrides
    return Config(
        providers=providers, targets=targets, routes=routes,
        select=tuple(_select_rule(r) for r in raw.select), keys=keys,
        health=HealthSpec(failure_threshold=h.failure_threshold, cooldown_secs=h.cooldown_secs,
                          max_cooldown_secs=h.max_cooldown_secs,
                          max_retry_after_secs=h.max_retry_after_secs,
                          skip_cold_targets=h.skip_cold_targets),
        router=RouterSpec(probe_interval_secs=rt.probe_interval_secs,
                          probe_timeout_secs=rt.probe_timeout_secs,
                          max_concurrent=rt.max_concurrent, slot_wait_secs=rt.slot_wait_secs,
                          limits=_limits(rt),
                          stream_first_heartbeat_secs=rt.stream_first_heartbeat_secs),
        overrides=OverridesSpec(default_secs=ov.default_secs, max_secs=ov.max_secs),
        ledger=LedgerSpec(path=raw.ledger.path,
                          decision_retention_days=raw.ledger.decision_retention_days)
        if raw.ledger else (LedgerSpec() if store is not None and store.backend != "memory"
                            else None),
        store=store,
        clients=ClientsSpec(keep_billing_header=raw.clients.keep_billing_header,
                            forward_user=raw.clients.forward_user),
        server=ServerSpec(**raw.server.model_dump()),
        quota_poll_secs=raw.quota_poll_secs, quota_stale_secs=raw.quota_stale_secs,
        reload_poll_secs=raw.reload_poll_secs, state_refresh_ms=raw.state_refresh_ms,
        max_body_bytes=raw.max_body_bytes,
        stream_heartbeat_secs=raw.stream_heartbeat_secs, log_requests=raw.log_requests,
        direct_relay=raw.direct_relay,
        refused_per_minute=raw.refused_per_minute,
        public=public_document(raw.model_dump(mode="json", by_alias=True, exclude_none=True),
                               routes),
        source=source, digest=digest, warnings=tuple(warned), includes=includes)


def _store(raw: RawConfig, errors: list[str], known: Salvage) -> StoreSpec | None:
    """``[store]`` resolved: the backend (default from ``[ledger]``), and for DynamoDB
    both tables; the endpoint URL is an http(s) URL without credentials, query or
    fragment (it is shown by ``GET /v1/config``)."""
    st = raw.store
    if st is None:
        return None
    backend = st.backend or ("sqlite" if raw.ledger else "memory")
    if backend == "dynamodb":
        for name in ("state_table", "ledger_table"):
            if getattr(st, name) is None and not known.exists("store", name):
                errors.append(f"{path('store', name)}: required when backend = "
                              '"dynamodb" (the template\'s stack outputs StateTableName '
                              "and LedgerTableName name them)")
    elif not known.exists("store", "backend"):  # an unreadable backend is said once
        for name in ("state_table", "ledger_table", "region", "endpoint_url"):
            if getattr(st, name) is not None:
                errors.append(f"{path('store', name)}: only for backend = \"dynamodb\" "
                              f"(this one is {backend!r})")
    if st.endpoint_url is not None:
        url = urlsplit(st.endpoint_url)
        if (url.scheme not in ("http", "https") or not url.hostname or url.username
                or url.password or url.query or url.fragment):
            errors.append(f"{path('store', 'endpoint_url')}: an http:// or https:// URL "
                          "of a DynamoDB-compatible endpoint, without credentials, query "
                          "or fragment (credentials come from the AWS credential chain)")
    return StoreSpec(backend=backend, state_table=st.state_table,
                     ledger_table=st.ledger_table, region=st.region,
                     endpoint_url=st.endpoint_url, stats_flush_secs=st.stats_flush_secs,
                     batch_ms=st.batch_ms)


MAX_NAME_CHARS = 256
"""The longest route, target, provider or key name: a client names a route or a
target as its ``model``, which the intake refuses past this length, and every
name can reach a response header, a metric label or a log line."""


def _check_names_themselves(raw: RawConfig, errors: list[str]) -> None:
    """Names in headers, labels and log lines: 1-256 printable ASCII characters."""
    for section in ("providers", "targets", "routes", "keys"):
        for name in getattr(raw, section):
            where = path(section, name)
            if len(name) > MAX_NAME_CHARS:
                errors.append(f"{where}: a name has at most {MAX_NAME_CHARS} characters, "
                              f"this one {len(name)}")
            elif not name or not all(" " <= c <= "~" for c in name):
                errors.append(f"{where}: a name is 1 to {MAX_NAME_CHARS} printable ASCII "
                              "characters (it reaches response headers, metric labels "
                              "and log lines)")


def _select_rule(rule: SelectRule) -> SelectRuleSpec:
    w = rule.when
    return SelectRuleSpec(route=rule.route, name=rule.name, when=WhenSpec(
        model=w.model, key=w.key, profile=w.profile, tag=w.tag, header=w.header,
        agent=w.agent, task=w.task, subagent=w.subagent, stream=w.stream,
        prompt_tokens=w.prompt_tokens, tools=w.tools, images=w.images))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """The key in ``name``, without the surrounding whitespace a key file's last
    newline leaves (a presented key is stripped the same way); None if unset or blank."""
    return (env.get(name) or "").strip() or None


def _providers(raw: RawConfig, env: Mapping[str, str], errors: list[str],
               unset: list[str]) -> dict[str, ProviderSpec]:
    """The providers; an unset ``api_key_env`` goes to ``unset`` (warnings or errors)."""
    out: dict[str, ProviderSpec] = {}
    for name, p in raw.providers.items():
        key = None
        if p.api_key_env:
            key = _secret(env, p.api_key_env)
            if key is None:
                unset.append(f"{path('providers', name, 'api_key_env')}: environment "
                                f"variable {p.api_key_env} is not set; calls go without a key")
            elif not all("\x21" <= c <= "\x7e" for c in key):
                # Such a value fails in the HTTP library, whose message (and debug log) quotes it.
                errors.append(f"{path('providers', name, 'api_key_env')}: the value of "
                              f"{p.api_key_env} has characters a key cannot have (spaces, "
                              "control or non-ASCII)")
        if p.quota_source:
            parts = urlsplit(p.base_url)
            if parts.scheme != "https" and not _is_loopback(parts.hostname or ""):
                errors.append(f"{path('providers', name, 'quota_source')}: the key is only sent "
                              f"over https (or to a loopback host), but base_url is "
                              f"{p.base_url!r}")
        out[name] = ProviderSpec(
            name=name, base_url=p.base_url, headers=tuple(p.headers.items()),
            max_retries=p.max_retries, timeout_secs=p.timeout_secs,
            connect_timeout_secs=p.connect_timeout_secs, health_path=p.health_path,
            connect_retry_window_secs=p.connect_retry_window_secs,
            quota_source=p.quota_source, api_key_env=p.api_key_env, api_key=key,
            catalog_id=p.catalog_id,
            proxy=p.proxy, ca_file=p.ca_file, client_cert=p.client_cert,
            client_key=p.client_key, max_concurrent=p.max_concurrent, protocol=p.protocol,
            limits=_limits(raw.router, p), rpm_limit=p.rpm_limit, tpm_limit=p.tpm_limit,
            region=p.region)
        if p.protocol == "bedrock" and importlib.util.find_spec("botocore") is None:
            errors.append(f"{path('providers', name, 'protocol')}: \"bedrock\" signs its calls "
                          "with botocore, which is not installed: install humpyard[aws]")
    return out


def _limits(router: Router, provider: Provider | None = None) -> AnswerLimits:
    """``[router]``'s limits on answers, with a provider's own keys over them."""
    names = ("max_response_bytes", "max_decompression_ratio", "max_sse_event_bytes",
             "first_byte_timeout_secs", "idle_timeout_secs")
    values = {n: getattr(router, n) for n in names}
    if provider is not None:
        values.update({n: getattr(provider, n) for n in names
                       if getattr(provider, n) is not None})
    return AnswerLimits(**values)


def _targets(raw: RawConfig, errors: list[str], known: Salvage) -> dict[str, TargetSpec]:
    out: dict[str, TargetSpec] = {}
    for name, t in raw.targets.items():
        eps = []
        for i, e in enumerate(t.endpoints):
            if e.provider not in raw.providers and not known.exists("providers", e.provider):
                errors.append(f"{path('targets', name, 'endpoints', i, 'provider')}: unknown "
                              f"provider {e.provider!r}"
                              + did_you_mean(e.provider, known.names("providers", raw.providers),
                                             "provider"))
            eps.append(EndpointSpec(
                provider=e.provider, model=e.model, context_window=e.context_window,
                tools=e.tools, vision=e.vision,
                price_input=e.price.input if e.price else None,
                price_output=e.price.output if e.price else None,
                price_cache_read=e.price.cache_read if e.price else None,
                price_cache_write=e.price.cache_write if e.price else None,
                max_output_tokens=e.max_output_tokens, reasoning=e.reasoning,
                claude=e.claude))
            spec = raw.providers.get(e.provider)
            if e.claude is not None and spec is not None and spec.protocol != "bedrock":
                errors.append(f"{path('targets', name, 'endpoints', i, 'claude')}: only for a "
                              'provider with protocol = "bedrock"')
        out[name] = TargetSpec(name=name, endpoints=tuple(eps), class_=t.class_,
                               strengths=tuple(t.strengths), quality=t.quality)
    return out


def _keys(raw: RawConfig, routes: Mapping[str, RouteSpec], env: Mapping[str, str],
          errors: list[str], known: Salvage, *, unset: list[str]) -> dict[str, KeySpec]:
    """The client keys; an unset ``key_env`` goes to ``unset`` (errors or warnings)."""
    out: dict[str, KeySpec] = {}
    owner: dict[bytes, str] = {}  # digest -> the first key id that has it
    for kid, k in raw.keys.items():
        for i, r in enumerate(k.allowed_routes or []):
            if not route_known(r, routes, known):
                errors.append(f"{path('keys', kid, 'allowed_routes', i)}: unknown route {r!r}"
                              + did_you_mean(r, route_names(routes, known), "route"))
        if k.key_env is not None:
            value = _secret(env, k.key_env)
            if not value:
                unset.append(f"{path('keys', kid, 'key_env')}: environment variable "
                             f"{k.key_env} is not set"
                             + ("; serve refuses to start without it" if unset is not errors
                                else ""))
                continue
            digest = hashlib.sha256(value.encode()).digest()
        else:
            digest = bytes.fromhex(k.key_sha256 or "")
        first = owner.setdefault(digest, kid)
        if first != kid and digest:
            # one secret, two identities: every request would be the first's, and the
            # second's routes, budget and limits would never apply (nothing secret said)
            errors.append(f"{path('keys', kid)}: the same secret as {path('keys', first)}; "
                          "each key needs a secret of its own")
            continue
        out[kid] = KeySpec(
            id=kid, digest=digest,
            allowed_routes=frozenset(k.allowed_routes) if k.allowed_routes is not None else None,
            manage_overrides=k.manage_overrides, admin=k.admin,
            budget=BudgetSpec(k.budget.usd, k.budget.period) if k.budget else None,
            rpm_limit=k.rpm_limit, tpm_limit=k.tpm_limit,
            max_parallel_requests=k.max_parallel_requests)
    return out
