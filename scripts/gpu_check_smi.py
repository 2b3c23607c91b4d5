"""The nvidia-smi log beside a gpu_check sensor run, and the publish-grid check on it.

Owns starting and stopping ``nvidia-smi -lms 10`` around a real square-wave run (or, on the
fake board, writing the log such a poll would have written from the board's own readings),
and the check of what ``ppwtop attribute`` makes of that log: each poll-stamped reading's
publish interval (``attribution/engine/publish_grid.py``: the poll gap narrowed by the
sensor's publish grid) against the publish time NVML itself reports for the value shown.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from attribution.engine.publish_grid import LOCKED_POLLS, publish_spread
from attribution.engine.timebase import readings_for
from attribution.model import PowerField, Trace

I64 = npt.NDArray[np.int64]
QUERY = "timestamp,power.draw.instant"
LOOP_MS = 10
MS = 1_000_000


def new_path(prefix: Path) -> Path:
    """A fresh file for one run's log, ``<prefix>-smi-<k>.csv`` beside the findings, so a lent
    board's raw log comes back with them."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    k = 1
    while True:
        path = prefix.with_name(f"{prefix.name}-smi-{k}.csv")
        try:
            with path.open("x"):
                return path
        except FileExistsError:
            k += 1


def start(device: int, path: Path) -> subprocess.Popen[bytes] | str:
    """``nvidia-smi`` logging the instant power of ``device`` every 10 ms into ``path``; or
    why it could not start."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "no nvidia-smi on PATH"
    try:
        return subprocess.Popen(
            [exe, f"--id={device}", f"--query-gpu={QUERY}", "--format=csv",
             f"--loop-ms={LOOP_MS}", f"--filename={path}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as e:
        return f"nvidia-smi: {e}"


def stop(proc: subprocess.Popen[bytes] | str) -> str:
    """Stop the log (if it ran); '' when it ran, else why not."""
    if isinstance(proc, str):
        return proc
    proc.terminate()
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5.0)
    return ""


def write_fake(published_t_ns: I64, published_mw: npt.NDArray[np.int64], t0_ns: int,
               t1_ns: int, path: Path, *, seed: int = 11) -> None:
    """What ``nvidia-smi -lms 10`` would have logged of these published readings: polls
    10 ms plus 1–4 ms of query time apart, each showing the latest publish, stamped in UTC
    to the millisecond (truncated), as nvidia-smi prints local time."""
    rng = np.random.default_rng(seed)
    n = int((t1_ns - t0_ns) / (LOOP_MS * MS)) + 1
    polls = t0_ns + np.cumsum((LOOP_MS + rng.uniform(1.0, 4.0, n)) * MS).astype(np.int64)
    polls = polls[polls < t1_ns]
    shown = np.searchsorted(published_t_ns, polls, side="right") - 1
    polls, shown = polls[shown >= 0], shown[shown >= 0]
    lines = ["timestamp, power.draw.instant [W]"]
    for t, i in zip(polls.tolist(), shown.tolist(), strict=True):
        when = datetime.datetime.fromtimestamp(t / 1e9, datetime.UTC)
        stamp = when.strftime("%Y/%m/%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"
        lines.append(f"{stamp}, {int(published_mw[i]) / 1000:.2f} W")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def check(log: Trace, nvml_publish_ns: I64) -> dict[str, Any]:
    """The log's readings as the engine takes them (``readings_for``: hidden repeats
    restored, intervals narrowed by the grid) against NVML's publish times: for each reading,
    the latest NVML publish at or before its poll (stamps are truncated: up to 1 ms later)
    should lie inside ``[t − spread, t + 1 ms]``."""
    p = log.power
    devs = np.unique(p.device)
    dev = int(devs[0]) if len(devs) else 0
    rd = readings_for(log, dev)
    if rd.spread_ns is None:
        return {"error": "the log is not marked poll-stamped (the CSV importer marks it)"}
    if len(rd.t_ns) < 8 or len(nvml_publish_ns) < 8:
        return {"error": f"too few readings ({len(rd.t_ns)} in the log, "
                         f"{len(nvml_publish_ns)} from NVML)"}
    m = (p.field == int(PowerField.INSTANT)) & (p.device == dev)
    polls = np.sort(p.t_ns[m])
    fresh = np.sort(p.t_ns[m & p.fresh])
    raw = publish_spread(polls, fresh, float(np.median(np.diff(fresh)) / 1e6))
    pub = np.sort(nvml_publish_ns)
    inside_span = (rd.t_ns > pub[0] + 200 * MS) & (rd.t_ns < pub[-1])
    t, s = rd.t_ns[inside_span], rd.spread_ns[inside_span]
    shown = pub[np.clip(np.searchsorted(pub, t + MS, side="right") - 1, 0, None)]
    inside = (t - s <= shown) & (shown <= t + MS)
    miss = np.maximum(t - s - shown, shown - t - MS)[~inside]
    # the truth the simulator's locked polls lack (docs/accuracy.md, "Locked polls"): where in
    # each poll interval the publish sat (0: at the previous poll, 1: at the stamp) and how
    # long after its publish each new value was stamped
    fresh_in = (fresh > pub[0] + 200 * MS) & (fresh < pub[-1])
    f_t, f_s = fresh[fresh_in], np.maximum(raw[fresh_in], 1)
    f_pub = pub[np.clip(np.searchsorted(pub, f_t + MS, side="right") - 1, 0, None)]
    delay_ms = (f_t - f_pub) / 1e6
    position = (f_pub - (f_t - f_s)) / f_s
    # a locked log's readings as the engine places them (each one delay after its publish,
    # a flip by a poll gap taken off): the delay left should be one value
    locked = (bool(rd.poll_lock < LOCKED_POLLS) if rd.poll_lock is not None
              and np.isfinite(rd.poll_lock) else None)
    flips = rd.delay_flip_ns[inside_span] if rd.delay_flip_ns is not None else None
    placed_ms = (t - flips - shown) / 1e6 if flips is not None else None
    # ... or moved onto the sensor's publish grid (publish_grid.poll_grid_delays): a small
    # spread says the board's publishes keep one period on the host's clock, which the grid's
    # placing assumes (the simulator's do; the real A100 200 s log's did not)
    grid = rd.delay_grid_ns[inside_span] if rd.delay_grid_ns is not None else None
    grid_ms = (t - grid - shown) / 1e6 if grid is not None else None
    return {
        "poll_lock": rd.poll_lock,
        "polls_locked": locked,
        "stamp_delay_ms_quartiles": ([float(q) for q in np.percentile(delay_ms, [25, 50, 75])]
                                     if len(delay_ms) else None),
        "publish_position_quartiles": ([float(q) for q in np.percentile(position, [25, 50, 75])]
                                       if len(position) else None),
        "delay_flip_share": float(np.mean(flips != 0)) if flips is not None else None,
        "placed_delay_ms_quartiles": ([float(q) for q in np.percentile(placed_ms, [25, 50, 75])]
                                      if placed_ms is not None and len(placed_ms) else None),
        "grid_delay_ms_quartiles": ([float(q) for q in np.percentile(grid_ms, [25, 50, 75])]
                                    if grid_ms is not None and len(grid_ms) else None),
        "readings": len(t),
        "poll_interval_ms_median": float(np.median(raw)) / 1e6,
        "narrowed_ms_median": float(np.median(s)) / 1e6 if len(s) else None,
        "publish_inside_fraction": float(np.mean(inside)) if len(t) else None,
        "miss_ms_p90": float(np.percentile(miss, 90)) / 1e6 if len(miss) else 0.0,
        "grid_period_ms": rd.period_ms,
        "nvml_period_ms": float(np.median(np.diff(pub))) / 1e6,
    }
