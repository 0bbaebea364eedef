"""``humpyard.planning`` is pure: no HTTP, AWS, SQLite or server imports, anywhere in it."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import humpyard.planning

FORBIDDEN = {"httpx", "boto3", "botocore", "sqlite3", "starlette", "uvicorn"}
PACKAGE = Path(humpyard.planning.__file__).parent


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", None)) in ("import_module", "__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, arg.value))
    return found


def test_the_package_has_modules_to_check() -> None:
    assert {p.name for p in PACKAGE.rglob("*.py")} >= {"plan.py", "select.py", "types.py"}


def test_planning_imports_no_io_library() -> None:
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in imported_modules(tree):
            if module.split(".")[0] in FORBIDDEN:
                offences.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not offences, "\n".join(offences)


def test_the_checker_catches_every_form() -> None:
    src = ("import httpx\nimport boto3.session\nfrom botocore import x\n"
           "from sqlite3 import c\nimport importlib\n"
           "importlib.import_module('starlette.routing')\n__import__('uvicorn')\n")
    modules = {m.split(".")[0] for _, m in imported_modules(ast.parse(src))}
    assert FORBIDDEN <= modules


def test_planning_and_the_resolved_config_import_without_pydantic() -> None:
    # Loading a file needs the pydantic schema; planning on a loaded Config does not.
    code = ("import sys, humpyard.planning, humpyard.config, humpyard.store\n"
            "heavy = {'pydantic', 'humpyard.config.models', 'sqlite3'} & set(sys.modules)\n"
            "assert not heavy, heavy\n"
            "from humpyard.config import load_config_text\n"
            "assert 'pydantic' in sys.modules\n"
            "from humpyard.store import SQLiteStore\n"
            "assert SQLiteStore.__module__ == 'humpyard.store.sqlite'\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent.parent)}  # this checkout's package
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env=env)
