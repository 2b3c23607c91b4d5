"""A simulated run as ``ppwtop attribute --trace … --power …`` reads it: written as Kineto
JSON + nvidia-smi CSV by ``ppwtop simulate``'s writers, read back by the importers and merged
as the command merges them (the tests' copy of ``benchmarks/accuracy.py``'s path)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from attribution.model import Trace
from ppwtop.cli.attribute import merge_power
from ppwtop.importers import load_power, load_trace
from ppwtop.sim_io import write_kineto, write_smi_csv


def through_files(trace: Trace, *, device_name: str | None = None) -> Trace:
    """``trace`` through the files; ``device_name``: every device renamed (an unknown board)."""
    with tempfile.TemporaryDirectory() as d:
        tp, pp = Path(d) / "t.json.gz", Path(d) / "p.csv"
        write_kineto(trace, tp)
        write_smi_csv(trace, pp)
        merged, _ = merge_power(load_trace(tp), load_power(pp), str(pp))
    if device_name is not None:
        merged = dataclasses.replace(merged, devices=[
            dataclasses.replace(dv, name=device_name) for dv in merged.devices])
    return merged
