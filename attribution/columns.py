"""The generic column machinery under every record batch of :mod:`attribution.model`.

Owns :class:`Columns` (a frozen dataclass of equal-length 1-D numpy columns with declared
dtypes: validation and coercion on construction, fill values for missing columns, selection,
concatenation, sorting, time shifts, size) and the ``UNKNOWN`` sentinel it fills integer
columns with.  No schema and no I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self, cast

import numpy as np
import numpy.typing as npt

UNKNOWN = -1
"""Sentinel for an integer attribute the source does not give (registers, grid, ...)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Columns:
    """Base of all batches: equal-length numpy columns with fixed dtypes.

    Subclasses declare their columns as dataclass fields and their dtypes in ``DTYPES``.
    """

    DTYPES: ClassVar[Mapping[str, np.dtype[Any]]] = {}

    def __post_init__(self) -> None:
        n: int | None = None
        for name, dtype in self.DTYPES.items():
            col = getattr(self, name)
            if not isinstance(col, np.ndarray) or col.dtype != dtype or col.ndim != 1:
                col = np.ascontiguousarray(np.asarray(col, dtype=dtype).reshape(-1))
                object.__setattr__(self, name, col)
            if n is None:
                n = len(col)
            elif len(col) != n:
                raise ValueError(
                    f"{type(self).__name__}.{name}: {len(col)} rows, expected {n}"
                )

    def __len__(self) -> int:
        first = next(iter(self.DTYPES))
        return len(getattr(self, first))

    @classmethod
    def column_names(cls) -> tuple[str, ...]:
        return tuple(cls.DTYPES)

    @classmethod
    def empty(cls) -> Self:
        """A batch of no rows: one instance per class, shared (its zero-length columns have
        nothing to write; every ``Trace()`` takes eight, ~17 of them a live tick)."""
        got = _EMPTIES.get(cls)
        if got is None:
            got = _EMPTIES[cls] = cls(**{k: np.empty(0, dtype=d) for k, d in cls.DTYPES.items()})
        return cast(Self, got)

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], n: int | None = None) -> Self:
        """Build from a mapping; missing columns are filled with their default fill value."""
        if n is None:
            lengths = [len(np.asarray(v).reshape(-1)) for v in columns.values()]
            n = lengths[0] if lengths else 0
        out: dict[str, Any] = {}
        for k, d in cls.DTYPES.items():
            if k in columns:
                out[k] = np.asarray(columns[k], dtype=d)
            else:
                out[k] = np.full(n, _fill_value(d), dtype=d)
        return cls(**out)

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        return {k: getattr(self, k) for k in self.DTYPES}

    def take(self, index: npt.NDArray[Any] | slice) -> Self:
        """Rows selected by an integer index array, boolean mask or slice."""
        return type(self)(**{k: getattr(self, k)[index] for k in self.DTYPES})

    @classmethod
    def concat(cls, parts: Iterable[Self]) -> Self:
        items = [p for p in parts if len(p)]
        if not items:
            return cls.empty()
        if len(items) == 1:
            return items[0]
        return cls(**{k: np.concatenate([getattr(p, k) for p in items]) for k in cls.DTYPES})

    def sorted_by(self, key: str = "start_ns") -> Self:
        col = getattr(self, key)
        if len(col) < 2 or bool(np.all(col[1:] >= col[:-1])):
            return self
        return self.take(np.argsort(col, kind="stable"))

    def shifted(self, delta_ns: int) -> Self:
        """The same rows with every ``*_ns`` time column shifted by ``delta_ns``."""
        out = self.columns()
        for k in out:
            if k.endswith("_ns"):
                out[k] = out[k] + np.int64(delta_ns)
        return type(self)(**out)

    def nbytes(self) -> int:
        return int(sum(getattr(self, k).nbytes for k in self.DTYPES))


_EMPTIES: dict[type[Columns], Columns] = {}  # Columns.empty's shared instances


def _fill_value(dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "f":
        return np.nan
    if dtype.kind == "b":
        return False
    if dtype.kind == "u":
        return 0
    return UNKNOWN
