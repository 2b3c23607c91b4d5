"""Clock clamps: time and energy lost while the GPU was held below its clock.

Owns the reading of ``trace.clocks`` (nvmlClocksEventReason* bits, sample-and-hold until the
next sample) into clamp episodes per GPU and reason (``attribution.model.CLAMP_REASONS``),
and what they cost:

* kernels *stretched*: those that started while a clamp bit was set;
* *time lost*: per kernel name, the stretched instances' time beyond the mean duration of the
  same kernel outside clamps (names without three unclamped calls fall back on the SM-clock
  ratio ``1 − f_clamped / f_unclamped``);
* *energy*: ``P_idle × time lost`` -- the active-idle floor burnt over the extra time.  A
  clamp lowers the dynamic power about as much as it stretches the kernels (power caps trade
  clock for power), so the dynamic energy of the work stays and the floor is what the clamp
  costs; interval from the active-idle power's 90 % interval.  ``stretch_energy_j`` (the
  engine's full energy of the lost time, as if power had not dropped) is the upper bound.

The result feeds ``extra["clamps"]`` (read by the diff's ``clamp.<reason>`` mechanism, which
moves ``by_kernel_j`` -- each kernel's share of the floor -- out of the kernel rows, and by the
report) and the ranking.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attribution.model import CLAMP_REASONS, F64
from attribution.ranking.common import Candidate, RankInputs

MIN_REF_CALLS = 3
HOLD_PERIODS = 2.0  # the last sample holds for this many median spacings


def clamp_episodes(inp: RankInputs) -> list[dict[str, Any]]:
    """One dict per (GPU, reason) with clamp time, time lost, stretched kernels and joules."""
    ck, kb = inp.trace.clocks, inp.trace.kernels
    out: list[dict[str, Any]] = []
    if len(ck) == 0 or len(kb) == 0:
        return out
    bits = np.array(sorted(CLAMP_REASONS), dtype=np.uint64)
    for dev in np.unique(ck.device).tolist():
        cm = ck.device == dev
        t = ck.t_ns[cm]
        o = np.argsort(t, kind="stable")
        t, reasons, mhz = t[o], ck.clock_reasons[cm][o], ck.sm_mhz[cm][o].astype(np.float64)
        if len(t) < 2:
            continue
        step = float(np.median(np.diff(t)))
        held_end = np.concatenate([t[1:], [t[-1] + HOLD_PERIODS * step]])
        held_s = (held_end - t).astype(np.float64) * 1e-9
        flags = (reasons[:, None] & bits[None, :]) != 0  # samples × reasons
        if not bool(flags.any()):
            continue
        km = np.flatnonzero(kb.device == dev)
        ks, ke = kb.start_ns[km], kb.end_ns[km]
        smp = np.searchsorted(t, ks, side="right") - 1
        inside = (smp >= 0) & (ks < held_end[np.clip(smp, 0, None)])
        smp = np.clip(smp, 0, None)
        k_flags = flags[smp] & inside[:, None]
        clamped = k_flags.any(axis=1)
        # a kernel under several reasons is charged to the first (lowest bit)
        k_reason = np.where(clamped, np.argmax(k_flags, axis=1), -1)
        dur = (ke - ks).astype(np.float64)
        nid = kb.name_id[km]
        n_names = int(nid.max()) + 1 if len(nid) else 0
        out_n = np.bincount(nid[~clamped], minlength=n_names)
        out_t = np.bincount(nid[~clamped], weights=dur[~clamped], minlength=n_names)
        ref = np.divide(out_t, out_n, out=np.zeros(n_names), where=out_n >= MIN_REF_CALLS)
        free = ~flags.any(axis=1) & (mhz > 0)
        f_ref = float(mhz[free].max()) if bool(free.any()) else float(mhz.max())
        ratio = np.clip(mhz[smp] / f_ref, 0.05, 1.0) if f_ref > 0 else np.ones(len(smp))
        lost_by_ref = dur - ref[nid]
        lost_by_clock = dur * (1.0 - ratio)
        lost = np.where(ref[nid] > 0, lost_by_ref, lost_by_clock)
        energy_rec = inp.arrays.kernel_energy_j[km]
        p_idle = inp.p_idle_w(int(dev))
        p_lo, p_hi = inp.p_idle_ci_w(int(dev))
        for j, bit in enumerate(bits.tolist()):
            mk = k_reason == j
            clamp_s = float(held_s[flags[:, j]].sum())
            if not bool(mk.any()) and clamp_s <= 0:
                continue
            # per name: clip the summed lost time at 0 (noise can make a name look faster)
            lost_n = np.clip(np.bincount(nid[mk], weights=lost[mk], minlength=n_names), 0, None)
            time_n = np.bincount(nid[mk], weights=dur[mk], minlength=n_names)
            e_n = np.bincount(nid[mk], weights=energy_rec[mk], minlength=n_names)
            frac = np.divide(lost_n, time_n, out=np.zeros(n_names), where=time_n > 0)
            by_kernel: dict[str, float] = {}
            stretch_j = 0.0
            for i in np.flatnonzero(lost_n > 0).tolist():
                by_kernel[inp.trace.name(i)] = p_idle * float(lost_n[i]) * 1e-9
                stretch_j += float(e_n[i] * frac[i])
            lost_s = float(lost_n.sum()) * 1e-9
            in_clamp = flags[:, j] & (mhz > 0)
            out.append({
                "reason": CLAMP_REASONS[bit], "gpu": int(dev), "time_s": clamp_s,
                "time_lost_s": lost_s, "kernels_stretched": int(mk.sum()),
                "stretch": float(dur[mk].sum() / max(dur[mk].sum() - lost_n.sum(), 1.0)) - 1.0
                if bool(mk.any()) else 0.0,
                "sm_mhz_clamped": float(np.mean(mhz[in_clamp])) if bool(in_clamp.any()) else None,
                "sm_mhz_unclamped": f_ref,
                "energy_j": p_idle * lost_s, "energy_ci_j": [p_lo * lost_s, p_hi * lost_s],
                "stretch_energy_j": stretch_j, "by_kernel_j": by_kernel,
            })
    return out


def clamp_candidates(episodes: list[dict[str, Any]]) -> list[Candidate]:
    by: dict[str, list[dict[str, Any]]] = {}
    for ep in episodes:
        by.setdefault(str(ep["reason"]), []).append(ep)
    out: list[Candidate] = []
    for reason, eps in sorted(by.items()):
        e = float(sum(x["energy_j"] for x in eps))
        if not e > 0:
            continue
        lost = float(sum(x["time_lost_s"] for x in eps))
        clamp_s = float(sum(x["time_s"] for x in eps))
        n = int(sum(x["kernels_stretched"] for x in eps))
        upper = float(sum(x["stretch_energy_j"] for x in eps))
        f_c = [x["sm_mhz_clamped"] for x in eps if x["sm_mhz_clamped"] is not None]
        clk = ""
        if f_c:
            clk = f"; SM clock {np.mean(f_c):.0f} MHz vs {eps[0]['sm_mhz_unclamped']:.0f} MHz"
        stretch: F64 = np.array([x["stretch"] for x in eps])
        ci = (float(sum(x["energy_ci_j"][0] for x in eps)),
              float(sum(x["energy_ci_j"][1] for x in eps)))
        out.append(Candidate(
            mechanism=f"clamp.{reason}", energy_j=e, energy_ci_j=ci,
            evidence=(f"clock held down ({reason}) for {clamp_s:.2f} s{clk}; {n} kernels started "
                      f"inside ran {float(stretch.max()):.0%} longer than the same kernels "
                      f"outside: {lost:.3f} s lost"),
            fix=("keep the board inside its limits: check cooling/airflow and the power limit "
                 "(nvidia-smi -q -d POWER,TEMPERATURE), or cap clocks/power to a level the job "
                 f"holds steadily; recovers about {e:.3g} J (the active-idle floor of the lost "
                 f"time), at most {upper:.3g} J if the clamp did not lower the power"),
            validation=(f"re-run: clock-clamp time in `ppwtop report` falls, `ppwtop diff` shows "
                        f"clamp.{reason} falling and the stretched kernels' time per call back "
                        "to their unclamped mean"),
            resolvable=True))
    return out
