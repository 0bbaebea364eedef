"""What a deployed stack would hold, read from the translated template: intrinsics resolved.

``Deployment(doc, parameters)`` evaluates the template's conditions for the
given stack parameters (defaults filled in, as CloudFormation does) and
resolves ``Ref``, ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::If``, ``Fn::Join``, ``Fn::Split`` and
the pseudo parameters to the values a stack in ``us-east-1`` of account
``123456789012`` would see. Physical names of the stack's own resources
are made up the way CloudFormation makes them, or given (``physical``) when a
test created the real thing (a moto table or secret) and needs its name.

``samconfig_parameters(env)`` is what ``sam deploy [--config-env env]``
passes as parameter overrides. Only the intrinsics the template uses are
known; anything else fails the test that meets it, never resolves silently.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Any

from infra_support import ROOT

REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK = "humpyard-dev"


class _NoValue:
    """``AWS::NoValue``: the property or list element disappears."""


NO_VALUE = _NoValue()


def samconfig_parameters(env: str = "default") -> dict[str, str]:
    """The ``parameter_overrides`` of ``samconfig.toml``'s ``env`` environment."""
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    text = config[env]["deploy"]["parameters"].get("parameter_overrides", "")
    return dict(pair.split("=", 1) for pair in shlex.split(text))


@dataclass
class Deployment:
    """The translated template ``doc`` as deployed with ``parameters``."""

    doc: dict[str, Any]
    parameters: dict[str, str] = field(default_factory=dict)
    physical: dict[str, str] = field(default_factory=dict)
    stack: str = STACK

    def __post_init__(self) -> None:
        declared = self.doc.get("Parameters", {})
        unknown = set(self.parameters) - set(declared)
        assert not unknown, f"not parameters of the template: {sorted(unknown)}"
        values = {name: str(spec["Default"]) for name, spec in declared.items()
                  if "Default" in spec}
        values.update(self.parameters)
        missing = set(declared) - set(values)
        assert not missing, f"parameters without a value: {sorted(missing)}"
        self.values = values
        self._conditions: dict[str, bool] = {}

    # -- conditions ---------------------------------------------------------------
    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self._cond(self.doc["Conditions"][name]))
        return self._conditions[name]

    def _cond(self, expr: Any) -> Any:
        if isinstance(expr, dict) and len(expr) == 1:
            (fn, arg), = expr.items()
            if fn == "Fn::Equals":
                a, b = (str(self.resolve(x)) for x in arg)
                return a == b
            if fn == "Fn::Not":
                return not self._cond(arg[0])
            if fn == "Fn::And":
                return all(self._cond(x) for x in arg)
            if fn == "Fn::Or":
                return any(self._cond(x) for x in arg)
            if fn == "Condition":
                return self.condition(arg)
        return self.resolve(expr)

    def enabled(self, logical_id: str) -> bool:
        """Whether the resource is created (its ``Condition``, if any, holds)."""
        cond = self.doc["Resources"][logical_id].get("Condition")
        return cond is None or self.condition(cond)

    # -- values -------------------------------------------------------------------
    def ref(self, name: str) -> Any:
        pseudo = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": "aws",
                  "AWS::StackName": self.stack, "AWS::URLSuffix": "amazonaws.com",
                  "AWS::NoValue": NO_VALUE}
        if name in pseudo:
            return pseudo[name]
        if name in self.values:
            return self.values[name]
        if name in self.physical:
            return self.physical[name]
        kind = self.doc["Resources"][name]["Type"]
        named = self.doc["Resources"][name].get("Properties", {}).get("FunctionName")
        if kind == "AWS::Lambda::Function" and named is not None:
            return self.resolve(named)
        if kind == "AWS::IAM::ManagedPolicy":
            return f"arn:aws:iam::{ACCOUNT}:policy/{self.stack}-{name}-1A2B3C4D5E6F"
        if kind == "AWS::SecretsManager::Secret":
            secret = self.resolve(self.doc["Resources"][name]["Properties"].get("Name", name))
            return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret}-AbC123"
        return f"{self.stack}-{name}-1A2B3C4D5E6F"

    def get_att(self, name: str, attribute: str) -> str:
        kind = self.doc["Resources"][name]["Type"]
        physical = self.ref(name)
        arns = {"AWS::DynamoDB::Table": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{physical}",
                "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{physical}",
                "AWS::Lambda::Function":
                    f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{physical}"}
        assert attribute == "Arn" and kind in arns, f"GetAtt {name}.{attribute} ({kind})"
        return arns[kind]

    def _sub(self, text: str, extra: dict[str, Any]) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in extra:
                return str(self.resolve(extra[name]))
            if "." in name and not name.startswith("AWS::"):
                return self.get_att(*name.split(".", 1))
            return str(self.ref(name))
        return re.sub(r"\$\{([^}!]+)\}", one, text)

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic replaced; ``NO_VALUE`` where it disappears."""
        if isinstance(value, list):
            items = [self.resolve(v) for v in value]
            return [v for v in items if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                name, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(name, attribute)
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else arg
                return self._sub(text, extra)
            if key == "Fn::If":
                cond, yes, no = arg
                return self.resolve(yes if self.condition(cond) else no)
            if key == "Fn::Join":
                sep, parts = arg
                return sep.join(str(p) for p in self.resolve(parts))
            if key == "Fn::Split":
                sep, text = arg
                return str(self.resolve(text)).split(sep)
            assert not key.startswith("Fn::"), f"{key} is not known to template_eval"
        out = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}

    # -- what tests ask -------------------------------------------------------------
    def functions(self) -> dict[str, dict[str, Any]]:
        """Every ``AWS::Lambda::Function`` created, by logical id, properties resolved."""
        return {k: self.resolve(v["Properties"]) for k, v in self.doc["Resources"].items()
                if v["Type"] == "AWS::Lambda::Function" and self.enabled(k)}

    def environment(self, function: str) -> dict[str, str]:
        """The environment variables ``function`` is deployed with."""
        props = self.functions()[function]
        return {k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()}

    def role_statements(self, function: str) -> list[dict[str, Any]]:
        """Every statement of the inline policies of ``function``'s execution role."""
        role_arn = self.functions()[function]["Role"]
        role_id = next(k for k, v in self.doc["Resources"].items()
                       if v["Type"] == "AWS::IAM::Role" and self.get_att(k, "Arn") == role_arn)
        role = self.resolve(self.doc["Resources"][role_id]["Properties"])
        statements: list[dict[str, Any]] = []
        for policy in role.get("Policies", []):
            found = policy["PolicyDocument"]["Statement"]
            statements.extend(found if isinstance(found, list) else [found])
        return statements

    def boundary_statements(self, function: str) -> list[dict[str, Any]] | None:
        """The statements of the permissions boundary of ``function``'s role; None if none."""
        role_arn = self.functions()[function]["Role"]
        role_id = next(k for k, v in self.doc["Resources"].items()
                       if v["Type"] == "AWS::IAM::Role" and self.get_att(k, "Arn") == role_arn)
        boundary = self.resolve(self.doc["Resources"][role_id]["Properties"]).get(
            "PermissionsBoundary")
        if boundary is None:
            return None
        policy_id = next(k for k, v in self.doc["Resources"].items()
                         if v["Type"] == "AWS::IAM::ManagedPolicy" and self.ref(k) == boundary)
        found = self.resolve(self.doc["Resources"][policy_id]["Properties"])["PolicyDocument"][
            "Statement"]
        return found if isinstance(found, list) else [found]

    def managed_policies(self, function: str) -> list[str]:
        role_arn = self.functions()[function]["Role"]
        role_id = next(k for k, v in self.doc["Resources"].items()
                       if v["Type"] == "AWS::IAM::Role" and self.get_att(k, "Arn") == role_arn)
        role = self.resolve(self.doc["Resources"][role_id]["Properties"])
        return list(role.get("ManagedPolicyArns", []))
