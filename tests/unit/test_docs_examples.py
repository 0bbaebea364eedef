"""Every TOML block in the docs and README, and every example file, loads.

Docs snippets are complete configurations on purpose, so they cannot rot.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from humpyard.config import load_config, load_config_text

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```toml\n(.*?)```", re.S)
# a value of its own each: two client keys with one secret are refused
ENV = {k: f"x-{k.lower()}" for k in (
    "OPENROUTER_API_KEY", "GROQ_API_KEY", "OPENAI_API_KEY", "HUMPYARD_KEY", "HARNESS_KEY",
    "CI_KEY", "PUBLIC_API_KEY", "PAID_API_KEY", "OPENCODE_API_KEY")}


def blocks() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            out.append((doc.name, i, m.group(1)))
    return out


def test_docs_have_toml_examples():
    assert len(blocks()) >= 6


@pytest.mark.parametrize("name,index,text", blocks(), ids=lambda v: str(v)[:30])
def test_docs_toml_block_is_a_valid_configuration(name, index, text):
    load_config_text(text, source=f"{name}#{index}", env=ENV)


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.toml")),
                         ids=lambda p: p.name)
def test_example_files_load(path):
    load_config(path, env=ENV)
