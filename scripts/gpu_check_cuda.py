"""A GPU load with no Python GPU library: the CUDA driver API through ctypes and a PTX kernel.

Owns :class:`DriverLoad`, the last-resort load for scripts/gpu_check.py when neither torch nor
cupy is installed on the lent machine: ``libcuda.so.1`` (part of the driver, so always there)
JIT-compiles a hand-written PTX kernel (independent FMA chains per thread, the result stored
so nothing is optimised away), launched over many blocks; :meth:`burst` launches it and
synchronises.  Not exercised in CI (no GPU there); a failure only makes the sensor section
record an error.
"""

from __future__ import annotations

import ctypes
import time

PTX = r"""
.version 7.0
.target sm_50
.address_size 64

.visible .entry burn(.param .u64 burn_out, .param .u32 burn_iters)
{
    .reg .pred %p;
    .reg .b32 %r<8>;
    .reg .f32 %f<12>;
    .reg .b64 %rd<6>;

    ld.param.u64 %rd1, [burn_out];
    ld.param.u32 %r1, [burn_iters];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r5, %r3, %r4, %r2;
    cvt.rn.f32.u32 %f1, %r5;
    add.f32 %f2, %f1, 0f3F800000;
    add.f32 %f3, %f1, 0f40000000;
    add.f32 %f4, %f1, 0f40400000;
    mov.f32 %f8, 0f3F7FFFEF;
    mov.f32 %f9, 0f3C23D70A;
LOOP:
    fma.rn.f32 %f1, %f1, %f8, %f9;
    fma.rn.f32 %f2, %f2, %f8, %f9;
    fma.rn.f32 %f3, %f3, %f8, %f9;
    fma.rn.f32 %f4, %f4, %f8, %f9;
    sub.u32 %r1, %r1, 1;
    setp.ne.u32 %p, %r1, 0;
    @%p bra LOOP;
    add.f32 %f5, %f1, %f2;
    add.f32 %f6, %f3, %f4;
    add.f32 %f7, %f5, %f6;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.f32 [%rd4], %f7;
    ret;
}
"""

THREADS = 256
BLOCKS_PER_SM = 16


class CudaError(RuntimeError):
    pass


class DriverLoad:
    """Primary context on ``device``, the PTX module, an output buffer; ~``launch_ms`` per
    launch after calibration."""

    def __init__(self, device: int = 0, launch_ms: float = 1.0) -> None:
        self.cu = ctypes.CDLL("libcuda.so.1")
        self._ck(self.cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._ck(self.cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        sms = ctypes.c_int()
        # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
        self._ck(self.cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev), "attribute")
        self.ctx = ctypes.c_void_p()
        self._ck(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "ctx retain")
        self._ck(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.blocks = max(int(sms.value), 1) * BLOCKS_PER_SM
        self.out = ctypes.c_uint64()
        self.cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self._ck(self.cu.cuMemAlloc_v2(ctypes.byref(self.out), self.blocks * THREADS * 4),
                 "cuMemAlloc")
        self.mod = ctypes.c_void_p()
        self._ck(self.cu.cuModuleLoadData(ctypes.byref(self.mod), PTX.encode() + b"\0"),
                 "cuModuleLoadData")
        self.fn = ctypes.c_void_p()
        self._ck(self.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"burn"),
                 "cuModuleGetFunction")
        self.cu.cuLaunchKernel.argtypes = [
            ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self.iters = ctypes.c_uint32(1 << 14)
        self.sms = int(sms.value)
        self.burst()  # JIT and warm up
        t0 = time.perf_counter()
        self.burst()
        dt_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
        self.iters = ctypes.c_uint32(max(int(self.iters.value * launch_ms / dt_ms), 64))
        self.kind = f"CUDA driver PTX ({self.sms} SMs, {self.iters.value} iters/launch)"

    def _ck(self, rc: int, what: str) -> None:
        if rc:
            name = ctypes.c_char_p()
            self.cu.cuGetErrorName(rc, ctypes.byref(name))
            raise CudaError(f"{what}: {rc} {(name.value or b'?').decode()}")

    def launch(self) -> None:
        params = (ctypes.c_void_p * 2)(ctypes.addressof(self.out),
                                       ctypes.addressof(self.iters))
        self._ck(self.cu.cuLaunchKernel(self.fn, self.blocks, 1, 1, THREADS, 1, 1, 0, None,
                                        params, None), "cuLaunchKernel")

    def sync(self) -> None:
        self._ck(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def burst(self) -> None:
        self.launch()
        self.sync()
