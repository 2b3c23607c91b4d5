"""Same bits: does a change to the batch engine leave its output untouched?

Owns the before/after check of a speed change that is meant to be result-preserving.
``--save DIR`` runs the batch engine (``attribute_arrays`` + ``build_snapshot``) on a fixed
set of simulated traces and writes, per trace, the snapshot JSON (sorted keys) and a digest
of every per-record array; ``--check DIR`` runs the same traces with the code as it is now
and lists every trace whose snapshot or arrays differ, and the first differing fields.  The
traces: every scenario × GPU preset (20 s, seed 7), three scenarios through the files
(poll-stamped nvidia-smi readings; one with polls locked to the sensor), and the 1 M-kernel
``launch_bound`` trace of ``engine_speed.py`` with ``--big``.  ``--native off|on|both``
chooses the compiled sweeps (``both``, the default for ``--check``: each mode against the
saved bits).

Run: ``python benchmarks/same_bits.py --save /tmp/bits`` on the commit before the change,
then ``python benchmarks/same_bits.py --check /tmp/bits`` after it (exit 1 on a difference).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    from attribution import native
except ImportError:  # a commit from before the compiled sweeps: numpy only
    native = None  # type: ignore[assignment]
from attribution.engine import attribute_arrays, build_snapshot
from attribution.model import Trace
from attribution.sim import SCENARIOS, simulate

GPUS = ("v100", "a100", "h100", "h200", "rtx3090", "rtx4090")
SEED = 7
FILES = (("varied_mix", "a100", False), ("two_streams", "h100", False),
         ("lag_10", "h200", True))


def traces(big: bool) -> Iterator[tuple[str, Trace]]:
    from ppwtop.sim_io import through_files

    for sc in SCENARIOS:
        for gpu in GPUS:
            yield f"{sc}-{gpu}", simulate(scenario=sc, gpu=gpu, seconds=20.0, seed=SEED).trace
    for sc, gpu, locked in FILES:
        spec = dataclasses.replace(SCENARIOS[sc], locked_polls=locked)
        tr = simulate(scenario=sc, gpu=gpu, seconds=20.0, seed=SEED, spec=spec).trace
        yield f"files-{sc}-{gpu}{'-locked' if locked else ''}", through_files(tr)
    if big:
        yield "launch_bound-1M", simulate(scenario="launch_bound", gpu="a100",
                                          seconds=1_000_000 / 12_270, seed=0).trace


def outputs(tr: Trace) -> tuple[bytes, dict[str, str]]:
    """The snapshot JSON and a digest per per-record array of one engine run."""
    arrays = attribute_arrays(tr)
    snap = build_snapshot(tr, arrays)
    d = snap.to_dict()
    if isinstance(d.get("meta"), dict):
        d["meta"].pop("source", None)  # a temporary file's path
    js = orjson.dumps(d, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    digests: dict[str, str] = {}
    for f in dataclasses.fields(arrays):
        v: Any = getattr(arrays, f.name)
        if isinstance(v, np.ndarray):
            digests[f.name] = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
    for name in ("start_ns", "end_ns", "device", "cause"):
        digests[f"idle.{name}"] = hashlib.sha256(
            np.ascontiguousarray(getattr(arrays.idle, name)).tobytes()).hexdigest()
    return js, digests


def _first_diff(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in one"
            d = _first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path)
    mode.add_argument("--check", type=Path)
    ap.add_argument("--big", action="store_true", help="also the 1 M-kernel trace")
    ap.add_argument("--native", choices=("off", "on", "both"), default=None)
    ap.add_argument("--only", default=None, help="substring of the trace names to run")
    args = ap.parse_args(argv)
    modes = {"off": [False], "on": [True], "both": [False, True]}[
        args.native or ("off" if args.save else "both")]
    if True in modes and (native is None or not native.built()):
        print("attribution._native is not built: checking the numpy forms only")
        modes = [False]
    bad = 0
    for name, tr in traces(args.big):
        if args.only and args.only not in name:
            continue
        for on in modes:
            if native is not None:
                native.use(on)
            t0 = time.process_time()
            js, dig = outputs(tr)
            dt = time.process_time() - t0
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{name}.json").write_bytes(js)
                (args.save / f"{name}.arrays.json").write_bytes(orjson.dumps(dig))
                print(f"saved {name} ({dt:.2f} s)")
                continue
            ref_js = (args.check / f"{name}.json").read_bytes()
            ref_dig = orjson.loads((args.check / f"{name}.arrays.json").read_bytes())
            diffs = [k for k in ref_dig if ref_dig[k] != dig.get(k)]
            tag = f"{name} native={'on' if on else 'off'}"
            if js == ref_js and not diffs:
                print(f"same   {tag} ({dt:.2f} s)")
                continue
            bad += 1
            why = _first_diff(orjson.loads(ref_js), orjson.loads(js)) if js != ref_js else None
            print(f"DIFFER {tag}: arrays {diffs or 'same'}; snapshot {why or 'same'}")
    if args.check:
        print("all the same" if not bad else f"{bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
