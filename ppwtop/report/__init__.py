"""Optimization reports (Markdown and HTML)."""
