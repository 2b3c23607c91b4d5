"""Energy efficiency from kernel names: precision mix, FP32 matrix math off the tensor cores,
and the same kernel drawing visibly more power on one GPU than on another.

Owns:

* :func:`precision_mix`: energy and share per (precision, tensor core or not); precision from
  :func:`attribution.precision.precision_of`, tensor-core use from name tokens (``mma``,
  ``16816``, ``gmma``, ``tensorop``, ...; FP32 without TF32 never counts as tensor core).
* ``precision.fp32``: GEMM/convolution kernels in plain FP32 (CUDA cores).  TF32 or BF16
  tensor cores run them at least twice as fast at about the same power (A100: 8x peak), so
  half their energy is the bound counted as waste.
* ``efficiency.<name>@gpu<N>``: a kernel that runs on several GPUs and draws more than
  ``HOT_RATIO`` × the coolest GPU's average power for the same name: the excess power × its
  time (the same work at visibly higher power: a hot or throttling board, a bad slot).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from attribution.precision import precision_of
from attribution.ranking.common import Candidate, RankInputs, RowInputs
from attribution.snapshot import KernelRow

TENSOR_CORE = re.compile(r"mma|tensorop|gmma|16816|16832|1688|884|_tc_|flash|tf32|wmma",
                         re.IGNORECASE)
MATMUL = re.compile(r"gemm|conv|matmul|xmma|cutlass|implicit_?gemm", re.IGNORECASE)
FP32_SPEEDUP = 2.0
HOT_RATIO = 1.15
MIN_SHARE = 0.005  # precision.fp32 only when these kernels hold at least this share


@functools.lru_cache(maxsize=8192)
def _tensor_core_name(name: str) -> bool:
    return TENSOR_CORE.search(name) is not None


@functools.lru_cache(maxsize=8192)
def _matmul_name(name: str) -> bool:
    """(Cached: a live view ranks the same few hundred kernel names every tick.)"""
    return MATMUL.search(name) is not None


def tensor_core(name: str, precision: str) -> bool:
    return precision != "fp32" and _tensor_core_name(name)


def precision_mix(kernels: tuple[KernelRow, ...]) -> list[dict[str, Any]]:
    """Energy per (precision, tensor core), largest first; shares of kernel energy."""
    acc: dict[tuple[str, bool], list[float]] = {}
    for k in kernels:
        p = k.precision or precision_of(k.name)
        key = (p, tensor_core(k.name, p))
        a = acc.setdefault(key, [0.0, 0.0, 0.0])
        a[0] += k.energy_j
        a[1] += k.time_s
        a[2] += 1
    tot = sum(v[0] for v in acc.values())
    rows: list[dict[str, Any]] = [
        {"precision": p, "tensor_core": tc, "energy_j": v[0], "time_s": v[1],
         "classes": int(v[2]), "share": v[0] / tot if tot > 0 else 0.0}
        for (p, tc), v in acc.items()]
    rows.sort(key=lambda r: (-r["energy_j"], str(r["precision"])))
    return rows


def fp32_candidate(inp: RankInputs | RowInputs, mix: list[dict[str, Any]]) -> Candidate | None:
    rows = [k for k in inp.kernels
            if (k.precision or precision_of(k.name)) == "fp32" and _matmul_name(k.name)]
    e_all = sum(k.energy_j for k in rows)
    if not rows or inp.total_j <= 0 or e_all < MIN_SHARE * inp.total_j:
        return None
    f = 1.0 - 1.0 / FP32_SPEEDUP
    e = f * e_all
    lo = f * sum(k.dynamic_energy_ci_j[0] + k.energy_j - k.dynamic_energy_j for k in rows)
    hi = f * sum(k.dynamic_energy_ci_j[1] + k.energy_j - k.dynamic_energy_j for k in rows)
    top = sorted(rows, key=lambda k: -k.energy_j)
    shares = ", ".join(f"{r['precision']}{' (tensor core)' if r['tensor_core'] else ''} "
                       f"{float(r['share']):.0%}" for r in mix[:4])
    return Candidate(
        mechanism="precision.fp32", energy_j=e, energy_ci_j=(lo, hi),
        evidence=(f"{len(rows)} FP32 matrix kernels on CUDA cores hold {e_all:.3g} J "
                  f"({e_all / inp.total_j:.1%} of all energy, {sum(k.time_s for k in rows):.3f} s"
                  f"), largest {top[0].name[:60]!r}; kernel energy by precision: {shares}"),
        fix=("run matrix math on tensor cores: torch.backends.cuda.matmul.allow_tf32=True / "
             "torch.set_float32_matmul_precision('high'), or bf16 autocast; at >= "
             f"{FP32_SPEEDUP:.0f}x throughput at similar power this recovers at most "
             f"{e:.3g} J; check the loss curve for precision effects"),
        validation=("re-run with the fix: the kernels' names change to tf32/bf16 tensor-core "
                    "variants, `ppwtop diff` shows their energy per step falling, accuracy "
                    "metrics unchanged"),
        resolvable=all(k.resolvable for k in rows),
        owner_names=tuple(k.name for k in top[:3]))


def hot_gpu_candidates(inp: RankInputs | RowInputs) -> list[Candidate]:
    by: dict[str, list[KernelRow]] = {}
    for k in inp.kernels:
        if k.time_s > 0 and k.avg_power_w > 0:
            by.setdefault(k.name, []).append(k)
    out: list[Candidate] = []
    for name, rows in sorted(by.items()):
        if len(rows) < 2:
            continue
        cool = min(rows, key=lambda k: k.avg_power_w)
        for k in rows:
            if k is cool or k.avg_power_w < HOT_RATIO * cool.avg_power_w:
                continue
            excess_w = k.avg_power_w - cool.avg_power_w
            e = excess_w * k.time_s
            out.append(Candidate(
                mechanism=f"efficiency.{name}@gpu{k.gpu}", energy_j=e, energy_ci_j=None,
                evidence=(f"the same kernel draws {k.avg_power_w:.0f} W on GPU {k.gpu} vs "
                          f"{cool.avg_power_w:.0f} W on GPU {cool.gpu} ({k.calls} vs "
                          f"{cool.calls} calls, {k.time_s:.3f} s)"),
                fix=("compare the boards (temperature, power limit, clocks, PCIe/NVLink slot); "
                     f"move the work or fix the board; recovers at most {e:.3g} J"),
                validation=("re-run: the kernel's average power on both GPUs within "
                            f"{HOT_RATIO - 1:.0%} of each other"),
                resolvable=k.resolvable and cool.resolvable, owner_names=(name,)))
    return out
