"""``GET /v1/models`` carries what clients size their prompts by: the smallest context
window (``context_window``, and OpenRouter's ``context_length``) and output limit the
route's endpoints declare, and the capabilities every endpoint declares."""

from __future__ import annotations

import openai

from tests.support.gateway import running_gateway

CONFIG = """
[providers.p]
base_url = "http://127.0.0.1:9/v1"

[targets.big]
endpoints = [{ provider = "p", model = "big", context_window = 200000, tools = true,
               vision = true, max_output_tokens = 64000 }]

[targets.small]
endpoints = [{ provider = "p", model = "small", context_window = 32768, tools = true,
               max_output_tokens = 8192 },
             { provider = "p", model = "small-2", context_window = 65536, tools = true }]

[targets.unknown]
endpoints = [{ provider = "p", model = "unknown" }]

[routes.auto]
targets = ["big", "small"]
"""


def test_models_list_the_smallest_window_and_the_shared_capabilities() -> None:
    with running_gateway(CONFIG) as gw, gw.client() as c:
        listed = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
        one = c.get("/v1/models/auto").json()
    auto = listed["auto"]
    assert auto == one
    assert (auto["context_window"], auto["context_length"]) == (32768, 32768)
    assert auto["max_output_tokens"] == 8192
    assert auto["capabilities"] == {"tools": True, "vision": False, "reasoning": False}
    big = listed["big"]
    assert (big["context_window"], big["max_output_tokens"]) == (200000, 64000)
    assert big["capabilities"] == {"tools": True, "vision": True, "reasoning": False}
    unknown = listed["unknown"]  # nothing declared: nothing claimed
    assert "context_window" not in unknown and "max_output_tokens" not in unknown
    assert unknown["capabilities"] == {"tools": False, "vision": False, "reasoning": False}


def test_the_openai_sdk_still_reads_the_list() -> None:
    with running_gateway(CONFIG) as gw, openai.OpenAI(base_url=gw.v1, api_key="x") as sdk:
        models = {m.id: m for m in sdk.models.list()}
    assert models["auto"].owned_by == "humpyard"
    assert models["auto"].model_extra is not None
    assert models["auto"].model_extra["context_window"] == 32768
