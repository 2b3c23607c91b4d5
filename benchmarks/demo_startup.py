"""Time from ``ppwtop demo`` to its first frame that shows a kernel row, in a real terminal.

Each round starts the demo in a fresh tmux server (160x48) twice, side by side in an order
that alternates: as installed (the simulator's recursion compiled) and with
``PPWTOP_NATIVE=0`` (the simulator on ``scipy.signal.lfilter``, the start-up before
2026-12-05; the engine's numpy forms too, which matter little before the first frame).  The
screen is read every 20 ms until one of the demo's kernel names is on it.  Prints the medians
and their ratio.  Needs tmux.  Run: ``python benchmarks/demo_startup.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid

KERNEL_MARKS = ("flash_fwd", "gemm", "SoftMax", "layer_norm")  # the demo scenario's kernels


def _first_frame_s(native: bool, timeout_s: float = 60.0) -> float:
    tmux = shutil.which("tmux")
    assert tmux is not None
    sock = f"ppwtop-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def cmd(*a: str) -> str:
        return subprocess.run([tmux, "-L", sock, "-f", "/dev/null", *a], capture_output=True,
                              text=True, timeout=10, check=False).stdout

    env = "" if native else "PPWTOP_NATIVE=0 "
    t0 = time.monotonic()
    cmd("new-session", "-d", "-s", "t", "-x", "160", "-y", "48",
        f"{env}{sys.executable} -m ppwtop demo")
    try:
        while time.monotonic() - t0 < timeout_s:
            if any(m in cmd("capture-pane", "-p", "-t", "t") for m in KERNEL_MARKS):
                return time.monotonic() - t0
            time.sleep(0.02)
        raise RuntimeError("no kernel row on the screen in time")
    finally:
        cmd("kill-server")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("demo_startup: needs tmux")
    from attribution import native as extension

    if not extension.built():  # both forms would run scipy's filter: a ratio near 1
        sys.exit("demo_startup: attribution._native is not built; nothing to compare")
    got: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for native in ((True, False) if r % 2 == 0 else (False, True)):
            got[native].append(_first_frame_s(native))
    on, off = statistics.median(got[True]), statistics.median(got[False])
    print(f"{args.rounds} rounds; first frame with a kernel row, median seconds")
    print(f"compiled recursion {on:.2f} s   PPWTOP_NATIVE=0 {off:.2f} s   ratio {on / off:.2f}")
    print("all:", {("compiled" if k else "scipy"): [round(v, 2) for v in vs]
                   for k, vs in got.items()})


if __name__ == "__main__":
    main()
