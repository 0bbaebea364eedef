"""``console --stack``: a CloudFormation endpoint that cannot be reached is named.

The error used to be the exception's class alone (``--stack humpyard:
EndpointConnectionError``), with nothing to say which endpoint was tried; it now
carries botocore's message, which names the URL (and never a credential).
"""

from __future__ import annotations

import socket

import pytest

from humpyard.errors import ConfigError
from humpyard.fleet import tables_from_stack


def test_an_endpoint_that_refuses_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "s3cr3t-x",
                        "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections refused
    with pytest.raises(ConfigError) as caught:
        tables_from_stack("humpyard", region="eu-west-1",
                          endpoint_url=f"http://127.0.0.1:{port}")
    said = str(caught.value)
    assert said.startswith("--stack humpyard: EndpointConnectionError: ")
    assert f"http://127.0.0.1:{port}" in said and "s3cr3t" not in said
