"""A fake AWS AppConfig Data endpoint on loopback, for the real botocore client.

moto has no AppConfig Data plane, so this serves its two calls over HTTP as the
service does (REST-JSON): ``POST /configurationsessions`` gives a token for a
known application/environment/profile, ``GET /configuration?configuration_token=``
answers with the deployed content when the session has not received it yet, or
an empty body, plus the next token and poll interval in headers. Point botocore
at it with ``AWS_ENDPOINT_URL_APPCONFIGDATA``.
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class FakeAppConfig:
    """``deploy(text, label)`` publishes a version; ``poll_secs`` is what it asks for."""

    def __init__(self, application: str, environment: str, profile: str,
                 poll_secs: int = 0):
        self.ids = (application, environment, profile)
        self.poll_secs = poll_secs
        self.content: bytes | None = None
        self.label = ""
        self.deployment = 0
        self.sessions = 0
        self.polls = 0
        self._tokens: dict[str, int] = {}  # token -> deployment its session last received
        self._next = itertools.count(1)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.start(self, body)

            def do_GET(self) -> None:  # noqa: N802
                query = parse_qs(urlsplit(self.path).query)
                fake.latest(self, (query.get("configuration_token") or [""])[0])

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAppConfig:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def deploy(self, text: str, label: str) -> None:
        with self._lock:
            self.content, self.label = text.encode(), label
            self.deployment += 1

    def expire_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def _token(self, received: int) -> str:
        token = f"token-{next(self._next)}"
        self._tokens[token] = received
        return token

    @staticmethod
    def _error(h: BaseHTTPRequestHandler, status: int, kind: str, message: str) -> None:
        body = json.dumps({"Message": message}).encode()
        h.send_response(status)
        h.send_header("x-amzn-ErrorType", kind)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def start(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        got = (body.get("ApplicationIdentifier"), body.get("EnvironmentIdentifier"),
               body.get("ConfigurationProfileIdentifier"))
        if got != self.ids:
            return self._error(h, 404, "ResourceNotFoundException", f"no such profile {got}")
        with self._lock:
            self.sessions += 1
            out = json.dumps({"InitialConfigurationToken": self._token(0)}).encode()
        h.send_response(201)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(out)))
        h.end_headers()
        h.wfile.write(out)

    def latest(self, h: BaseHTTPRequestHandler, token: str) -> None:
        with self._lock:
            received = self._tokens.pop(token, None)
            if received is None:
                return self._error(h, 400, "BadRequestException", "expired or unknown token")
            self.polls += 1
            fresh = self.content is not None and received != self.deployment
            body = self.content if fresh and self.content is not None else b""
            nxt = self._token(self.deployment if self.content is not None else 0)
        h.send_response(200)
        h.send_header("Next-Poll-Configuration-Token", nxt)
        h.send_header("Next-Poll-Interval-In-Seconds", str(self.poll_secs))
        h.send_header("Content-Type", "application/toml")
        if fresh:
            h.send_header("Version-Label", self.label)
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
