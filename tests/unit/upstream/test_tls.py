"""TLS trust as httpx reads it: SSL_CERT_FILE, then SSL_CERT_DIR, then certifi."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import pytest
import trustme

from humpyard.config.spec import ProviderSpec
from humpyard.upstream import errors as E
from humpyard.upstream.client import UpstreamClient
from tests.support.rawserver import RawServer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def serve(ca: trustme.CA) -> RawServer:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    return RawServer([OK], ssl_context=ctx)


def call(url: str, env: dict[str, str], **provider: str) -> bytes | E.TransportFailure:
    async def main() -> bytes | E.TransportFailure:
        client = UpstreamClient(env=env)
        p = ProviderSpec(name="p", base_url=url, timeout_secs=5, connect_timeout_secs=5,
                         **provider)  # type: ignore[arg-type]
        try:
            resp = await client.open(p, "/x", b"{}")
            body = await resp.read()
            await resp.aclose()
            return body
        except E.TransportFailure as e:
            return e
        finally:
            await client.aclose()
    return asyncio.run(main())


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def test_ssl_cert_file_then_dir_then_certifi(ca: trustme.CA, tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    hashed = tmp_path / "certs"
    hashed.mkdir()
    name = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(pem)],
                          capture_output=True, text=True, check=True).stdout.strip()
    ca.cert_pem.write_to_path(str(hashed / f"{name}.0"))
    with serve(ca) as srv:
        assert call(srv.url, {"SSL_CERT_FILE": str(pem)}) == b"ok"
        assert call(srv.url, {"SSL_CERT_DIR": str(hashed)}) == b"ok"
        default = call(srv.url, {})  # certifi does not know a CA made a moment ago
        assert isinstance(default, E.TLSVerifyFailed)
        assert default.message.startswith(f"TLS certificate verify failed for 127.0.0.1:"
                                          f"{srv.port}")


def test_a_provider_ca_file_wins_and_a_missing_one_is_named(ca: trustme.CA,
                                                            tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    other = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with serve(ca) as srv:
        assert call(srv.url, {"SSL_CERT_FILE": str(other)}, ca_file=str(pem)) == b"ok"
        wrong = call(srv.url, {}, ca_file=str(other))
        assert isinstance(wrong, E.TLSVerifyFailed)
        missing = call(srv.url, {}, ca_file=str(tmp_path / "nope.pem"))
        assert isinstance(missing, E.TLSFailure)
        assert "cannot be loaded" in missing.message
