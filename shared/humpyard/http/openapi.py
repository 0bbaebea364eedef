"""``GET /openapi.json``: the OpenAPI 3.1 document of the API the app serves.

``openapi_document(routes)`` walks the app's Starlette routes and describes
every (method, path) it finds: from ``OPERATIONS`` (hand-written schemas of
request bodies, query parameters and answers, built from the blocks in
``http/openapi_schemas.py``, which keeps them next to the limits the decoders
enforce) or, for a route without an entry, from its handler's docstring with a
generic answer, so the document never leaves out a path the app serves. The
document holds no configuration (no route names, no keys), so it is served
without a key.

Answers are described as the code produces them: OpenAI's error body on every
path except ``/v1/messages*`` (Anthropic's; ``/v1/responses`` adds ``param``),
the upstream's last error passed through as ``4XX``/``5XX`` on the client
paths, and a stream as
``text/event-stream``. ``tests/fuzz`` checks the app against this document.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from humpyard import __version__
from humpyard.http.errors import json_response
from humpyard.http.openapi_schemas import (
    ADMIN_ERRORS,
    ANY_OBJECT,
    BEDROCK_MODEL,
    BEDROCK_REQUEST,
    CHAT_REQUEST,
    CLIENT_ERRORS,
    COUNT_TOKENS_REQUEST,
    ERR,
    EXPLAIN_REQUEST,
    INT,
    MESSAGES_REQUEST,
    NUM,
    OPT_NUM,
    OPT_STR,
    OVERRIDE_REQUEST,
    READINESS,
    RESPONSES_REQUEST,
    SCHEMAS,
    SSE,
    STR,
    Schema,
    answer,
    arr,
    errors,
    obj,
    op,
    path_param,
    query,
    ref,
)


def _client_ops() -> dict[tuple[str, str], Schema]:
    streamed = {"application/json": {"schema": ref("ChatCompletion")}, **SSE}
    message = {"application/json": {"schema": ref("Message")}, **SSE}
    return {
        ("POST", "/v1/chat/completions"): op(
            "OpenAI chat completion, buffered or streamed", tag="client",
            request=CHAT_REQUEST, responses={
                "200": {"description": "the answer, or its stream", "content": streamed},
                **errors(*CLIENT_ERRORS)}),
        ("POST", "/v1/messages"): op(
            "Anthropic Messages, translated to the OpenAI upstream and back", tag="client",
            request=MESSAGES_REQUEST, responses={
                "200": {"description": "the message, or its stream", "content": message},
                **errors(*CLIENT_ERRORS, anthropic_shape=True)}),
        **{("POST", path): op(
            f"Amazon Bedrock InvokeModel{what}: an Anthropic Messages body for the route "
            "{model} names; Bedrock's errors (x-amzn-ErrorType)", tag="client",
            request=BEDROCK_REQUEST, params=[BEDROCK_MODEL], responses={
                "200": {"description": "the message, or its event stream", "content": media},
                **{code: answer(ref("BedrockError"), "refused or failed; x-amzn-ErrorType "
                                "names the exception") for code in CLIENT_ERRORS},
                "404": answer({"anyOf": [ref("BedrockError"), ERR]},
                              "no such model (or, for a path naming none, humpyard's 404)")})
           for path, what, media in (
               ("/model/{model}/invoke", "", {"application/json": {"schema": ref("Message")}}),
               ("/model/{model}/invoke-with-response-stream", "WithResponseStream",
                {"application/vnd.amazon.eventstream": {
                    "schema": {"type": "string", "format": "binary"}}}))},
        ("POST", "/v1/responses"): op(
            "OpenAI Responses API, translated to the upstream and back; stateless "
            "(store: true and previous_response_id are refused)", tag="client",
            request=RESPONSES_REQUEST, responses={
                "200": {"description": "the response, or its event stream",
                        "content": {"application/json": {"schema": ref("Response")}, **SSE}},
                **errors(*CLIENT_ERRORS)}),
        ("GET", "/v1/models/{model_id}"): op(
            "One route or bare target the calling key may use (404 for any other)",
            tag="client", params=[path_param("model_id")], responses={
                "200": answer(ref("Model"), "the model"), **errors(*ADMIN_ERRORS)}),
        ("GET", "/"): op("The gateway is up (HEAD / too: Claude Code's preflight); no key",
                         tag="client", responses={
            "200": answer(obj({"object": STR, "status": STR}, "status"), "up")}),
        ("GET", "/healthz"): op("Liveness: the process serves HTTP (always 200); no key",
                                tag="client", responses={
            "200": answer(obj({"status": STR}, "status"), "alive")}),
        ("GET", "/readyz"): op(
            "Readiness: a configuration is loaded, the ledger writer runs and the store "
            "answers; 503 otherwise, naming the check that failed; no key", tag="client",
            responses={"200": answer(READINESS, "ready"), "503": answer(READINESS, "not ready")}),
        ("POST", "/v1/messages/count_tokens"): op(
            "Estimate a Messages request's input tokens (no upstream call)", tag="client",
            request=COUNT_TOKENS_REQUEST, responses={
                "200": answer(obj({"input_tokens": INT}, "input_tokens"), "the estimate"),
                **errors("400", "401", "413", "431", anthropic_shape=True)}),
        ("POST", "/v1/route/explain"): op(
            "What a request would do: rules, targets, removals; no upstream call",
            request=EXPLAIN_REQUEST, responses={
                "200": answer(obj({"model": STR, "selected": ANY_OBJECT, "targets":
                                   arr(ANY_OBJECT)}, "model", "selected"), "the decision"),
                **errors(*ADMIN_ERRORS, "413")}),
    }


def _admin_ops() -> dict[tuple[str, str], Schema]:
    decisions = obj({"decisions": arr(ANY_OBJECT), "next_cursor": OPT_STR}, "decisions")
    group = obj({"key": OPT_STR, "requests": INT, "failures": INT, "failure_rate": OPT_NUM,
                 "p50_latency_ms": OPT_NUM, "cost_usd": OPT_NUM}, "key", "requests")
    return {
        ("GET", "/v1/models"): op("Routes and targets the calling key may use", responses={
            "200": answer(obj({"object": {"const": "list"}, "data": arr(
                obj({"id": STR, "object": {"const": "model"}}, "id"))}, "data"), "models"),
            **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/health"): op("Every endpoint's breaker and readiness", responses={
            "200": answer(obj({"endpoints": arr(obj({
                "target": STR, "provider": STR, "model": STR,
                "state": {"enum": ["healthy", "cooling_down", "probing"]},
                "consecutive_failures": INT, "cooldown_remaining_ms": INT,
                "cooldown_source": OPT_STR, "readiness": STR}, "target", "state")),
                "targets": arr(ANY_OBJECT)}, "endpoints", "targets"), "health"),
            **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/decisions"): op("Recorded decisions, newest first (a key without "
                                     "admin: its own)", params=[
            query("route", STR, "only this route"), query("rule", STR, "only this rule"),
            query("outcome", STR, "only this outcome"), query("key", STR, "only this key id"),
            query("since", NUM, "epoch seconds"),
            query("limit", INT, "page size, clamped to 1..1000"),
            query("cursor", STR, "the next_cursor of the previous page")],
            responses={"200": answer(decisions, "a page"), **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/decisions/{request_id}"): op(
            "One decision", params=[path_param("request_id")],
            responses={"200": answer(obj({"request_id": STR}, "request_id"), "the decision"),
                       **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/stats"): op("Requests, failures, latency and cost by group", params=[
            query("group_by", {"enum": ["route", "target", "provider", "key"]}, "grouping"),
            query("window_secs", {"type": "number", "exclusiveMinimum": 0},
                  "how far back, seconds"),
            query("key", STR, "only this key id's requests (a key without admin: always "
                  "its own)"),
            query("series", {"enum": ["hour", "day"]}, "each group's UTC buckets over time")],
            responses={"200": answer(obj({"group_by": STR, "window_secs": NUM,
                                          "groups": arr(group)}, "group_by", "groups"),
                                     "the groups"), **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/config"): op("The loaded configuration, secrets never included (an "
                                  "admin key's)",
                                  responses={"200": answer(ANY_OBJECT, "the configuration"),
                                             **errors(*ADMIN_ERRORS)}),
        ("GET", "/metrics"): op("Prometheus metrics (an admin key's)", responses={
            "200": answer(STR, "text exposition format", "text/plain"),
            **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/overrides"): op("Active overrides", responses={
            "200": answer(obj({"overrides": arr(ref("Override"))}, "overrides"), "overrides"),
            **errors(*ADMIN_ERRORS)}),
        ("POST", "/v1/overrides"): op(
            "Create an override (needs a ledger and manage_overrides)",
            request=OVERRIDE_REQUEST, responses={
                "201": answer(ref("Override"), "the stored override"),
                **errors(*ADMIN_ERRORS, "409", "413", "5XX")}),
        ("GET", "/v1/overrides/audit"): op("Override audit trail", responses={
            "200": answer(obj({"audit": arr(ANY_OBJECT)}, "audit"), "entries"),
            **errors(*ADMIN_ERRORS)}),
        ("DELETE", "/v1/overrides/{id}"): op("Remove an override", params=[path_param("id")],
                                             responses={
            "200": answer(ref("Override"), "the removed override"),
            **errors(*ADMIN_ERRORS, "409", "5XX")}),
        ("GET", "/v1/quota"): op("Provider quota snapshots", responses={
            "200": answer(obj({"providers": arr(ANY_OBJECT)}, "providers"), "snapshots"),
            **errors(*ADMIN_ERRORS)}),
        ("GET", "/v1/quota/history"): op("Quota samples, newest first", params=[
            query("provider", STR, "only this provider"), query("since", NUM, "epoch seconds"),
            query("limit", INT, "clamped to 1..5000")], responses={
            "200": answer(obj({"samples": arr(ANY_OBJECT)}, "samples"), "samples"),
            **errors(*ADMIN_ERRORS)}),
        ("GET", "/openapi.json"): op("This document", responses={
            "200": answer(obj({"openapi": STR, "paths": ANY_OBJECT}, "openapi", "paths"),
                          "OpenAPI 3.1")}),
        ("GET", "/ui"): op("The operator console page", tag="console", responses={
            "200": answer(STR, "HTML", "text/html"), **errors("404")}),
        ("GET", "/ui/{asset}"): op("A console asset", tag="console",
                                   params=[path_param("asset")], responses={
            "200": {"description": "the file (its own content type)"},
            "304": {"description": "not modified"}, **errors("404")}),
    }


OPERATIONS: dict[tuple[str, str], Schema] = {**_client_ops(), **_admin_ops()}


_CONVERTER = re.compile(r"\{(\w+):\w+\}")


def _generic(route: Route) -> Schema:
    doc = (route.endpoint.__doc__ or route.name or route.path).strip().splitlines()[0]
    return op(doc, {"default": {"description": "see the gateway's documentation"}},
              tag="undocumented")


def openapi_document(routes: list[BaseRoute]) -> Schema:
    """The OpenAPI 3.1 document for ``routes`` (a Starlette app's ``routes``)."""
    paths: dict[str, dict[str, Schema]] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            path = _CONVERTER.sub(r"{\1}", route.path)  # {id:path} is {id} in OpenAPI
            spec = OPERATIONS.get((method, path)) or _generic(route)
            paths.setdefault(path, {})[method.lower()] = spec
    return {
        "openapi": "3.1.0",
        "info": {"title": "humpyard", "version": __version__,
                 "description": "An LLM gateway: OpenAI and Anthropic clients in, "
                                "OpenAI-compatible providers out."},
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "apiKey": {"type": "apiKey", "in": "header",
                                           "name": "x-api-key"}},
        },
        # a gateway without [keys] is open: the key is optional in the document
        "security": [{}, {"bearer": []}, {"apiKey": []}],
    }


async def openapi_json(request: Request) -> Response:
    """``GET /openapi.json``: this app's OpenAPI document."""
    cached = getattr(request.app.state, "openapi", None)
    if cached is None:
        cached = request.app.state.openapi = openapi_document(request.app.routes)
    return json_response(cached)

