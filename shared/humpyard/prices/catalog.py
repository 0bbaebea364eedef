"""A models.dev-format catalogue: reading it from a file or a URL, and finding a
configured provider in it.

The catalogue (``https://models.dev/api.json``) is one JSON object keyed by
provider id; each provider has an optional ``api`` base URL and ``models``
keyed by model id, each with ``cost`` (USD per million tokens: ``input``,
``output``, ``cache_read``, ``cache_write``), ``limit`` (``context``,
``output`` tokens), ``tool_call`` and ``modalities`` (``input``: ``text``,
``image``, ...). Only what humpyard declares per endpoint is kept: the input
and output price, the context window, tools and vision. A field that is
missing or of the wrong type is left unknown rather than guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from humpyard.config.problems import did_you_mean
from humpyard.errors import HumpyardError
from humpyard.prices import MODELS_DEV_URL

__all__ = ["MODELS_DEV_URL", "Catalog", "CatalogError", "CatalogModel", "CatalogProvider",
           "parse_catalog", "read_catalog"]

MAX_BYTES = 64 * 1024 * 1024  # api.json is a few MB; anything far larger is not a catalogue
# Hosts of first-party APIs whose catalogue entry gives no ``api`` URL (their
# SDKs know it). Used only when the catalogue has that provider id.
KNOWN_HOSTS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.groq.com": "groq",
    "generativelanguage.googleapis.com": "google",
    "api.mistral.ai": "mistral",
    "api.x.ai": "xai",
    "api.deepseek.com": "deepseek",
    "openrouter.ai": "openrouter",
    "api.together.xyz": "togetherai",
    "api.fireworks.ai": "fireworks-ai",
    "api.cerebras.ai": "cerebras",
    "api.deepinfra.com": "deepinfra",
}


BEDROCK = "amazon-bedrock"
"""The catalogue's id for Amazon Bedrock, whose endpoints are regional
(``bedrock-runtime.{region}.amazonaws.com``) and whose entry gives no ``api``."""
PROFILE_PREFIXES = frozenset({"us", "eu", "apac", "global", "jp", "au", "ca", "us-gov"})
"""The geography a Bedrock inference profile id starts with (``us.anthropic.…``): the
profile is priced as the model after it."""


def _bedrock_host(host: str) -> str | None:
    return BEDROCK if host.startswith("bedrock-runtime.") and \
        host.endswith(".amazonaws.com") else None


class CatalogError(HumpyardError):
    """The catalogue could not be read or is not in the models.dev format."""

    code = "invalid_catalog"


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """What the catalogue says about one model at one provider; None is unknown."""

    id: str
    price_input: float | None = None
    price_output: float | None = None
    context_window: int | None = None
    tools: bool | None = None
    vision: bool | None = None


@dataclass(frozen=True)
class CatalogProvider:
    id: str
    api: str | None
    models: Mapping[str, CatalogModel] = field(default_factory=dict)

    def model(self, name: str) -> CatalogModel | None:
        """The model ``name`` (exactly, else ignoring case), or None."""
        found = self.models.get(name)
        if found is None:
            lowered = {k.lower(): v for k, v in self.models.items()}
            found = lowered.get(name.lower())
        prefix, _, rest = name.partition(".")
        if found is None and prefix in PROFILE_PREFIXES and rest:
            return self.model(rest)  # a Bedrock inference profile: its model's entry
        return found


@dataclass(frozen=True)
class Catalog:
    """A catalogue read from ``source`` (a path or a URL)."""

    source: str
    providers: Mapping[str, CatalogProvider]

    def find_provider(self, base_url: str,
                      catalog_id: str | None) -> tuple[CatalogProvider | None, str]:
        """The catalogue provider a configured provider is, and how it was found
        (or why not): ``catalog_id`` if set, else the provider whose ``api`` URL
        ``base_url`` starts with (the longest such), else the host table."""
        if catalog_id is not None:
            found = self.providers.get(catalog_id)
            if found is None:
                return None, (f"catalog_id {catalog_id!r} is not a provider in the catalogue"
                              + did_you_mean(catalog_id, self.providers))
            return found, f"catalog_id {catalog_id!r}"
        host = (urlsplit(base_url).hostname or "").lower()
        wanted = _url_key(base_url)
        best: list[CatalogProvider] = []
        best_len = -1
        for p in self.providers.values():
            if not p.api:
                continue
            key = _url_key(p.api)
            if key[0] != wanted[0]:
                continue
            # The longest common path prefix wins: opencode.ai/zen/go/v1 over opencode.ai/zen/v1.
            common = 0
            for a, b in zip(key[1], wanted[1], strict=False):
                if a != b:
                    break
                common += 1
            if common > best_len:
                best, best_len = [p], common
            elif common == best_len:
                best.append(p)
        if len(best) == 1:
            return best[0], f"the catalogue's api URL {best[0].api}"
        if len(best) > 1:
            ids = ", ".join(sorted(p.id for p in best))
            return None, f"host {host} is several catalogue providers ({ids}): set catalog_id"
        known = KNOWN_HOSTS.get(host) or _bedrock_host(host)
        if known and known in self.providers:
            return self.providers[known], f"host {host}"
        return None, f"host {host or base_url} is no provider in the catalogue: set catalog_id"


def _url_key(url: str) -> tuple[str, list[str]]:
    parts = urlsplit(url)
    return (parts.hostname or "").lower(), [s for s in parts.path.split("/") if s]


def read_catalog(source: str, *, transport: httpx.BaseTransport | None = None,
                 timeout: float = 30.0) -> Catalog:
    """Read a catalogue from a file path or an ``http(s)://`` URL; ``CatalogError``
    says why one could not be read. ``transport`` is the HTTP seam."""
    if source.startswith(("http://", "https://")):
        body = _fetch(source, transport, timeout)
    else:
        try:
            body = Path(source).read_bytes()
        except OSError as e:
            raise CatalogError(f"cannot read catalogue {source!r}: {e.strerror}") from None
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CatalogError(f"catalogue {source!r} is not JSON: {e}") from None
    return parse_catalog(data, source)


def _fetch(url: str, transport: httpx.BaseTransport | None, timeout: float) -> bytes:
    try:
        with httpx.Client(transport=transport, timeout=timeout, follow_redirects=True,
                          headers={"user-agent": "humpyard-prices"}) as client, \
                client.stream("GET", url) as r:
            if r.status_code != 200:
                raise CatalogError(f"cannot fetch catalogue {url}: HTTP {r.status_code}")
            chunks: list[bytes] = []
            size = 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_BYTES:
                    raise CatalogError(f"catalogue {url} is larger than {MAX_BYTES} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError as e:
        raise CatalogError(f"cannot fetch catalogue {url}: {type(e).__name__}"
                           + (f" ({e})" if str(e) else "")) from None


def parse_catalog(data: Any, source: str = "<memory>") -> Catalog:
    """A ``Catalog`` from api.json's parsed JSON; ``CatalogError`` if it is not that shape."""
    if not isinstance(data, dict):
        raise CatalogError(f"catalogue {source!r} is not a models.dev catalogue: expected an "
                           "object keyed by provider id")
    providers = {}
    for pid, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("models"), dict):
            continue
        api = entry.get("api") if isinstance(entry.get("api"), str) else None
        models = {mid: _model(mid, m) for mid, m in entry["models"].items()
                  if isinstance(m, dict)}
        providers[str(pid)] = CatalogProvider(id=str(pid), api=api, models=models)
    if not providers:
        raise CatalogError(f"catalogue {source!r} is not a models.dev catalogue: no provider "
                           "has 'models'")
    return Catalog(source=source, providers=providers)


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def _table(m: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = m.get(key)
    return value if isinstance(value, dict) else {}


def _model(mid: str, m: Mapping[str, Any]) -> CatalogModel:
    cost, limit, modalities = (_table(m, k) for k in ("cost", "limit", "modalities"))
    price_in, price_out = _number(cost.get("input")), _number(cost.get("output"))
    if price_in is None or price_out is None:  # humpyard's price needs both
        price_in = price_out = None
    context = limit.get("context")
    inputs = modalities.get("input")
    return CatalogModel(
        id=mid, price_input=price_in, price_output=price_out,
        context_window=context if isinstance(context, int) and not isinstance(context, bool)
        and context > 0 else None,
        tools=m["tool_call"] if isinstance(m.get("tool_call"), bool) else None,
        vision=("image" in inputs) if isinstance(inputs, list) else None)
