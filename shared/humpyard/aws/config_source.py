"""Where a Lambda instance reads its configuration from, and reloading it when due.

The source is the bundled file (``HUMPYARD_CONFIG``) or, when
``HUMPYARD_CONFIG_S3`` names one (``s3://bucket/key``), an S3 object, or,
when ``HUMPYARD_CONFIG_APPCONFIG`` names one (``application/environment/profile``),
an AWS AppConfig configuration profile read through the AppConfig Data API.
``ConfigReloader.maybe_reload`` runs on the request path: it does nothing
until ``reload_poll_secs`` have passed since the last look (so a warm
request costs no call), then asks the source for a new version (one
``HeadObject`` for S3, one ``GetLatestConfiguration`` for AppConfig when the
service allows the next poll) and, only if it changed, loads it. All or
nothing: an invalid configuration is logged with the reason and the old one
keeps serving. Lambda freezes between requests, so there is no background thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from humpyard.clock import Clock
from humpyard.config.load import load_config_text
from humpyard.config.spec import Config
from humpyard.errors import ConfigError
from humpyard.reload import pool_changes

log = logging.getLogger("humpyard.reload")


class ConfigSource(Protocol):
    """A configuration's text and an opaque version that changes when the text does."""

    name: str

    def version(self) -> str: ...

    def read(self) -> tuple[str, str]:
        """(text, version)."""
        ...


class FileSource:
    """The bundled file; its version is its modification time and size."""

    def __init__(self, path: Path):
        self.path = path
        self.name = str(path)

    def version(self) -> str:
        st = os.stat(self.path)
        return f"{st.st_mtime_ns}:{st.st_size}"

    def read(self) -> tuple[str, str]:
        version = self.version()
        return self.path.read_text(encoding="utf-8"), version


class S3Source:
    """An S3 object; its version is the ETag (one HeadObject per check)."""

    def __init__(self, url: str, client: Any):
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc or not parts.path.strip("/"):
            raise ConfigError(f"HUMPYARD_CONFIG_S3: expected s3://bucket/key, got {url!r}")
        self.bucket, self.key = parts.netloc, parts.path.lstrip("/")
        self.client = client
        self.name = url

    def version(self) -> str:
        return str(self.client.head_object(Bucket=self.bucket, Key=self.key)["ETag"])

    def read(self) -> tuple[str, str]:
        obj = self.client.get_object(Bucket=self.bucket, Key=self.key)
        return obj["Body"].read().decode("utf-8"), str(obj["ETag"])


class AppConfigSource:
    """An AppConfig configuration profile, through the AppConfig Data API.

    One configuration session per instance (``StartConfigurationSession``), then
    ``GetLatestConfiguration`` with the token the previous call returned, never
    sooner than the ``NextPollIntervalInSeconds`` the service asked for (a look
    before then reports the version already held, without a call). An empty
    answer means unchanged. A failed call ends the session, so the next look
    starts a new one (tokens expire after a day without a poll). The version is
    the count of contents received plus the deployment's version label.
    """

    MIN_POLL_SECS = 15  # the service's floor for RequiredMinimumPollIntervalInSeconds

    def __init__(self, ref: str, client: Any, clock: Clock):
        parts = ref.split("/")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise ConfigError("HUMPYARD_CONFIG_APPCONFIG: expected "
                              f"application/environment/profile, got {ref!r}")
        self.application, self.environment, self.profile = parts
        self.client = client
        self.clock = clock
        self.name = f"appconfig:{ref}"
        self._token: str | None = None
        self._next_poll = 0.0
        self._text: str | None = None
        self._version: str | None = None
        self._received = 0

    def _poll(self) -> None:
        now = self.clock.monotonic()
        if self._token is not None and now < self._next_poll:
            return
        try:
            if self._token is None:
                self._token = self.client.start_configuration_session(
                    ApplicationIdentifier=self.application,
                    EnvironmentIdentifier=self.environment,
                    ConfigurationProfileIdentifier=self.profile,
                    RequiredMinimumPollIntervalInSeconds=self.MIN_POLL_SECS,
                )["InitialConfigurationToken"]
            got = self.client.get_latest_configuration(ConfigurationToken=self._token)
        except Exception:
            self._token = None
            raise
        self._token = got["NextPollConfigurationToken"]
        interval = got.get("NextPollIntervalInSeconds")
        self._next_poll = now + float(self.MIN_POLL_SECS if interval is None else interval)
        data = got.get("Configuration") or b""
        if hasattr(data, "read"):
            data = data.read()
        if data:  # empty: unchanged since the last call of this session
            self._received += 1
            self._text = data.decode("utf-8")
            self._version = f"{self._received}:{got.get('VersionLabel') or ''}"

    def version(self) -> str:
        self._poll()
        return self._version or ""

    def read(self) -> tuple[str, str]:
        """The content held (from the look ``version`` just made), else a first look."""
        if self._text is None:
            self._poll()
        if self._text is None:
            raise ConfigError(f"{self.name}: AppConfig returned no configuration "
                              "(is a version deployed to the environment?)")
        return self._text, self._version or ""


class ConfigReloader:
    """Polls a ``ConfigSource`` at most every ``reload_poll_secs`` and applies changes."""

    def __init__(self, source: ConfigSource, current: Callable[[], Config],
                 apply: Callable[[Config], None], env: Mapping[str, str], clock: Clock,
                 version: str | None = None):
        self.source = source
        self.current = current
        self.apply = apply
        self.env = env
        self.clock = clock
        self._version = version
        self._last_look = clock.monotonic()

    def maybe_reload(self) -> bool | None:
        """Reload when due and changed: True applied, False rejected, None nothing to do."""
        every = self.current().reload_poll_secs
        now = self.clock.monotonic()
        if every <= 0 or now - self._last_look < every:
            return None
        self._last_look = now
        try:
            if self.source.version() == self._version:
                return None
            text, version = self.source.read()
        except Exception as e:  # noqa: BLE001 - an unreachable source keeps the old config
            log.error("configuration source %s could not be read; the previous "
                      "configuration keeps serving: %s", self.source.name, type(e).__name__)
            return False
        self._version = version
        try:
            new = load_config_text(text, source=self.source.name, env=self.env)
        except ConfigError as e:
            log.error("reload rejected; the previous configuration keeps serving: %s", e)
            return False
        for line in pool_changes(self.current(), new):
            log.warning("pool membership changed %s", line)
        self.apply(new)
        log.info("configuration reloaded source=%s digest=%s", new.source, new.digest)
        return True
