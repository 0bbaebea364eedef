import json

import pytest

from humpyard.upstream import errors as E
from humpyard.upstream.classify import (
    ALL_CLASSES,
    DEFAULT_FALLBACK,
    FALLBACK_WITH_UNAVAILABLE,
    Classification,
    FailureClass,
    classify_failure,
    classify_status,
)

F = FailureClass

# The exact set of client errors that are not plain request errors, across 400..451
# (ADR 0023: adding a status here must be a visible decision).
CLIENT_ERROR_SWEEP: dict[int, tuple[FailureClass, bool, bool]] = {
    # status: (class, next_endpoint, counts_for_health)
    401: (F.UNAVAILABLE, True, True),
    402: (F.UNAVAILABLE, True, True),
    403: (F.FORBIDDEN, True, True),
    404: (F.UNAVAILABLE, True, True),
    408: (F.TIMEOUT, True, True),
    410: (F.UNAVAILABLE, True, True),
    413: (F.OVERFLOW, True, False),
    429: (F.RATE_LIMIT, True, True),
}


@pytest.mark.parametrize("status", range(400, 452))
def test_client_error_sweep(status: int) -> None:
    expected = CLIENT_ERROR_SWEEP.get(status, (F.REQUEST, False, False))
    got = classify_status(status, b'{"error": {"message": "nope"}}')
    assert (got.failure_class, got.next_endpoint, got.counts_for_health) == expected
    assert not got.is_model_gone
    assert not got.never_delivered


def test_endpoint_describing_set_is_pinned() -> None:
    describing = {
        s for s in range(400, 452) if classify_status(s).failure_class is not F.REQUEST
    }
    assert describing == {401, 402, 403, 404, 408, 410, 413, 429}
    counted = {s for s in range(400, 452) if classify_status(s).counts_for_health}
    assert counted == {401, 402, 403, 404, 408, 410, 429}


@pytest.mark.parametrize("status", [405, 407, 422, 499])
def test_request_errors_stop(status: int) -> None:
    assert classify_status(status) == Classification(F.REQUEST, False, False)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 520, 599, 600])
def test_server_errors(status: int) -> None:
    assert classify_status(status, b"<html>bad gateway</html>") == Classification(
        F.SERVER_ERROR, True, True
    )


def test_redirect_is_an_endpoint_problem() -> None:
    assert classify_status(302).failure_class is F.SERVER_ERROR


@pytest.mark.parametrize("status", [100, 200, 204, 299])
def test_success_is_not_classified(status: int) -> None:
    with pytest.raises(ValueError):
        classify_status(status)


@pytest.mark.parametrize("status", [400, 404])
@pytest.mark.parametrize("code", ["model_not_found", "model_not_available", "model_decommissioned"])
@pytest.mark.parametrize(
    "shape",
    [
        lambda c: {"error": {"message": "x", "code": c}},
        lambda c: {"error": {"message": "x", "type": c}},
        lambda c: {"code": c, "message": "x"},
        lambda c: {"type": c},
        lambda c: [{"error": {"code": c}}],
    ],
)
def test_model_gone_codes(status: int, code: str, shape) -> None:
    got = classify_status(status, json.dumps(shape(code)).encode())
    assert got == Classification(F.UNAVAILABLE, True, True, is_model_gone=True)


@pytest.mark.parametrize("status", [401, 403, 410, 422])
def test_model_gone_code_only_read_on_400_and_404(status: int) -> None:
    body = b'{"error": {"code": "model_not_found"}}'
    assert not classify_status(status, body).is_model_gone


def test_model_gone_code_in_message_text_does_not_count() -> None:
    body = b'{"error": {"message": "model_not_found is not what this is", "code": "bad"}}'
    assert classify_status(400, body).failure_class is F.REQUEST


def test_model_gone_in_truncated_body() -> None:
    body = b'{"error": {"code": "model_decommissioned", "message": "' + b"x" * 5000
    assert classify_status(400, body).is_model_gone


def test_model_gone_past_four_kib_is_not_read() -> None:
    body = b'{"pad": "' + b"x" * 4100 + b'", "error": {"code": "model_not_found"}}'
    assert classify_status(400, body).failure_class is F.REQUEST
    assert classify_status(404, body) == Classification(F.UNAVAILABLE, True, True)


@pytest.mark.parametrize(
    "body",
    [b"", b"not json at all", b"\xff\xfe\x00garbage", b"[]", b"null", b'{"error": "oops"}',
     b'{"error": {"code": 404}}', b"[" * 10000],
)
def test_garbage_bodies(body: bytes) -> None:
    assert classify_status(400, body).failure_class is F.REQUEST
    assert classify_status(404, body) == Classification(F.UNAVAILABLE, True, True)


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"code": "context_length_exceeded", "message": "x"}}',
        b'{"error": {"message": "This model\'s maximum context length is 8192 tokens."}}',
        b'{"error": {"message": "input exceeds the context window"}}',
        b'{"error": {"message": "Too many tokens in the request"}}',
        b'{"type": "error", "error": {"message": "prompt is too long: 210000 > 200000"}}',
        b"plain text: maximum context length exceeded",
    ],
)
def test_context_overflow_400(body: bytes) -> None:
    assert classify_status(400, body) == Classification(F.OVERFLOW, True, False)


def test_context_overflow_only_on_400() -> None:
    body = b'{"error": {"code": "context_length_exceeded"}}'
    assert classify_status(422, body).failure_class is F.REQUEST


def test_413_is_overflow_and_never_counted() -> None:
    got = classify_status(413, b"Request too large for model ... tokens per minute")
    assert got == Classification(F.OVERFLOW, True, False)


@pytest.mark.parametrize(
    ("failure", "cls", "counts", "never_delivered"),
    [
        (E.ConnectRefused, F.CONNECTION, True, True),
        (E.NameNotResolved, F.CONNECTION, True, True),
        (E.HostUnreachable, F.CONNECTION, True, True),
        (E.TLSFailure, F.CONNECTION, True, True),
        (E.TLSVerifyFailed, F.CONNECTION, True, True),
        (E.ProxyFailure, F.CONNECTION, True, True),
        (E.TransportClosed, F.CONNECTION, True, True),
        (E.ConnectTimeout, F.TIMEOUT, True, True),
        (E.SlotTimeout, F.RATE_LIMIT, False, True),
        (E.ReadTimeout, F.TIMEOUT, True, False),
        (E.WriteTimeout, F.TIMEOUT, True, False),
        (E.ConnectionLost, F.CONNECTION, True, False),
        (E.ProtocolViolation, F.CONNECTION, True, False),
        (E.DecodingFailure, F.CONNECTION, True, False),
    ],
)
def test_transport(failure: type[E.TransportFailure], cls: FailureClass, counts: bool,
                   never_delivered: bool) -> None:
    got = classify_failure(failure("x"))
    assert got == Classification(cls, True, counts, never_delivered=never_delivered)


def test_fallback_sets() -> None:
    assert ALL_CLASSES == {
        "overflow", "rate_limit", "timeout", "server_error", "connection", "forbidden",
        "unavailable",
    }
    assert DEFAULT_FALLBACK == ALL_CLASSES - {"unavailable"}
    assert FALLBACK_WITH_UNAVAILABLE == ALL_CLASSES
    assert "request" not in FALLBACK_WITH_UNAVAILABLE
    assert F.FORBIDDEN in DEFAULT_FALLBACK
