#!/bin/bash
# Start the gateway app for the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap).
# The adapter forwards each invocation to 127.0.0.1:$AWS_LWA_PORT and, with
# AWS_LWA_INVOKE_MODE=response_stream, streams the answer back as it is written.
# /opt/python is the dependencies layer (humpyard and its libraries). Lifespan events are
# answered by humpyard.aws.flush (shutdown flushes pending latency samples); the app's own
# background work (quota polling) is the scheduled poller's job in AWS.
set -euo pipefail
cd "$LAMBDA_TASK_ROOT/stream"
export PYTHONPATH="/opt/python:$LAMBDA_TASK_ROOT/stream${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m uvicorn --factory main:create_app \
  --host 127.0.0.1 --port "${AWS_LWA_PORT:-8080}" \
  --lifespan on --no-access-log --log-level warning --ws none \
  --timeout-keep-alive 900
