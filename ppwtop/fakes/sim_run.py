"""One simulated run shared by both ends of ``--backend sim``, anchored at a wall-clock time.

Owns :class:`SimRunConfig` (scenario, GPU, seconds, seeds, anchor; passed from ppwtop to the
target in ``PPWTOP_SIM_*`` environment variables) and :func:`anchored_run`, which simulates the
run (deterministic for a config) and shifts every timestamp so the simulated window starts at
``anchor_ns`` on the host's ``time.time_ns()`` clock.  The target feeds the shifted records to
:class:`ppwtop.fakes.cupti_lib.FakeCuptiLib` as they complete in wall-clock time; the ppwtop
process drives the fake ``pynvml.nvmlLib`` from the same shifted run
(:func:`ppwtop.fakes.nvml_board.board_from_sim`), so both ends share one timebase.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from attribution.sim import SimResult

ENV_PREFIX = "PPWTOP_SIM_"
DEFAULT_SCENARIO = "demo"
DEFAULT_SECONDS = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class SimRunConfig:
    scenario: str = DEFAULT_SCENARIO
    gpu: str | None = None
    seconds: float = DEFAULT_SECONDS
    seed: int = 0
    anchor_ns: int = 0

    def env(self) -> dict[str, str]:
        out = {f"{ENV_PREFIX}SCENARIO": self.scenario, f"{ENV_PREFIX}SECONDS": repr(self.seconds),
               f"{ENV_PREFIX}SEED": str(self.seed), f"{ENV_PREFIX}ANCHOR_NS": str(self.anchor_ns)}
        if self.gpu:
            out[f"{ENV_PREFIX}GPU"] = self.gpu
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SimRunConfig:
        def get(key: str, default: str) -> str:
            return env.get(ENV_PREFIX + key) or default

        return cls(scenario=get("SCENARIO", DEFAULT_SCENARIO), gpu=env.get(ENV_PREFIX + "GPU"),
                   seconds=float(get("SECONDS", str(DEFAULT_SECONDS))),
                   seed=int(get("SEED", "0")),
                   anchor_ns=int(get("ANCHOR_NS", str(time.time_ns()))))


def anchored_run(cfg: SimRunConfig) -> SimResult:
    """The simulated run of ``cfg`` with its window moved to start at ``cfg.anchor_ns``."""
    from attribution.model import Trace
    from attribution.sim import SimResult, simulate

    res = simulate(scenario=cfg.scenario, gpu=cfg.gpu, seconds=cfg.seconds, seed=cfg.seed)
    delta = int(cfg.anchor_ns) - int(res.truth.window_start_ns)
    tr = res.trace
    shifted = Trace(strings=tr.strings, devices=list(tr.devices), meta=dict(tr.meta),
                    **{k: getattr(tr, k).shifted(delta) for k in Trace.BATCH_FIELDS})
    truth = dataclasses.replace(
        res.truth, window_start_ns=res.truth.window_start_ns + delta,
        window_end_ns=res.truth.window_end_ns + delta,
        span_start_ns=res.truth.span_start_ns + delta, span_end_ns=res.truth.span_end_ns + delta)
    t_grid, power_w = res.true_power
    return SimResult(shifted, truth, (np.asarray(t_grid) + np.int64(delta), power_w))
