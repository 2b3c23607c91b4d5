"""Time to inject into a running Python process, and the target's pause while it happens.

For each run a fresh target loops (``busy``: pure Python; ``sleep``: time.sleep(0.02) per
iteration) and times its own iterations. ppwtop injects either ``pass`` (the injection alone) or
``attach_code`` with a stand-in entry (imports ppwtop, connects back) and waits for the
connect-back. Reported: median wall time of ``inject()`` (preflight
included) and of inject + connect-back, and the target's longest iteration gap with injection
vs a baseline run of the same target without it, interleaved. Usage:

    python benchmarks/inject_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ppwtop.inject import ConnectBack, attach_code, inject

TARGET = textwrap.dedent("""
    import json, os, sys, time
    mode, stop = sys.argv[1], sys.argv[2]
    print("ready", flush=True)
    gap, last = 0.0, time.perf_counter()
    while not os.path.exists(stop):
        if mode == "sleep":
            time.sleep(0.02)
        else:
            for _ in range(100):
                pass
        now = time.perf_counter()
        d = now - last
        if mode == "sleep":
            d -= 0.02
        gap, last = max(gap, d), now
    print(json.dumps({"max_gap_s": gap}), flush=True)
""")


def one(mode: str, payload: str, tmp: Path, env: dict[str, str]) -> dict[str, float]:
    stop = tmp / f"stop-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", TARGET, mode, str(stop)],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    out: dict[str, float] = {}
    if payload == "pass":  # the injection alone: the target runs nothing of ours
        t0 = time.perf_counter()
        done = inject(proc.pid, "pass", timeout_s=10)
        out = {"inject_s": time.perf_counter() - t0, "how": done.detail}  # type: ignore[dict-item]
    elif payload == "attach":  # attach_code: imports ppwtop + stand-in entry, connects back
        with ConnectBack() as cb:
            code = attach_code(str(tmp / "agent.sock"), "sim", [], report_path=cb.path,
                               entry="standin_entry:entry")
            t0 = time.perf_counter()
            done = inject(proc.pid, code, timeout_s=10)
            t1 = time.perf_counter()
            cb.wait(proc.pid, timeout_s=10)
            t2 = time.perf_counter()
        out = {"inject_s": t1 - t0, "acked_s": t2 - t0, "how": done.detail}  # type: ignore[dict-item]
    else:
        time.sleep(0.05)
    time.sleep(0.3)
    stop.touch()
    text, _ = proc.communicate(timeout=10)
    out["max_gap_s"] = json.loads(text.strip().splitlines()[-1])["max_gap_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "standin_entry.py").write_text("def entry(socket_path, backend):\n    pass\n")
        env = {**os.environ, "PYTHONPATH": str(tmp)}
        results: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.runs):
            for mode in ("busy", "sleep"):
                for payload in ("pass", "attach", "baseline"):
                    results.setdefault(f"{mode}/{payload}", []).append(
                        one(mode, payload, tmp, env))
    summary = {}
    for key, runs in results.items():
        s = {"max_gap_ms_median": round(1e3 * statistics.median(r["max_gap_s"] for r in runs), 2)}
        if "inject_s" in runs[0]:
            s["inject_ms_median"] = round(1e3 * statistics.median(r["inject_s"] for r in runs), 1)
            s["how"] = sorted({str(r["how"]) for r in runs})  # type: ignore[assignment]
        if "acked_s" in runs[0]:
            s["acked_ms_median"] = round(1e3 * statistics.median(r["acked_s"] for r in runs), 1)
        summary[key] = s
    print(json.dumps({"python": sys.version.split()[0], "runs": args.runs, **summary}, indent=1))


if __name__ == "__main__":
    main()
