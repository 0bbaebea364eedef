"""Provider quota: pluggable sources (one module each) and the poller.

``SOURCES`` maps a provider's ``quota_source`` name to its source.
"""

from collections.abc import Mapping

from humpyard.quota.base import QuotaReading, QuotaSource, Window
from humpyard.quota.opencode_go import OpencodeGo

SOURCES: Mapping[str, QuotaSource] = {"opencode-go": OpencodeGo()}

__all__ = ["SOURCES", "OpencodeGo", "QuotaReading", "QuotaSource", "Window"]
