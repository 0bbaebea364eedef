"""Print the CloudFormation JSON that SAM makes of a template (no AWS calls).

Run with the interpreter of ``.venv-infra`` (where ``aws-sam-translator``
lives), not the app's::

    .venv-infra/bin/python tests/infra/sam_translate.py template.yaml [Name=Value ...]

Parameter values given after the template are what ``sam deploy
--parameter-overrides`` would pass; SAM resolves some properties with them
(``Tracing: !Ref Tracing`` decides the X-Ray grant), the rest stay intrinsics.
Local ``CodeUri``/``ContentUri`` paths are swapped for placeholder S3 URIs
first, as ``sam validate`` does (``sam deploy`` uploads them). The policy
loader is a stub: the template uses SAM policy templates only, never
managed policy names, so nothing needs IAM.
"""

from __future__ import annotations

import json
import os
import sys


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


_LOCAL_URIS = {"AWS::Serverless::Function": "CodeUri",
               "AWS::Serverless::LayerVersion": "ContentUri"}


def _placeholder(uri: object) -> object:
    if isinstance(uri, str) and not uri.startswith("s3://"):
        return "s3://placeholder-bucket/" + uri.strip("/")
    return uri


def _replace_local_uris(template: dict) -> None:
    function_globals = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in function_globals:
        function_globals["CodeUri"] = _placeholder(function_globals["CodeUri"])
    for resource in template.get("Resources", {}).values():
        prop = _LOCAL_URIS.get(resource.get("Type"))
        props = resource.get("Properties", {})
        if prop and prop in props:
            props[prop] = _placeholder(props[prop])


def translate(path: str, overrides: list[str]) -> dict:
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    with open(path, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    _replace_local_uris(template)
    parameters = dict(o.split("=", 1) for o in overrides)
    return transform(template, parameters, _NoManagedPolicies())  # type: ignore[no-any-return]


def main(path: str, *overrides: str) -> None:
    json.dump(translate(path, list(overrides)), sys.stdout, indent=1, sort_keys=True,
              default=str)


def serve(path: str) -> None:
    """``--serve``: one translation per line of stdin (a JSON list of overrides), each
    answered with one line, ``{"doc": ...}`` or ``{"error": traceback}``, so a test
    session starts the translator (about a second) once, not once per parameter set."""
    import traceback

    for line in sys.stdin:
        try:
            answer = {"doc": translate(path, json.loads(line))}
        except Exception:  # noqa: BLE001 - handed to the test, which fails with it
            answer = {"error": traceback.format_exc()}
        sys.stdout.write(json.dumps(answer, sort_keys=True, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        main(*sys.argv[1:])
