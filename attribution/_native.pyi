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
