"""ppwtop: a `top` for GPU energy (the application: collectors, agent, importers, CLI, TUI)."""

__version__ = "0.1.0"
