"""Host NVIDIA Switchyard's native server: ``python sy_host.py CONFIG PORT``.

Runs under the Switchyard peer venv (``bench/.peers/switchyard``), not the
project's. ``switchyard_rust.server.Server`` binds 127.0.0.1:PORT and serves on
a Tokio runtime inside this process until SIGTERM/SIGINT.
"""

import signal
import sys
import threading

from switchyard_rust.server import Server


def main() -> int:
    server = Server(sys.argv[1], port=int(sys.argv[2]))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(f"switchyard serving on {server.base_url}", flush=True)
    while not done.wait(1.0):
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
