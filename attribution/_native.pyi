"""Types of the compiled sweeps (csrc/); call them through :mod:`attribution.native`."""

from collections.abc import Sequence
from typing import Any

import numpy.typing as npt

Buffer = npt.NDArray[Any]

def interp_groups(xs: Sequence[Buffer], ys: Sequence[Buffer], xcs: Sequence[Buffer],
                  t_ns: Buffer, origin_ns: int, out: Buffer, n_rows: int, n_cols: int, /
                  ) -> None: ...
def knots_grouped(start_ns: Buffer, end_ns: Buffer, group: Buffer, n_groups: int,
                  origin_ns: int, x_out: Buffer, b_out: Buffer, off_out: Buffer,
                  len_out: Buffer, /) -> None: ...
def merge_order(start_ns: Buffer, order_out: Buffer, /) -> bool: ...
def union_gaps(starts: Sequence[Buffer], ends: Sequence[Buffer], corrs: Sequence[Buffer],
               win0: int, win1: int, gap_s: Buffer, gap_e: Buffer, next_corr: Buffer, /
               ) -> int: ...
def issue_ends(api_kind: Buffer, api_corr: Buffer, api_end: Buffer, sync_kind: int,
               max_per_row: int, query: Buffer, end_out: Buffer, found_out: Buffer, /
               ) -> bool: ...
def gap_causes(gap_s: Buffer, gap_e: Buffer, issue_end: Buffer, found: Buffer, sync_s: Buffer,
               sync_e: Buffer, have_api: bool, launch_tol_ns: int, stall_ns: int,
               sync_cover: float, cause_out: Buffer, /) -> None: ...
def share_serial(start_ns: Buffer, end_ns: Buffer, order: Buffer, origin_ns: int,
                 out: Buffer, /) -> bool: ...
def window_block(xs: Sequence[Buffer], ys: Sequence[Buffer], xcs: Sequence[Buffer],
                 t_ns: Buffer, cols_ns: Buffer, hi: Buffer, lo: Buffer, w_s: float,
                 origin_ns: int, out: Buffer, /) -> None: ...
def first_order(b0: float, a: float, x: Buffer, out: Buffer, /) -> None: ...
