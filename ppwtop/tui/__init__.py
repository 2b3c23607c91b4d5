"""The Textual UI: renders Snapshots only; never touches NVML or CUPTI."""
