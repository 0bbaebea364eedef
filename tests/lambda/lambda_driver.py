"""One simulated Lambda instance in its own process, driven over stdin/stdout.

Run as a script (``python tests/lambda/lambda_driver.py``) with the
function's environment (``HUMPYARD_*``, ``AWS_ENDPOINT_URL_DYNAMODB``,
dummy credentials). It imports the real ``functions/<name>/app.py`` modules
(``functions/`` on ``sys.path``, as ``CodeUri`` is in Lambda) and calls
their ``handler`` with the events it is sent. Every DynamoDB API call the
process makes is counted through a ``before-call`` hook registered on the
botocore session ``humpyard.aws.clients`` creates every client on (the
store's among them).

Protocol: one JSON object per line each way. The process's own stdout and
stderr (Powertools logs, EMF lines, tracebacks) go to ``DRIVER_LOG``; the
answers go to the original stdout.

- ``{"op": "invoke", "function": "gateway", "event": {...}}`` →
  ``{"response": {...}, "dynamodb": {"Operation": n, ...}, "ms": 12.3}``
- ``{"op": "quit"}`` → ``{"bye": true}`` and exit.

An exception is answered as ``{"error": "Type: message"}``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
import traceback
from collections import Counter
from typing import Any

_calls: Counter[str] = Counter()
_lock = threading.Lock()


def _count(model: Any, **_: Any) -> None:
    with _lock:
        _calls[model.name] += 1


def _take_calls() -> dict[str, int]:
    with _lock:
        taken = dict(_calls)
        _calls.clear()
    return taken


class _Context:
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    aws_request_id = "driver-request"

    def __init__(self, name: str) -> None:
        self.function_name = f"humpyard-{name}"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    log = open(os.environ["DRIVER_LOG"], "a", buffering=1)  # noqa: SIM115 - for the process
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log

    from humpyard.aws.clients import session
    session().register("before-call.dynamodb", _count)

    modules: dict[str, Any] = {}
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["op"] == "quit":
                answers.write(json.dumps({"bye": True}) + "\n")
                return
            name = command["function"]
            if name not in modules:
                modules[name] = importlib.import_module(f"{name}.app")
            _take_calls()
            started = time.perf_counter()
            response = modules[name].handler(command["event"], _Context(name))
            ms = (time.perf_counter() - started) * 1000
            answer = {"response": response, "dynamodb": _take_calls(), "ms": ms}
        except Exception as exc:  # report, keep serving
            traceback.print_exc()
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer, default=str) + "\n")


if __name__ == "__main__":
    main()
