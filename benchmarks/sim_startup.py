"""How long ``ppwtop record --backend sim`` holds the command back before its code runs.

The command is a Python script that prints how long after ppwtop's launch it started (from
``/proc/self/stat``) and when its first line of code ran; the difference is the agent's start
inside it (bootstrap ``sitecustomize``: imports, the simulator's fake libcupti, the
connection).  Each round runs three commands side by side, in an order that rotates:

* ``compiled``: as installed (the simulator's recursion in ``attribution._native``);
* ``scipy``: ``PPWTOP_NATIVE=0``, the simulator on ``scipy.signal.lfilter`` (the start-up
  before 2026-12-05, same bits);
* ``floor``: the same script run by ``python`` alone.

Prints the medians of each and the ratios (launch to first line: the median of each run's
own ``time.time()`` difference; the split at the command's start reads ``/proc`` in 10 ms
ticks).  Run: ``python benchmarks/sim_startup.py
[--rounds N]``.  Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TARGET = textwrap.dedent("""
    import os, sys, time
    now = time.time()
    ticks = os.sysconf("SC_CLK_TCK")
    start_s = float(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / ticks
    uptime_s = float(open("/proc/uptime").read().split()[0])
    t0 = float(os.environ["SIM_STARTUP_T0"])
    print(f"{now - t0 - (uptime_s - start_s):.4f} {now - t0:.4f}", flush=True)
""")


def _one(kind: str, script: Path, out_dir: Path) -> tuple[float, float]:
    """(process started, first line ran), seconds after launch."""
    env = dict(os.environ)
    if kind == "scipy":
        env["PPWTOP_NATIVE"] = "0"
    cmd = [sys.executable, str(script)]
    if kind != "floor":
        cmd = [sys.executable, "-m", "ppwtop", "record", "-o", str(out_dir / f"{kind}.ppw"),
               "--backend", "sim", "--seconds", "5", "--", *cmd]
    env["SIM_STARTUP_T0"] = repr(time.time())
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=True)
    started, ran = (float(v) for v in r.stdout.split()[:2])
    return started, ran


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from attribution import native as extension

    if not extension.built():  # both forms would then run scipy's filter: a ratio near 1
        sys.exit("sim_startup: attribution._native is not built; nothing to compare")
    kinds = ["compiled", "scipy", "floor"]
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "target.py"
        script.write_text(TARGET)
        for r in range(args.rounds):
            order = kinds[r % 3:] + kinds[:r % 3]
            for k in order:
                got[k].append(_one(k, script, Path(tmp)))
    med = {k: (statistics.median(s for s, _ in v), statistics.median(e - s for s, e in v))
           for k, v in got.items()}
    print(f"{args.rounds} rounds; medians in seconds after launch")
    print(f"{'':10} {'process started':>16} {'start to code':>14}")
    for k in kinds:
        print(f"{k:10} {med[k][0]:16.3f} {med[k][1]:14.3f}")
    agent = {k: med[k][1] - med["floor"][1] for k in ("compiled", "scipy")}
    print(f"agent's own start (start to code, less the floor): compiled {agent['compiled']:.3f} s, "
          f"scipy {agent['scipy']:.3f} s, ratio {agent['compiled'] / agent['scipy']:.2f}")
    total = {k: statistics.median(e for _, e in got[k]) for k in ("compiled", "scipy")}
    print(f"launch to the command's first line: compiled {total['compiled']:.3f} s, scipy "
          f"{total['scipy']:.3f} s, ratio {total['compiled'] / total['scipy']:.2f}")


if __name__ == "__main__":
    main()
