"""Exports: Perfetto/Chrome trace JSON, Prometheus."""
