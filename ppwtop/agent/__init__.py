"""The in-target CUPTI agent (raw activity buffers out over a Unix socket)."""
