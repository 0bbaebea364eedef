"""``[store]`` for ``humpyard serve``: the store it names, and on DynamoDB a gateway that
shares its state with every other process (and Lambda instance) on the same tables.

``open_configured_store(config, clock)`` opens what ``[store] backend`` says:
``memory`` (nothing kept across restarts, no overrides), ``sqlite`` (the file
``[ledger] path`` names) or ``dynamodb`` (``state_table`` and
``ledger_table``, through ``BatchedDynamoDBStore``: the Lambda functions' store
code with decisions put 25 to a call). Without ``[store]`` the gateway opens
what ``[ledger]`` says, as before.

``serve_gateway(config)`` builds the gateway of one ``serve`` process. On
DynamoDB the ``Gateway`` shares its state as a Lambda instance does (one
``SharedState`` read for breakers, overrides, spend and latency;
``SharedHealth`` with the probe lease as a conditional write; ``SharedLatency``:
the gateway builds these for any store that ``shares_live``), with the
differences a long-lived process allows: the ``BackgroundWriter`` gathers
decisions for ``[store] batch_ms`` and writes them in batches (a Lambda
instance flushes before each last byte because it may be frozen; a process is
not), and the gateway's background work (``background.py``) keeps the shared
view fresh and writes latency samples from worker threads, so the event loop
never waits on DynamoDB for them. The DynamoDB client comes from botocore with the standard
credential chain (environment, profile, SSO, container or instance role);
no credential is ever read from the file, logged or shown.

``tables_from_stack(name, region)`` reads the two table names from a deployed
stack's outputs (``StateTableName``, ``LedgerTableName``): ``humpyard console
--stack`` runs the admin API and the console locally against an AWS
deployment (docs/deploy.md, "The console for an AWS deployment").
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from typing import TYPE_CHECKING, Any

from humpyard.clock import Clock, SystemClock
from humpyard.config.spec import Config, LedgerSpec, StoreSpec
from humpyard.config.stores import on_store
from humpyard.errors import ConfigError, StoreError
from humpyard.gateway import Gateway
from humpyard.store import MemoryStore, Store, open_store

if TYPE_CHECKING:
    import httpx

    from humpyard.store.dynamodb_batched import BatchedDynamoDBStore

log = logging.getLogger("humpyard.fleet")

LATENCY_FLUSH_SECS = 30.0
"""How often a process writes its latency samples (the buckets are a minute wide), as a
Lambda instance does (``aws/build.py``)."""
NEEDS_AWS = 'store.backend: "dynamodb" needs botocore: install humpyard[aws]'


def backend_of(config: Config) -> str:
    """The store backend ``config`` asks for: ``[store] backend``, else from ``[ledger]``."""
    if config.store is not None:
        return config.store.backend
    return "sqlite" if config.ledger is not None else "memory"


def check_backend(config: Config) -> None:
    """``ConfigError`` when the backend needs what is not installed (botocore)."""
    if backend_of(config) == "dynamodb" and importlib.util.find_spec("botocore") is None:
        raise ConfigError(NEEDS_AWS)


def dynamodb_client(spec: StoreSpec) -> Any:
    """A botocore DynamoDB client for ``[store]``: its region and endpoint, the standard
    credential chain, botocore's retries off (the store retries through its clock).

    ``ConfigError`` naming the field when no region is known or no credentials are
    found (their values never appear in a message)."""
    if importlib.util.find_spec("botocore") is None:
        raise ConfigError(NEEDS_AWS)
    from botocore.config import Config as BotoConfig
    from botocore.exceptions import NoRegionError

    from humpyard.aws.clients import session
    kwargs: dict[str, Any] = {}
    if spec.region:
        kwargs["region_name"] = spec.region
    if spec.endpoint_url:
        kwargs["endpoint_url"] = spec.endpoint_url
    try:
        client = session().create_client("dynamodb", config=BotoConfig(
            retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=5), **kwargs)
    except NoRegionError:
        raise ConfigError("store.region: not set, and the AWS environment names no region "
                          "(AWS_REGION, AWS_DEFAULT_REGION or a profile's region)") from None
    if session().get_credentials() is None:
        raise ConfigError('store.backend: "dynamodb" found no AWS credentials in the standard '
                          "chain (environment, AWS_PROFILE, SSO, container or instance role)")
    return client


def open_configured_store(config: Config, clock: Clock, *, dynamodb: Any = None) -> Store:
    """The store ``[store]`` names (see the module docstring); ``dynamodb`` is the seam for
    a client made elsewhere (tests)."""
    backend = backend_of(config)
    if backend == "memory":
        return MemoryStore(ledger=False)
    if backend == "sqlite":
        return open_store((config.ledger or LedgerSpec()).path, clock)
    return _dynamodb_store(config, clock, dynamodb)


def _dynamodb_store(config: Config, clock: Clock, dynamodb: Any) -> BatchedDynamoDBStore:
    from humpyard.store.dynamodb_batched import BatchedDynamoDBStore
    spec = config.store
    assert spec is not None and spec.state_table and spec.ledger_table
    client = dynamodb if dynamodb is not None else dynamodb_client(spec)
    retention = (config.ledger or LedgerSpec()).decision_retention_days
    store = BatchedDynamoDBStore(spec.state_table, spec.ledger_table, clock=clock,
                                 client=client, retention_days=retention,
                                 stats_flush_secs=spec.stats_flush_secs)
    _check_tables(store, spec)
    return store


def _no_table(exc: StoreError) -> bool:
    """The store's call failed because its table does not exist."""
    from botocore.exceptions import ClientError
    cause = exc.__cause__
    return (isinstance(cause, ClientError) and cause.response.get("Error", {}).get("Code")
            == "ResourceNotFoundException")


def _check_tables(store: BatchedDynamoDBStore, spec: StoreSpec) -> None:
    """One read of each table: a table that does not exist (a wrong name or region)
    refuses the start, naming its field; any other failure is logged and left to the
    store's retries (and the ledger table is not asked after the state table failed:
    an outage would make the start wait for the client's timeouts twice)."""
    for field, table, read in (("state_table", spec.state_table, store.ping),
                               ("ledger_table", spec.ledger_table, store.ping_ledger)):
        try:
            read()
        except StoreError as exc:
            if _no_table(exc):
                raise ConfigError(f"store.{field}: no table {table!r} in region "
                                  f"{store._client.meta.region_name}"
                                  f"{' at ' + spec.endpoint_url if spec.endpoint_url else ''} "
                                  "(humpyard store create-tables makes both)") from None
            log.warning("the %s table did not answer at start; serving anyway: %s",
                        field.split("_")[0], exc)
            return


def serve_gateway(config: Config, *, clock: Clock | None = None,
                  transport: httpx.AsyncBaseTransport | None = None,
                  dynamodb: Any = None, instance: str | None = None) -> Gateway | None:
    """The gateway ``humpyard serve`` runs on ``config``'s ``[store]``; None without a
    ``[store]`` section (the gateway opens ``[ledger]``'s store itself, as before).
    ``instance`` names the process in the store (a worker's, given by its parent, which
    gives back the probe leases of a worker that died).

    On DynamoDB the store shares live state, so the ``Gateway`` builds its shared
    health and latency itself (as for a Lambda instance and for the workers' SQLite
    file) and its background work re-reads the shared view and writes latency samples
    in threads; only the writer differs from Lambda: decisions gathered for
    ``[store] batch_ms`` and written in batches."""
    if config.store is None:
        return None
    clock = clock or SystemClock()
    if backend_of(config) != "dynamodb":
        return Gateway(config, open_configured_store(config, clock), clock=clock,
                       transport=transport)
    from humpyard.store.writer import BackgroundWriter

    spec = config.store
    store = _dynamodb_store(config, clock, dynamodb)
    writer = BackgroundWriter(store, clock=clock, linger_secs=spec.batch_ms / 1000)
    gw = Gateway(config, store, transport=transport, clock=clock, writer=writer,
                 latency_flush_secs=LATENCY_FLUSH_SECS, instance=instance)
    store.on_conflict = gw.metrics.transaction_conflicts.inc
    log.info("store: DynamoDB tables %s and %s (region %s%s)", spec.state_table,
             spec.ledger_table, store._client.meta.region_name,
             f", endpoint {spec.endpoint_url}" if spec.endpoint_url else "")
    return gw


def with_store(config: Config, store: StoreSpec) -> Config:
    """``config`` on another ``[store]`` (the console's ``--stack``: its tables), with a
    ``[ledger]`` for the retention when it has none. What ``store`` leaves unset (region,
    endpoint) comes from the file's own DynamoDB ``[store]``, and so does the cadence."""
    own = config.store
    if own is not None and own.backend == "dynamodb":
        store = dataclasses.replace(own, state_table=store.state_table,
                                    ledger_table=store.ledger_table,
                                    region=store.region or own.region,
                                    endpoint_url=store.endpoint_url or own.endpoint_url)
    return on_store(config, config.ledger or LedgerSpec(), store)


STACK_OUTPUTS = ("StateTableName", "LedgerTableName")
"""The outputs of ``template.yaml`` that name the two tables."""


def tables_from_stack(stack: str, *, region: str | None = None,
                      endpoint_url: str | None = None, cloudformation: Any = None
                      ) -> tuple[str, str]:
    """(state table, ledger table) from the outputs of the CloudFormation stack ``stack``
    (one ``DescribeStacks``); ``ConfigError`` when the stack or an output is missing."""
    if cloudformation is None:
        if importlib.util.find_spec("botocore") is None:
            raise ConfigError("--stack needs botocore: install humpyard[aws]")
        from humpyard.aws.clients import client
        kwargs: dict[str, Any] = {}
        if region:
            kwargs["region_name"] = region
        if endpoint_url:
            kwargs["endpoint_url"] = endpoint_url
        cloudformation = client("cloudformation", **kwargs)
    from botocore.exceptions import BotoCoreError, ClientError
    try:
        stacks = cloudformation.describe_stacks(StackName=stack).get("Stacks", [])
    except ClientError as exc:
        raise ConfigError(f"--stack {stack}: {exc.response.get('Error', {}).get('Code')}: "
                          f"{exc.response.get('Error', {}).get('Message')}") from None
    except BotoCoreError as exc:  # its message names the endpoint, never a credential
        raise ConfigError(f"--stack {stack}: {type(exc).__name__}: {exc}") from None
    outputs = {o.get("OutputKey"): o.get("OutputValue")
               for s in stacks[:1] for o in s.get("Outputs", [])}
    missing = [name for name in STACK_OUTPUTS if not outputs.get(name)]
    if missing:
        raise ConfigError(f"--stack {stack}: the stack has no output {', '.join(missing)} "
                          "(template.yaml declares both)")
    return str(outputs[STACK_OUTPUTS[0]]), str(outputs[STACK_OUTPUTS[1]])
