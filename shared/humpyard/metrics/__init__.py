"""Metrics without third-party dependencies: a thread-safe registry, Prometheus text
exposition (``GET /metrics`` locally) and CloudWatch EMF records (Lambda).

- ``registry``: ``Metrics`` with ``Counter``, ``Gauge``, ``Histogram``.
- ``prometheus``: the text format 0.0.4 renderer.
- ``emf``: EMF records and the dimension-set contract alarms rely on.
- ``gateway``: ``GatewayMetrics``, the gateway's fixed metric set.
"""

from humpyard.metrics.gateway_metrics import GatewayMetrics
from humpyard.metrics.prometheus import CONTENT_TYPE
from humpyard.metrics.registry import Counter, Gauge, Histogram, Metrics

__all__ = ["CONTENT_TYPE", "Counter", "Gauge", "GatewayMetrics", "Histogram", "Metrics"]
