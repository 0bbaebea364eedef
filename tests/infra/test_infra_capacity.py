"""The tables' billing mode: on demand by default, or provisioned with auto scaling.

Read from the translated template deployed with given parameters
(``template_eval.Deployment``). With ``TableBillingMode=PROVISIONED`` every
table and every index the store writes (``dynamodb_schema``) must have its
read and its write capacity under target tracking between the parameters'
bounds; the indexes nothing writes any more keep the least capacity there is.
docs/deploy.md prices both modes from the measured units
(tests/lambda/test_lambda_cost.py).
"""

from __future__ import annotations

from typing import Any

from infra_support import translated
from template_eval import Deployment, samconfig_parameters

from humpyard.store.dynamodb_schema import LEGACY_INDEXES

SCALABLE = "AWS::ApplicationAutoScaling::ScalableTarget"
POLICY = "AWS::ApplicationAutoScaling::ScalingPolicy"
PROVISIONED = {"TableBillingMode": "PROVISIONED", "TableMinReadCapacity": "3",
               "TableMaxReadCapacity": "900", "TableMinWriteCapacity": "7",
               "TableMaxWriteCapacity": "1200", "TableTargetUtilization": "60"}


def _deployed(**parameters: str) -> Deployment:
    return Deployment(translated(parameters), parameters)


def _created(d: Deployment, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in d.doc["Resources"].items() if v["Type"] == kind and d.enabled(k)}


def _table(d: Deployment, logical_id: str) -> dict[str, Any]:
    return d.resolve(d.doc["Resources"][logical_id]["Properties"])  # type: ignore[no-any-return]


def test_on_demand_by_default_with_no_capacity_to_manage() -> None:
    for parameters in ({}, samconfig_parameters("default"), samconfig_parameters("prod")):
        d = _deployed(**parameters)
        for table in ("StateTable", "LedgerTable"):
            props = _table(d, table)
            assert props["BillingMode"] == "PAY_PER_REQUEST"
            assert "ProvisionedThroughput" not in props
        assert not _created(d, SCALABLE) and not _created(d, POLICY)


def test_provisioned_tables_scale_reads_and_writes_of_every_table() -> None:
    d = _deployed(**PROVISIONED)
    state, ledger = d.ref("StateTable"), d.ref("LedgerTable")
    minimum = {"ReadCapacityUnits": "3", "WriteCapacityUnits": "7"}
    for table in ("StateTable", "LedgerTable"):
        props = _table(d, table)
        assert props["BillingMode"] == "PROVISIONED"
        assert props["ProvisionedThroughput"] == minimum
    assert "GlobalSecondaryIndexes" not in _table(d, "LedgerTable")  # ADR 0019
    written: set[str] = set()

    scaled: dict[tuple[str, str], str] = {}
    for target_id, target in _created(d, SCALABLE).items():
        props = d.resolve(target["Properties"])
        assert props["ServiceNamespace"] == "dynamodb"
        kind, _, what = props["ScalableDimension"].split(":")
        assert kind == "dynamodb"
        resource = props["ResourceId"]
        assert what.endswith("CapacityUnits")
        rw = "Read" if what.startswith("Read") else "Write"
        assert (props["MinCapacity"], props["MaxCapacity"]) == (
            PROVISIONED[f"TableMin{rw}Capacity"], PROVISIONED[f"TableMax{rw}Capacity"])
        assert ("/index/" in resource) == (props["ScalableDimension"].split(":")[1] == "index")
        assert (resource, rw) not in scaled, resource
        scaled[(resource, rw)] = target_id
    resources = {f"table/{state}", f"table/{ledger}",
                 *(f"table/{ledger}/index/{name}" for name in written)}
    assert set(scaled) == {(r, rw) for r in resources for rw in ("Read", "Write")}

    policies = {d.doc["Resources"][p]["Properties"]["ScalingTargetId"]["Ref"]: d.resolve(
        d.doc["Resources"][p]["Properties"]) for p in _created(d, POLICY)}
    assert set(policies) == set(scaled.values())  # one policy per scalable target
    for (_, rw), target_id in scaled.items():
        policy = policies[target_id]
        assert policy["PolicyType"] == "TargetTrackingScaling"
        tracking = policy["TargetTrackingScalingPolicyConfiguration"]
        assert tracking["TargetValue"] == "60"
        assert tracking["PredefinedMetricSpecification"] == {
            "PredefinedMetricType": f"DynamoDB{rw}CapacityUtilization"}


def test_an_existing_stack_sheds_the_legacy_indexes_one_per_deploy() -> None:
    # CloudFormation creates or deletes one GSI per update: each step down of
    # LedgerLegacyIndexes removes exactly one index and the attributes only it used.
    steps = []
    for kept in range(len(LEGACY_INDEXES), -1, -1):
        for mode in ({}, {"TableBillingMode": "PROVISIONED"}):
            d = _deployed(LedgerLegacyIndexes=str(kept), **mode)
            props = _table(d, "LedgerTable")
            gsis = props.get("GlobalSecondaryIndexes", [])
            assert [g["IndexName"] for g in gsis] == list(LEGACY_INDEXES[:kept])
            used = {k["AttributeName"] for g in gsis for k in g["KeySchema"]} | {"pk", "sk"}
            assert {a["AttributeName"] for a in props["AttributeDefinitions"]} == used
            if mode:  # never written: the least capacity there is, and no auto scaling
                assert all(g["ProvisionedThroughput"] == {"ReadCapacityUnits": 1,
                                                          "WriteCapacityUnits": 1}
                           for g in gsis)
                assert not any("/index/" in str(d.resolve(t["Properties"])["ResourceId"])
                               for t in _created(d, SCALABLE).values())
        steps.append({g["IndexName"] for g in gsis})
    assert all(len(a - b) == 1 and b <= a for a, b in zip(steps, steps[1:], strict=False))
