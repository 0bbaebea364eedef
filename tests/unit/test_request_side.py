"""The request path is given the gateway's request side (``services.RequestServices``),
never the ``Gateway``: none of its modules imports ``humpyard.gateway`` (issue 28, "one
state path"). The control plane (the admin API, the console, the process wiring)
keeps the Gateway (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_layers import PACKAGE, imports

REQUEST_PATH = ("humpyard.flow", "humpyard.recording", "humpyard.telemetry",
                "humpyard.http.intake", "humpyard.http.reply", "humpyard.http.chat",
                "humpyard.http.messages", "humpyard.http.responses", "humpyard.http.bedrock",
                "humpyard.http.body", "humpyard.services", "humpyard.state_view")


def test_no_request_module_imports_the_gateway() -> None:
    found = imports(Path(PACKAGE))
    missing = [m for m in REQUEST_PATH if m not in found]
    assert not missing, f"renamed? {missing}"
    reaching = {m: sorted(n for n in found[m] if n == "humpyard.gateway"
                          or n.startswith("humpyard.gateway."))
                for m in REQUEST_PATH}
    assert {m: n for m, n in reaching.items() if n} == {}
