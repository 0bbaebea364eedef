"""The admin boundary is in the code, not only in API Gateway's routing (issue 17).

The client functions serve the client surface of the route table and nothing
else, under any spelling of a path; the admin function answers IAM-signed
events only. Driven through the real entry points (Mangum for the buffered
functions, the stream function's ASGI app as uvicorn would call it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from lambda_support import (
    LEDGER,
    STATE,
    LambdaContext,
    event,
    gateway_config,
    instance_of,
    load_function,
)
from moto import mock_aws

from humpyard.aws.build import Instance
from humpyard.store.dynamodb import create_tables
from tests.support import FakeUpstream

ADMIN_PATHS = ["/v1%2Fhealth", "/v1%2Fdecisions", "/v1%2Fconfig", "/v1%2Fstats",
               "/v1%2fhealth", "/v1/health", "/v1/decisions", "/v1/config", "/v1/stats",
               "/metrics", "/ui", "/v1/overrides", "/v1%2Foverrides"]


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """An open gateway (no [keys]): nothing but the code stands between a client and
    an admin path."""
    with FakeUpstream() as primary, FakeUpstream() as backup, mock_aws():
        create_tables(boto3.client("dynamodb"), STATE, LEDGER)
        config = tmp_path / "humpyard.toml"
        config.write_text(gateway_config(primary.url, backup.url))
        monkeypatch.setenv("HUMPYARD_STATE_TABLE", STATE)
        monkeypatch.setenv("HUMPYARD_LEDGER_TABLE", LEDGER)
        monkeypatch.setenv("HUMPYARD_CONFIG", str(config))
        modules: list[Any] = []
        yield modules
        for m in modules:
            inst = instance_of(m) if hasattr(m, "_instance") else None
            if inst is not None:
                inst.close()


def invoke(module: Any, path: str, method: str = "GET", *, iam: bool = False) -> dict:
    ev = event("health_get" if iam else "chat_post", path=path, method=method,
               body={"kind": "disable_target", "subject": "backup", "reason": "x"}
               if method == "POST" else None)
    if method == "GET":
        ev["body"] = None
    return module.handler(ev, LambdaContext())  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ADMIN_PATHS)
def test_the_client_function_has_no_admin_path_under_any_spelling(stack, path):
    gateway = load_function("gateway")
    stack.append(gateway)
    resp = invoke(gateway, path)
    assert resp["statusCode"] == 404, (path, resp["body"][:200])


@pytest.mark.parametrize("path", ["/v1%2Foverrides", "/v1/overrides"])
def test_an_open_gateway_takes_no_override_from_the_client_function(stack, path):
    gateway = load_function("gateway")
    stack.append(gateway)
    assert invoke(gateway, path, "POST")["statusCode"] == 404
    assert invoke(gateway, "/v1/models")["statusCode"] == 200  # the client surface works


def test_the_stream_function_refuses_encoded_separators_too(stack):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_stream_main_boundary", Path(__file__).parents[2] / "functions/stream/main.py")
    assert spec is not None and spec.loader is not None
    main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(main)
    instance = Instance.build(surfaces=main.SURFACES)  # what main.create_app builds
    app = instance.asgi_app()

    async def ask() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lambda") as c:
            return [(await c.get("/v1%2Fhealth")).status_code,
                    (await c.get("/v1/health")).status_code,
                    (await c.post("/v1%2Fchat%2Fcompletions",
                                  json={"model": "auto", "messages": []})).status_code]

    try:
        assert instance.run(ask()) == [404, 404, 404]
    finally:
        instance.close()


def test_the_admin_function_answers_iam_signed_events_only(stack):
    admin = load_function("admin")
    stack.append(admin)
    unsigned = invoke(admin, "/v1/health", iam=False)
    assert unsigned["statusCode"] == 403
    assert "IAM" in unsigned["body"]
    signed = invoke(admin, "/v1/health", iam=True)
    assert signed["statusCode"] == 200, signed["body"]
    assert invoke(admin, "/v1%2Fhealth", iam=True)["statusCode"] == 404
    # and it has no client path
    assert invoke(admin, "/v1/models", iam=True)["statusCode"] == 404


def test_an_encoded_slash_inside_a_model_id_is_one_segment(stack):
    gateway = load_function("gateway")
    stack.append(gateway)
    # the OpenAI SDK writes models.retrieve("org/name") as /v1/models/org%2Fname: the id
    # is one segment, so the path names the models route (404 here: no such route)
    resp = invoke(gateway, "/v1/models/org%2Fname")
    assert resp["statusCode"] == 404 and "unknown_model" in resp["body"]
    assert invoke(gateway, "/v1/models/auto")["statusCode"] == 200
