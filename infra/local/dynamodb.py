"""A local DynamoDB for trying the Lambda functions: moto's server with humpyard's tables.

    .venv/bin/python infra/local/dynamodb.py [--port 8000] [--state humpyard-state]
                                             [--ledger humpyard-ledger]

Listens on 127.0.0.1 only, creates both tables exactly as the template does
(``humpyard.store.dynamodb.create_tables``), prints the variables a function
needs, and serves until Ctrl-C. State lives in memory: it is gone when the
server stops. Then, in another shell, paste the printed exports and start,
for example, the stream function's app as Lambda would::

    export HUMPYARD_CONFIG=/path/to/your.toml
    LAMBDA_TASK_ROOT=functions PYTHONPATH=shared AWS_LWA_PORT=8080 \
        PATH=.venv/bin:$PATH bash functions/stream/run.sh
    curl -N localhost:8080/v1/chat/completions -d '{"model": "auto", "stream": true, ...}'
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--state", default="humpyard-state")
    parser.add_argument("--ledger", default="humpyard-ledger")
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    from humpyard.store.dynamodb import create_tables

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=args.port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="local", aws_secret_access_key="local")
    create_tables(client, args.state, args.ledger)
    print(f"""# DynamoDB (moto) on {url}; tables {args.state}, {args.ledger}. Ctrl-C stops it.
export AWS_ENDPOINT_URL_DYNAMODB={url}
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1
export HUMPYARD_STATE_TABLE={args.state} HUMPYARD_LEDGER_TABLE={args.ledger}""", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop()


if __name__ == "__main__":
    main()
