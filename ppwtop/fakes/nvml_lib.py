"""A fake ``libnvidia-ml.so`` for ``pynvml.nvmlLib``, driven by a board model.

Owns :class:`FakeNvmlLib` (the fake library: one attribute per C function, each taking the
ctypes arguments pynvml passes and writing its results into them, returning an
``nvmlReturn_t`` code, answered from :class:`~ppwtop.fakes.nvml_board.BoardModel` state) and
:func:`installed` (a context manager that puts a fake in ``pynvml.nvmlLib`` and restores the
real state afterwards).  The board and its sensor model are :mod:`ppwtop.fakes.nvml_board`'s.

This is test code that lives in the package so ``ppwtop demo`` and scripts can drive the real
sampler without a GPU.  It imports pynvml only for its constants and struct types.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pynvml

from ppwtop.fakes.nvml_board import (
    C_FUNCTIONS,
    POWER_FIELDS,
    BoardModel,
)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_ERROR_INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
_ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
_ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
_ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
_ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
_SUCCESS: int = pynvml.NVML_SUCCESS

HANDLE_BASE = 0x7F000
"""Fake device handles are the addresses ``HANDLE_BASE + index`` (never dereferenced)."""

class _CFunction:
    """A callable that behaves like a ctypes foreign function (pynvml sets ``restype``)."""

    __slots__ = ("__name__", "_impl", "_lib", "argtypes", "errcheck", "restype")

    def __init__(self, lib: FakeNvmlLib, name: str, impl: Callable[..., Any]) -> None:
        self.__name__ = name
        self._impl = impl
        self._lib = lib
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None
        self.errcheck: Any = None

    def __call__(self, *args: Any) -> Any:
        self._lib.calls[self.__name__] += 1
        failure = self._lib.fail.get(self.__name__)
        return self._impl(*args) if failure is None else failure


def _target(arg: Any) -> Any:
    """The ctypes object behind a ``byref(...)`` argument (or the argument itself)."""
    return getattr(arg, "_obj", arg)


def _int(arg: Any) -> int:
    return int(arg.value) if hasattr(arg, "value") else int(arg)


def _write_str(buf: Any, length: Any, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > _int(length):
        return _ERROR_INSUFFICIENT_SIZE
    buf.value = data
    return _SUCCESS


class FakeNvmlLib:
    """The fake NVML library.  Attributes are the C functions (see :data:`C_FUNCTIONS`).

    ``missing`` names functions the library does not export (pynvml then raises
    NVMLError_FunctionNotFound, as with an older driver); ``init_error`` makes nvmlInit fail.
    ``calls`` counts calls per function (``board_calls`` per function and board); ``fail``
    maps a function name (or ``"name@index"`` for one board) to an error code it returns from
    then on (a GPU falling off the bus, say).
    """

    def __init__(
        self,
        boards: Sequence[BoardModel],
        clock: Callable[[], int] = time.time_ns,
        driver_version: str = "580.65.06",
        missing: frozenset[str] = frozenset(),
        init_error: int = pynvml.NVML_SUCCESS,
    ) -> None:
        self.boards = list(boards)
        self.clock = clock
        self.driver_version = driver_version
        self.init_error = init_error
        self.init_count = 0
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, int] = {}
        self.board_calls: Counter[tuple[str, int]] = Counter()
        for name in C_FUNCTIONS - missing:
            setattr(self, name, _CFunction(self, name, getattr(self, "_" + name)))

    # --- helpers -------------------------------------------------------------------------------

    def _board(self, handle: Any, call: str) -> tuple[BoardModel | None, int]:
        if self.init_count <= 0:
            return None, pynvml.NVML_ERROR_UNINITIALIZED
        addr = ctypes.cast(handle, ctypes.c_void_p).value
        i = -1 if addr is None else addr - HANDLE_BASE
        if not 0 <= i < len(self.boards):
            return None, pynvml.NVML_ERROR_INVALID_ARGUMENT
        board = self.boards[i]
        self.board_calls[(call, i)] += 1
        failure = self.fail.get(f"{call}@{i}")
        if failure is not None:
            return None, failure
        if call not in board.supported:
            return None, pynvml.NVML_ERROR_NOT_SUPPORTED
        return board, pynvml.NVML_SUCCESS

    # --- library ---------------------------------------------------------------------------------

    def _nvmlInitWithFlags(self, flags: Any = 0) -> int:
        if self.init_error != pynvml.NVML_SUCCESS:
            return self.init_error
        self.init_count += 1
        return _SUCCESS

    def _nvmlInit(self) -> int:
        return self._nvmlInitWithFlags(0)

    def _nvmlInit_v2(self) -> int:
        return self._nvmlInitWithFlags(0)

    def _nvmlShutdown(self) -> int:
        if self.init_count <= 0:
            return _ERROR_UNINITIALIZED
        self.init_count -= 1
        return _SUCCESS

    def _nvmlErrorString(self, code: Any) -> bytes:
        text = pynvml.NVMLError._errcode_to_string.get(_int(code), "Unknown Error")
        return str(text).encode()

    def _nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        if self.init_count <= 0:
            return _ERROR_UNINITIALIZED
        return _write_str(buf, length, self.driver_version)

    def _nvmlDeviceGetCount_v2(self, count: Any) -> int:
        if self.init_count <= 0:
            return _ERROR_UNINITIALIZED
        _target(count).value = len(self.boards)
        return _SUCCESS

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        if self.init_count <= 0:
            return _ERROR_UNINITIALIZED
        i = _int(index)
        if not 0 <= i < len(self.boards):
            return _ERROR_INVALID_ARGUMENT
        ctypes.c_void_p.from_buffer(_target(device)).value = HANDLE_BASE + i
        return _SUCCESS

    # --- identity --------------------------------------------------------------------------

    def _nvmlDeviceGetName(self, handle: Any, buf: Any, length: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetName")
        return ret if board is None else _write_str(buf, length, board.name)

    def _nvmlDeviceGetUUID(self, handle: Any, buf: Any, length: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetUUID")
        return ret if board is None else _write_str(buf, length, board.uuid)

    # --- power -----------------------------------------------------------------------------

    def _nvmlDeviceGetFieldValues(self, handle: Any, count: Any, values: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetFieldValues")
        if board is None:
            return ret
        arr = _target(values)
        now = self.clock()
        for i in range(_int(count)):
            v = arr[i]
            v.latencyUsec = 0
            if v.fieldId not in board.fields or v.fieldId not in POWER_FIELDS:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            label = "average" if v.fieldId == pynvml.NVML_FI_DEV_POWER_AVERAGE else "instant"
            ts_us, mw = board.latest_reading(now, label)
            if board.field_timestamps != "publication":
                ts_us = now // 1000 if board.field_timestamps == "query" else 0
            v.timestamp = ts_us
            v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            v.value.uiVal = mw
            v.nvmlReturn = pynvml.NVML_SUCCESS
        return _SUCCESS

    def _nvmlDeviceGetSamples(  # noqa: PLR0917 (the C signature)
        self, handle: Any, kind: Any, last_seen: Any, value_type: Any, count: Any, samples: Any,
    ) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetSamples")
        if board is None:
            return ret
        if _int(kind) != pynvml.NVML_TOTAL_POWER_SAMPLES:
            return _ERROR_NOT_SUPPORTED
        ts_us, mw = board.readings_after(_int(last_seen), self.clock())
        if len(ts_us) == 0:
            return _ERROR_NOT_FOUND
        _target(value_type).value = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        n_out = _target(count)
        if samples is None:  # size query
            n_out.value = len(ts_us)
            return _SUCCESS
        n = min(len(ts_us), int(n_out.value))  # oldest first; the rest come next time
        buf = _target(samples)
        for i in range(n):
            buf[i].timeStamp = int(ts_us[i])
            buf[i].sampleValue.uiVal = int(mw[i])
        n_out.value = n
        return _SUCCESS

    def _nvmlDeviceGetPowerUsage(self, handle: Any, mw: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetPowerUsage")
        if board is None:
            return ret
        _target(mw).value = board.power_usage_mw(self.clock())
        return _SUCCESS

    def _nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, mj: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetTotalEnergyConsumption")
        if board is None:
            return ret
        _target(mj).value = board.energy_mj(self.clock())
        return _SUCCESS

    # --- clocks and thermals -------------------------------------------------------------

    def _nvmlDeviceGetClockInfo(self, handle: Any, clock_type: Any, mhz: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetClockInfo")
        if board is None:
            return ret
        sm, mem, _, _ = board.state_at(self.clock())
        kind = _int(clock_type)
        if kind == pynvml.NVML_CLOCK_SM:
            _target(mhz).value = sm
        elif kind == pynvml.NVML_CLOCK_MEM:
            _target(mhz).value = mem
        else:
            return _ERROR_NOT_SUPPORTED
        return _SUCCESS

    def _nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, temp: Any) -> int:
        board, ret = self._board(handle, "nvmlDeviceGetTemperature")
        if board is None:
            return ret
        if _int(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return _ERROR_NOT_SUPPORTED
        _target(temp).value = board.state_at(self.clock())[2]
        return _SUCCESS

    def _reasons(self, handle: Any, reasons: Any, call: str) -> int:
        board, ret = self._board(handle, call)
        if board is None:
            return ret
        _target(reasons).value = board.state_at(self.clock())[3]
        return _SUCCESS

    def _nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, reasons: Any) -> int:
        return self._reasons(handle, reasons, "nvmlDeviceGetCurrentClocksEventReasons")

    def _nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, reasons: Any) -> int:
        return self._reasons(handle, reasons, "nvmlDeviceGetCurrentClocksThrottleReasons")


@contextlib.contextmanager
def installed(lib: FakeNvmlLib) -> Iterator[FakeNvmlLib]:
    """Put ``lib`` in ``pynvml.nvmlLib`` (clearing pynvml's function-pointer cache) and restore
    the previous library, cache and refcount on exit."""
    saved_lib = pynvml.nvmlLib
    saved_cache = dict(pynvml._nvmlGetFunctionPointer_cache)
    saved_refcount = pynvml._nvmlLib_refcount
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        yield lib
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = saved_lib
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlGetFunctionPointer_cache.update(saved_cache)
            pynvml._nvmlLib_refcount = saved_refcount


