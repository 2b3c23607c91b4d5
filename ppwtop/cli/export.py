"""`ppwtop export INPUT --perfetto OUT.json [--snapshot SNAPSHOT]`.

Owns the command line only: decides whether INPUT is a snapshot or a trace (Kineto JSON,
nsys SQLite, .ppw recording), builds the Chrome/Perfetto trace-event document with
:mod:`ppwtop.exporters.perfetto` and writes it.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np

from attribution.model import Trace
from attribution.presets import preset_for_name
from attribution.snapshot import Snapshot
from ppwtop.cli.common import gpu_list, parser, print_warnings, require_power_for_gpus
from ppwtop.errors import InputError
from ppwtop.fileio import read_head

SNAPSHOT_TAG = b'"ppwtop.snapshot/1"'


def is_snapshot(path: str | Path) -> bool:
    """True when the file is a ppwtop snapshot (its schema tag sits in the first bytes)."""
    p = Path(path)
    head = read_head(p, 65536)
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 65536)
        except zlib.error:
            return False
    return SNAPSHOT_TAG in head[:4096]


def snapshot_checks(trace: Trace, snap: Snapshot, path: str) -> list[str]:
    """Whether ``--snapshot`` describes this trace: an error (InputError) when its window
    does not overlap the trace's span at all (a snapshot of another run would spread its
    joules over these records: an A100 run's 4 267 J over an H100 recording, 1 870 W on a
    GEMM of a 700 W board); lines when its GPU models differ from the trace's or it names
    under half of the trace's kernels."""
    lines: list[str] = []
    span = trace.gpu_span_ns()
    if span is not None and (snap.window.end_ns <= span[0] or snap.window.start_ns >= span[1]):
        raise InputError(path, "its window does not overlap the trace's: a snapshot of "
                               "another run (attribute this trace to get its own)")
    models = {g.index: g.model for g in snap.gpus}
    for d in trace.devices:
        named = preset_for_name(d.name)
        if named is not None and models.get(d.index, named.key) not in (named.key, "unknown"):
            lines.append(f"--snapshot {path}: GPU {d.index} is {models[d.index]} there but "
                         f"{named.key} in the trace ({d.name!r}): another machine's run?")
    ids = np.unique(trace.kernels.name_id)
    names = {trace.name(int(i)) for i in ids}
    known = {k.name for k in snap.kernels}
    if names and len(names & known) < 0.5 * len(names):
        lines.append(f"--snapshot {path}: names {len(names & known)} of the trace's "
                     f"{len(names)} kernels; the rest get no energy from it")
    return lines


def _with_power(trace: Trace, path: str, tz: str | None, gpus: list[int] | None) -> Trace:
    """The trace merged with a power log as ``ppwtop attribute`` merges it
    (:func:`ppwtop.cli.attribute.merge_power`), its warnings on stderr."""
    from ppwtop.cli.attribute import merge_power
    from ppwtop.importers import load_power

    merged, warnings = merge_power(trace, load_power(path, tz=tz), path, tz=tz, gpus=gpus)
    print_warnings(warnings)
    return merged


def main(argv: list[str]) -> int:
    p = parser("export", "Export a trace (Kineto JSON, nsys SQLite, .ppw recording) or a "
                         "snapshot as a Chrome/Perfetto trace with power/clock counter tracks "
                         "and energy-annotated slices.")
    p.add_argument("input", metavar="INPUT", help="trace or snapshot file")
    p.add_argument("--perfetto", metavar="OUT.json", required=True,
                   help="write the Chrome trace-event JSON here (open in ui.perfetto.dev)")
    p.add_argument("--power", metavar="FILE",
                   help="for a trace: a power log (nvidia-smi CSV or .ppw) to merge in, for "
                        "the power counter track and the energies")
    p.add_argument("--power-tz", metavar="TZ", help="time zone of naive CSV timestamps")
    p.add_argument("--power-gpus", metavar="LIST", type=gpu_list,
                   help="the power log's GPU index of the trace's GPU 0, 1, ... (the job's "
                        "CUDA_VISIBLE_DEVICES, e.g. 3 or 3,5)")
    p.add_argument("--snapshot", metavar="SNAPSHOT",
                   help="for a trace: give each record its class's energy from this snapshot "
                        "(class energy x duration share) instead of the engine's")
    p.add_argument("--power-split", action="store_true",
                   help="for a trace: share the measured board power among the records "
                        "running at each instant (the naive split, no sensor model) instead "
                        "of the engine's attribution, e.g. to compare the two")
    args = p.parse_args(argv)
    require_power_for_gpus("export", args.power_gpus, args.power)
    from ppwtop.snapshot_io import check_output

    check_output(args.perfetto, [args.input, args.power, args.snapshot])

    from ppwtop.exporters.perfetto import export_snapshot, export_trace, write_perfetto
    from ppwtop.report import load_snapshot

    if is_snapshot(args.input):
        for opt, val in (("--snapshot", args.snapshot), ("--power", args.power),
                         ("--power-split", args.power_split),
                         ("--power-gpus", args.power_gpus)):
            if val:
                raise InputError(args.input, f"{opt} only applies when INPUT is a trace")
        doc = export_snapshot(load_snapshot(args.input), source=str(args.input))
    else:
        from ppwtop.importers import import_notes, load_trace

        snap = load_snapshot(args.snapshot) if args.snapshot else None
        trace = load_trace(args.input)
        notes = import_notes(args.input, trace)
        if args.power:
            trace = _with_power(trace, args.power, args.power_tz, args.power_gpus)
        if snap is not None:
            notes += snapshot_checks(trace, snap, args.snapshot)
        doc = export_trace(trace, snap, source=str(args.input), use_engine=not args.power_split)
        if notes:  # a cut or corrupt recording, a mismatched snapshot: in the file, on stderr
            doc["metadata"]["warnings"] = [*notes, *doc["metadata"].get("warnings", [])]
        # and what the engine said of the energies (no power, another GPU's log, a short
        # run), on stderr too, as `attribute` prints it: it was only in the file's notes
        print_warnings(notes, doc["metadata"].get("notes", []))
    write_perfetto(doc, args.perfetto)
    md = doc["metadata"]
    n = sum(1 for e in doc["traceEvents"] if e["ph"] != "M")
    print(f"wrote {n} events to {args.perfetto} (energy: {md['energy_method']}, kernels "
          f"{md['kernel_energy_j']:.4g} J)", file=sys.stderr)
    return 0

