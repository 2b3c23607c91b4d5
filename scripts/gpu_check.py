#!/usr/bin/env python3
"""The one script to run when an NVIDIA GPU is lent for a few minutes: what does it really do?

Owns the run: argparse, the time budget, the sections (environment, nvml, sensor, poll_grid,
energy, cupti, overhead, attribute), each time-boxed and wrapped so that a failure records
``{"error": ...}`` and the run goes on, and the findings JSON, rewritten atomically after
every section (a kill leaves the sections done so far).  ``--fake`` runs the same code against
ppwtop's fakes (fake libnvidia-ml driven by the simulator's h200 preset, fake libcupti), which
is how CI tests it.  Square-wave runs and fits live in scripts/gpu_check_sensor.py; the other
sections in scripts/gpu_check_sections.py.  See docs/hardware/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

try:
    import orjson
except ImportError:  # a bare lent machine: the stdlib still writes the findings
    orjson = None  # type: ignore[assignment]

SCHEMA = "ppwtop.gpu_check/1"
SECTIONS = ("environment", "nvml", "sensor", "poll_grid", "energy", "cupti", "overhead",
            "attribute")
RESERVE_S = 5.0  # kept back at the end for writing the JSON (at most 10 % of the budget)


class SectionTimeoutError(Exception):
    """A section ran past its time box."""


class Findings:
    """The findings document; :meth:`write` replaces the file atomically."""

    def __init__(self, path: pathlib.Path, args: argparse.Namespace) -> None:
        self.path = path
        self.doc: dict[str, Any] = {
            "schema": SCHEMA, "fake": bool(args.fake), "budget_s": args.budget_s,
            "started_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "status": "running", "sections": {},
        }

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        if orjson is not None:
            data = orjson.dumps(self.doc, option=orjson.OPT_INDENT_2
                                | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
                                default=str)
        else:
            data = json.dumps(self.doc, indent=2, default=str).encode()
        tmp.write_bytes(data)
        os.replace(tmp, self.path)


@contextlib.contextmanager
def time_box(seconds: float) -> Iterator[None]:
    """Raise :class:`SectionTimeoutError` in the main thread after ``seconds``."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise SectionTimeoutError(f"section ran past its {seconds:.0f} s time box")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _summary(name: str, res: dict[str, Any]) -> str:
    if "error" in res:
        return f"{name:<12} ERROR {res['error']}"
    if "skipped" in res:
        return f"{name:<12} skipped: {res['skipped']}"
    return f"{name:<12} ok  {res.get('summary', '')}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Characterise a lent NVIDIA GPU for ppwtop.")
    ap.add_argument("--out", type=pathlib.Path, default=None,
                    help="findings JSON (default docs/hardware/findings-<date>.json)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="total time budget (s)")
    ap.add_argument("--fake", action="store_true",
                    help="use ppwtop's fakes driven by the simulator (h200) instead of a GPU")
    ap.add_argument("--device", type=int, default=0, help="NVML/CUDA index of the GPU")
    ap.add_argument("--only", default="", help="comma-separated sections to run (default all)")
    args = ap.parse_args(argv)
    if args.out is None:
        day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        args.out = ROOT / "docs" / "hardware" / f"findings-{day}.json"
    t_start = time.monotonic()
    deadline = t_start + args.budget_s - min(RESERVE_S, 0.1 * args.budget_s)
    findings = Findings(args.out, args)
    findings.write()

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)

    from gpu_check_bare import bare_environment

    try:
        import gpu_check_sections as sec
    except Exception as e:  # missing numpy/pynvml on the lent machine: say what is there
        err = f"cannot import the checks: {type(e).__name__}: {e}"
        findings.doc["sections"] = {n: {"error": err} for n in SECTIONS}
        findings.doc["sections"]["environment"] = {"error": err, "bare": bare_environment()}
        findings.doc["status"] = "complete"
        findings.write()
        print(err, flush=True)
        return 1

    ctx = sec.Context(fake=args.fake, device=args.device, deadline=deadline,
                      logs_prefix=args.out.with_suffix(""))
    wanted = [s for s in args.only.split(",") if s] or list(SECTIONS)
    table: dict[str, tuple[Callable[[sec.Context], dict[str, Any]], float]] = sec.TABLE
    try:
        for name in SECTIONS:
            if name not in wanted:
                continue
            fn, share = table[name]
            left = deadline - time.monotonic()
            t0 = time.monotonic()
            if left < 1.0:
                res: dict[str, Any] = {"skipped": "budget exhausted"}
            else:
                box = min(left, max(share * args.budget_s, 8.0))
                ctx.section_deadline = time.monotonic() + box * 0.9
                try:
                    with time_box(box):
                        res = fn(ctx)
                except SectionTimeoutError as e:
                    res = {"error": str(e)}
                except Exception as e:
                    res = {"error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc(limit=6).splitlines()[-8:]}
            res["elapsed_s"] = round(time.monotonic() - t0, 3)
            findings.doc["sections"][name] = res
            findings.write()
            print(_summary(name, res), flush=True)
        findings.doc["status"] = "complete"
    finally:
        if findings.doc["status"] != "complete":
            findings.doc["status"] = "interrupted"
        findings.doc["elapsed_s"] = round(time.monotonic() - t_start, 3)
        findings.write()
        ctx.close()
    print(f"findings: {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
