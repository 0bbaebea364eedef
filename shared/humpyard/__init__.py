"""humpyard: an LLM gateway with explainable routing and failover."""

__version__ = "0.1.0"
