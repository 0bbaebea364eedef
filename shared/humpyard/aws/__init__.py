"""The Lambda side of humpyard: what every function shares.

- ``env``: the environment variables as one checked model (``LambdaEnv``).
- ``secrets``: provider and client keys from Secrets Manager, read once.
- ``build``: one ``Instance`` per Lambda instance — the DynamoDB store,
  shared health and latency, the gateway and the app — built on the first
  invocation and reused while the instance is warm.
- ``flush``: the ASGI middleware that, before the last byte of every
  response, waits for the ledger writes and prints the EMF metric records.
- ``log``: the Powertools logger that the ``humpyard.*`` loggers write through.
- ``tracing``: optional X-Ray spans through Powertools' ``Tracer``
  (``HUMPYARD_TRACING``); nothing X-Ray is imported when it is off.

Nothing here runs at import time, and nothing imports Switchyard.
"""
