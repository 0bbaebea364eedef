"""Replay recorded AWS calls against a function role's statements, as IAM would judge them.

``Recorder`` hooks the botocore session every humpyard client is made on
(``humpyard.aws.clients.session``) and keeps each call's operation and
parameters. ``authorizations(service, operation, params)`` turns one call
into what IAM authorizes for it: DynamoDB transactions and batches are one
authorization per item action (``TransactWriteItems`` needs ``PutItem``,
``UpdateItem``, ``DeleteItem``, ``ConditionCheckItem`` on each item's table,
with ``dynamodb:LeadingKeys`` the partition keys). ``allowing(statements,
request)`` is the statement that allows it, or None.

Only what the template uses is understood: ``Allow`` statements, actions
(or ``NotAction``) and resources with ``*`` wildcards, and the conditions
``ForAllValues:StringLike`` on ``dynamodb:LeadingKeys`` and
``StringEquals`` on ``kms:ViaService``. Anything else fails the test that
meets it instead of being judged wrongly.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from template_eval import ACCOUNT, REGION


@dataclass(frozen=True)
class Request:
    """One authorization: an IAM action on a resource, with the partition keys it touches."""

    action: str
    resource: str
    leading_keys: frozenset[str] = frozenset()
    via: str | None = None  # the service calling on the caller's behalf (kms:ViaService)


class Recorder:
    """Every AWS API call made on humpyard's botocore session, labelled with ``label``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, dict[str, Any]]] = []
        self.label = "?"
        self._lock = threading.Lock()

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        with self._lock:
            self.calls.append((self.label, service, model.name, dict(params)))

    def of(self, label: str) -> list[tuple[str, str, dict[str, Any]]]:
        return [(s, op, p) for lab, s, op, p in self.calls if lab == label]


def _table(name: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def _pk(key: dict[str, Any]) -> str:
    (value,) = key["pk"].values()
    return str(value)


def _query_key(params: dict[str, Any]) -> str:
    """The partition key value a Query's key condition names."""
    names = params.get("ExpressionAttributeNames", {})
    first = params["KeyConditionExpression"].split(" AND ")[0].strip().strip("()")
    found = re.fullmatch(r"(#?\w+)\s*=\s*(:\w+)", first)
    assert found, f"unrecognised key condition {params['KeyConditionExpression']!r}"
    assert names.get(found.group(1), found.group(1)) in ("pk", "g_all", "g_rule", "g_outcome",
                                                         "g_route", "g_key"), found.group(1)
    (value,) = params["ExpressionAttributeValues"][found.group(2)].values()
    return str(value)


_ITEM = {"Put": ("PutItem", "Item"), "Update": ("UpdateItem", "Key"),
         "Delete": ("DeleteItem", "Key"), "ConditionCheck": ("ConditionCheckItem", "Key"),
         "Get": ("GetItem", "Key")}


def authorizations(service: str, operation: str, params: dict[str, Any]) -> list[Request]:
    """What IAM checks for one call (see the module docstring)."""
    if service == "dynamodb":
        return _dynamodb(operation, params)
    if service == "secretsmanager" and operation == "GetSecretValue":
        return [Request("secretsmanager:GetSecretValue", params["SecretId"])]
    if service == "s3" and operation in ("GetObject", "HeadObject"):
        return [Request("s3:GetObject", f"arn:aws:s3:::{params['Bucket']}/{params['Key']}")]
    raise AssertionError(f"{service}.{operation}: not known to iam_replay")


BEDROCK_ACTIONS = {"invoke": "bedrock:InvokeModel",
                   "invoke-with-response-stream": "bedrock:InvokeModelWithResponseStream",
                   "converse": "bedrock:InvokeModel",  # Converse is authorized as InvokeModel
                   "converse-stream": "bedrock:InvokeModelWithResponseStream",
                   "count-tokens": "bedrock:CountTokens"}


def bedrock_authorization(operation: str, model: str, region: str,
                          account: str = ACCOUNT) -> Request:
    """What IAM checks for a Bedrock runtime call (``/model/{model}/{operation}``), which
    humpyard makes on its own transport, not on a botocore client: the model's ARN
    (a foundation model, an inference profile id, or an ARN as given)."""
    if model.startswith("arn:"):
        resource = model
    elif model.split(".", 1)[0] in ("us", "eu", "apac", "global", "jp", "au", "ca"):
        resource = f"arn:aws:bedrock:{region}:{account}:inference-profile/{model}"
    else:
        resource = f"arn:aws:bedrock:{region}::foundation-model/{model}"
    return Request(BEDROCK_ACTIONS[operation], resource)


def _dynamodb(operation: str, params: dict[str, Any]) -> list[Request]:
    if operation in ("GetItem", "DeleteItem", "UpdateItem"):
        return [Request(f"dynamodb:{operation}", _table(params["TableName"]),
                        frozenset({_pk(params["Key"])}))]
    if operation == "PutItem":
        return [Request("dynamodb:PutItem", _table(params["TableName"]),
                        frozenset({_pk(params["Item"])}))]
    if operation == "Query":
        resource = _table(params["TableName"])
        if params.get("IndexName"):
            resource += f"/index/{params['IndexName']}"
        return [Request("dynamodb:Query", resource, frozenset({_query_key(params)}))]
    if operation in ("BatchGetItem", "BatchWriteItem"):
        out = []
        for table, spec in params["RequestItems"].items():
            if operation == "BatchGetItem":
                keys = {_pk(k) for k in spec["Keys"]}
            else:
                keys = {_pk(w.get("PutRequest", {}).get("Item")
                            or w["DeleteRequest"]["Key"]) for w in spec}
            out.append(Request(f"dynamodb:{operation}", _table(table), frozenset(keys)))
        return out
    if operation in ("TransactWriteItems", "TransactGetItems"):
        out = []
        for entry in params["TransactItems"]:
            (kind, spec), = entry.items()
            action, field = _ITEM[kind]
            out.append(Request(f"dynamodb:{action}", _table(spec["TableName"]),
                               frozenset({_pk(spec[field])})))
        return out
    if operation == "Scan":
        return [Request("dynamodb:Scan", _table(params["TableName"]))]
    raise AssertionError(f"dynamodb.{operation}: not known to iam_replay")


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _condition_holds(condition: dict[str, Any], request: Request) -> bool:
    for operator, tests in condition.items():
        for key, allowed in tests.items():
            if (operator, key) == ("ForAllValues:StringLike", "dynamodb:LeadingKeys"):
                if not all(any(fnmatchcase(k, p) for p in _listed(allowed))
                           for k in request.leading_keys):
                    return False
            elif (operator, key) == ("StringEquals", "kms:ViaService"):
                if request.via not in _listed(allowed):
                    return False
            else:
                raise AssertionError(f"condition {operator} {key}: not known to iam_replay")
    return True


def allowing(statements: list[dict[str, Any]], request: Request) -> dict[str, Any] | None:
    """The first statement that allows ``request``; None if none does (implicit deny)."""
    for st in statements:
        assert st["Effect"] == "Allow", st  # a Deny would need ordering rules
        if "NotAction" in st:  # every action but these (a permissions boundary's)
            if any(fnmatchcase(request.action, a) for a in _listed(st["NotAction"])):
                continue
        elif not any(fnmatchcase(request.action, a) for a in _listed(st["Action"])):
            continue
        if not any(fnmatchcase(request.resource, r) for r in _listed(st["Resource"])):
            continue
        if _condition_holds(st.get("Condition", {}), request):
            return st
    return None


BASIC_EXECUTION = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
MANAGED: dict[str, list[dict[str, Any]]] = {BASIC_EXECUTION: [{
    "Effect": "Allow", "Resource": "*",
    "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]}]}
"""The statements of the AWS managed policies SAM attaches, as AWS publishes them."""


def log_writes(function_name: str) -> list[Request]:
    """What Lambda does with a function's role to deliver its output: a log stream in
    ``/aws/lambda/<name>`` and events into it (the group exists: the template makes it)."""
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/{function_name}"
    stream = f"{group}:log-stream:2026/12/02/[$LATEST]0123456789abcdef"
    return [Request("logs:CreateLogStream", stream), Request("logs:PutLogEvents", stream)]
