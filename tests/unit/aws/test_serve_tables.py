"""A ``serve`` gateway on DynamoDB (``fleet.serve_gateway``) whose ledger table is
deleted after the start: the retention purge's failure is one line per run.

The tables are moto's (``mock_aws``); the gateway runs in a ``ServerThread`` with
its lifespan, so its background work (the purge at start) runs as in ``serve``.
"""

from __future__ import annotations

import logging

import pytest

from humpyard.config import load_config_text
from humpyard.fleet import serve_gateway
from humpyard.http.app import create_app
from tests.support.polling import until
from tests.support.servers import ServerThread
from tests.unit.aws.moto_support import LEDGER, REGION, STATE, moto_tables

CONFIG = f'''
[providers.p]
base_url = "http://127.0.0.1:9/v1"

[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]

[store]
backend = "dynamodb"
state_table = "{STATE}"
ledger_table = "{LEDGER}"
region = "{REGION}"
'''


def test_a_purge_on_a_ledger_table_deleted_after_the_start_logs_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    """Before: the purge's ResourceNotFoundException was logged with its traceback."""
    caplog.set_level(logging.INFO, logger="humpyard")
    with moto_tables() as client:
        config = load_config_text(CONFIG)
        gw = serve_gateway(config, dynamodb=client)
        assert gw is not None
        client.delete_table(TableName=LEDGER)
        with ServerThread(create_app(config, gateway=gw), lifespan="on"):
            failed = until(lambda: [r for r in caplog.records
                                    if r.getMessage().startswith("retention purge failed")],
                           "the purge at start to fail")
    assert [(r.levelno, r.exc_info) for r in failed] == [(logging.WARNING, None)]
    assert "ResourceNotFoundException" in failed[0].getMessage()
