"""Schema-driven fuzzing: every operation of ``/openapi.json``, valid and invalid input.

The gateway runs on loopback (``ServerThread``) with a mocked upstream; the
document is fetched from it, so the route is exercised too. For each
operation Schemathesis generates positive and negative cases (``EXAMPLES``
of each, derandomized, so a run is reproducible and bounded) and checks that
no answer is a 5xx and that every answer conforms to the document: a
documented status, content type, headers and body schema.

Two narrowings keep the cases useful and the run short: ``model`` is one of
the configured route names (or one unknown name), so positive chat and
messages cases get through to the upstream, and arrays hold at most
``MAX_ITEMS`` items (generating 10,000-message arrays costs seconds and finds
nothing ``test_limits`` does not check exactly). Negative cases still send
anything at all.

The cases are driven with ``APIOperation.as_strategy`` under ``@given`` rather
than ``schema.parametrize``: the schema comes from a server a fixture starts,
and Schemathesis' lazy fixture loader does not run on pytest 9.
"""

from __future__ import annotations

import copy

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from humpyard.http.openapi import OPERATIONS
from tests.fuzz.app import ROUTES, fuzz_app
from tests.support.servers import ServerThread

EXAMPLES = 25
MAX_ITEMS = 3
CONFIG = SchemathesisConfig.from_dict({
    "checks": {
        "enabled": False,
        "not_a_server_error": {"enabled": True},
        "status_code_conformance": {"enabled": True},
        "content_type_conformance": {"enabled": True},
        "response_schema_conformance": {"enabled": True},
        "response_headers_conformance": {"enabled": True},
    },
    "request-timeout": 10,
})
MODEL_PATHS = ("/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens",
               "/v1/responses", "/v1/route/explain")


@pytest.fixture(scope="module")
def gateway_url():
    app, _ = fuzz_app()
    with ServerThread(app, lifespan="on") as srv:
        yield srv.url


@pytest.fixture(scope="module")
def document(gateway_url):
    r = httpx.get(gateway_url + "/openapi.json", timeout=10)
    assert r.status_code == 200
    return r.json()


def cap_arrays(node: object) -> None:
    if isinstance(node, dict):
        if node.get("type") == "array" or "items" in node:
            node["maxItems"] = min(node.get("maxItems", MAX_ITEMS), MAX_ITEMS)
        for value in node.values():
            cap_arrays(value)
    elif isinstance(node, list):
        for value in node:
            cap_arrays(value)


@pytest.fixture(scope="module")
def api_schema(document):
    doc = copy.deepcopy(document)
    for path in MODEL_PATHS:
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        body["schema"]["properties"]["model"] = {"enum": [*ROUTES, "no-such-model"]}
    for ops in doc["paths"].values():
        for spec in ops.values():
            cap_arrays(spec.get("requestBody"))  # requests only: answers are as they are
    return schemathesis.openapi.from_dict(doc, config=CONFIG)


def test_the_document_describes_every_route_by_hand(document):
    served = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert served == set(OPERATIONS)  # no route fell back to the generic description
    assert document["openapi"] == "3.1.0"


def cases() -> list:
    """Every operation with valid input; those that take a body or a query, with invalid
    input too (a string path parameter or no input at all has nothing to get wrong)."""
    out = []
    for (method, path), spec in sorted(OPERATIONS.items()):
        modes = [GenerationMode.POSITIVE]
        query = [p for p in spec.get("parameters", ()) if p["in"] == "query"]
        if query or spec.get("requestBody"):
            modes.append(GenerationMode.NEGATIVE)
        out += [pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
                for mode in modes]
    return out


@pytest.mark.parametrize("method,path,mode", cases())
def test_operation(api_schema, gateway_url, method, path, mode):
    operation = api_schema[path][method]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        case.call_and_validate(base_url=gateway_url)

    run()
