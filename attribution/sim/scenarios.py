"""Scenario specifications: which kernel classes a simulated job runs, how its phases mix them,
how the host feeds the GPU (launch gaps, sync waits, host stalls, copies) and which sensor
quirks apply (lag override, average-only field, clamp episodes).

Owns the ``SCENARIOS`` table and the kernel-class library.  Pure data: no randomness here.
Power figures are fractions of the preset's dynamic range (TDP − active idle), so one scenario
fits every GPU preset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from attribution.model import CLOCK_REASON_SW_POWER_CAP, CLOCK_REASON_SW_THERMAL


@dataclasses.dataclass(frozen=True, slots=True)
class KernelClass:
    """One kernel name: lognormal duration and power above idle."""

    name: str
    median_us: float
    sigma: float  # lognormal sigma of the duration
    dp_frac: float  # ΔP as a fraction of (TDP − active idle)
    dp_sigma: float = 0.05  # per-instance data-dependent variation of ΔP (lognormal sigma)
    grid: tuple[int, int, int] = (108, 1, 1)
    block: tuple[int, int, int] = (256, 1, 1)
    registers: int = 64


@dataclasses.dataclass(frozen=True, slots=True)
class CopySpec:
    """A copy issued once per step with probability ``prob``."""

    kind: str  # "HtoD" | "DtoH"
    memory: str  # "pinned" | "pageable"
    bytes_: int
    prob: float = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class ClampSpec:
    """A clock clamp over a fraction of the run: kernels starting in it run ``1/clock_ratio``
    longer at ``power_factor`` × their ΔP."""

    start_frac: float
    end_frac: float
    reason: int = CLOCK_REASON_SW_POWER_CAP
    clock_ratio: float = 0.72
    power_factor: float = 0.7


@dataclasses.dataclass(frozen=True, slots=True)
class ScenarioSpec:
    """Everything that defines one simulated job."""

    name: str
    description: str
    classes: tuple[KernelClass, ...]
    kernels_per_step: int = 24
    fixed_pattern: tuple[int, ...] = ()  # class indices emitted first in every step, in order
    fixed_groups: tuple[tuple[int, ...], ...] = ()  # classes inseparable by construction
    fixed_repeats: tuple[int, int] = (1, 1)  # the pattern repeats r times per step, r per phase
    phase_steps: tuple[int, int] = (15, 60)  # phase length range in steps
    dirichlet_alpha: float = 0.8  # 0 → every phase has the same (uniform) mix
    p_launch_gap: float = 0.08  # per kernel: host too slow to launch it
    launch_gap_us: float = 60.0  # median launch gap
    p_sync: float = 0.3  # per step start: a synchronising call spans the gap
    sync_ms: float = 1.5
    p_stall: float = 0.1  # per step start: host stall (nothing in flight)
    stall_ms: float = 8.0
    copies: tuple[CopySpec, ...] = ()
    two_streams: float = 0.0  # probability a long stream-1 kernel has a concurrent stream-2 one
    clamps: tuple[ClampSpec, ...] = ()
    step_period_ms: float = 0.0  # > 0: steps start on a fixed period (phase-locked)
    lag_ms: float | None = None  # sensor lag override
    average_only: bool = False  # only the 1 s average field is published
    locked_polls: bool = False  # nvidia-smi's polls run in step with the sensor's publishes
    clock_wander: bool = False  # the sensor's publish clock wanders against the host's
    board_draw: bool = False  # the board's response drawn per run, off the engine's grids
    default_gpu: str = "a100"


_GEMM = KernelClass("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", 900.0, 0.35,
                    0.78, grid=(216, 2, 1), block=(256, 1, 1), registers=232)
_ATTN = KernelClass(
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
    "false, cutlass::bfloat16_t>, false, true, false, false, true>(pytorch_flash::"
    "Flash_fwd_params)", 650.0, 0.3, 0.62, grid=(16, 32, 8), block=(128, 1, 1), registers=255)
_ADD = KernelClass(
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
    "BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3>)", 120.0, 0.4, 0.36, grid=(8192, 1, 1), block=(128, 1, 1),
    registers=28)
_LN = KernelClass(
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*)", 90.0, 0.3, 0.30, grid=(4096, 1, 1), block=(256, 1, 1),
    registers=40)
_SOFTMAX = KernelClass(
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    200.0, 0.3, 0.45, grid=(2048, 1, 1), block=(512, 1, 1), registers=36)
_ADAM = KernelClass(
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<float, 4>, float*, double, double, double, double, double, bool, "
    "bool>(at::native::(anonymous namespace)::TensorListMetadata<4>, ...)", 400.0, 0.25, 0.40,
    grid=(320, 1, 1), block=(512, 1, 1), registers=72)
_TINY = KernelClass(
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::"
    "{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, "
    "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::"
    "memory::StoreWithCast<1> >(int, ...)", 9.0, 0.4, 0.20, grid=(4, 1, 1), block=(128, 1, 1),
    registers=24)
_SMALLGEMM = KernelClass(
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1",
                         14.0, 0.3, 0.30, grid=(4, 2, 1), block=(64, 1, 1), registers=90)
_NCCL = KernelClass("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, "
                    "ncclWork*)", 400.0, 0.3, 0.12, grid=(16, 1, 1), block=(512, 1, 1),
                    registers=96)

TRAIN = (_GEMM, _ATTN, _ADD, _LN, _SOFTMAX, _ADAM)
STREAM2_CLASS = _NCCL
"""The kernel class a second stream runs concurrently (a collective)."""

_PIN_IN = CopySpec("HtoD", "pinned", 24 << 20)
_PAGE_IN = CopySpec("HtoD", "pageable", 16 << 20)
_PAGE_OUT = CopySpec("DtoH", "pageable", 2 << 20, prob=0.5)


def _spec(name: str, description: str, **kw: object) -> ScenarioSpec:
    base: dict[str, object] = {"classes": TRAIN, "copies": (_PIN_IN,)}
    base.update(kw)
    return ScenarioSpec(name, description, **base)  # type: ignore[arg-type]


SCENARIOS: Mapping[str, ScenarioSpec] = {
    s.name: s
    for s in (
        _spec("varied_mix", "six training kernel classes whose mix changes from phase to phase"),
        _spec("fixed_mix", "GEMM and flash-attention always interleaved 1:1 (one inseparable "
              "group); the other classes vary by phase",
              classes=(dataclasses.replace(_GEMM, sigma=0.06),
                       dataclasses.replace(_ATTN, sigma=0.06), *TRAIN[2:]),
              fixed_pattern=(0, 1), fixed_repeats=(1, 10), fixed_groups=((0, 1),),
              kernels_per_step=32),
        _spec("launch_bound", "tiny kernels the host cannot launch fast enough",
              classes=(_TINY, _SMALLGEMM, _ADD), kernels_per_step=200, p_launch_gap=0.85,
              launch_gap_us=25.0, p_sync=0.2, p_stall=0.02),
        _spec("pageable_copies", "pageable host↔device copies every step",
              copies=(_PAGE_IN, _PAGE_OUT, _PIN_IN)),
        _spec("two_streams", "a collective on a second stream overlaps long kernels",
              two_streams=0.5),
        _spec("clamp_episode", "a power-cap clamp in the middle third stretches kernels",
              clamps=(ClampSpec(0.35, 0.65),)),
        _spec("phase_locked_step", "a 100 ms step locked to the 100 ms sensor period",
              classes=(_GEMM, _ADD), fixed_pattern=(0,) * 30 + (1,) * 60, kernels_per_step=90,
              dirichlet_alpha=0.0, p_launch_gap=0.0, p_sync=0.0, p_stall=1.0,
              step_period_ms=100.0, copies=()),
        _spec("lag_0", "varied mix, sensor lag 0 ms", lag_ms=0.0),
        _spec("lag_10", "varied mix, sensor lag 10 ms", lag_ms=10.0),
        _spec("lag_50", "varied mix, sensor lag 50 ms", lag_ms=50.0),
        _spec("average_only", "varied mix; only the 1 s average power field is published",
              average_only=True),
        _spec("demo", "H100-like training job: varied phases, host stalls, pageable copies and "
              "a thermal clamp episode", copies=(_PIN_IN, _PAGE_OUT), p_stall=0.15,
              stall_ms=12.0, clamps=(ClampSpec(0.55, 0.7, CLOCK_REASON_SW_THERMAL, 0.8, 0.8),),
              default_gpu="h100"),
    )
}


LONG_KERNEL = "long_running_kernel"
"""The name of the class :func:`with_long_kernels` adds."""


def with_long_kernels(spec: ScenarioSpec, median_ms: float = 1200.0, sigma: float = 0.3
                      ) -> ScenarioSpec:
    """``spec`` with one more kernel class, :data:`LONG_KERNEL`: instances of ``median_ms``
    (lognormal ``sigma``) at half the board's dynamic power. Kernels that outlast the live
    engine's 0.5 s settling delay (``engine.live_pending``) and a tumbling window's edge;
    run it for several of its steps (a step of 24 kernels then lasts seconds)."""
    return dataclasses.replace(spec, classes=(
        *spec.classes, KernelClass(LONG_KERNEL, median_ms * 1e3, sigma, 0.5)))
