"""Numeric precision of a kernel, guessed from its name.

Owns the token table that maps kernel-name fragments (cuBLAS/CUTLASS/PyTorch naming habits:
``bf16``, ``h884``, ``s1688``, ``i8``, ``e4m3``, ``sgemm`` ...) to one of ``fp8``, ``int8``,
``bf16``, ``fp16``, ``tf32``, ``fp32``, ``fp64`` or ``unknown``.  The first rule that
matches wins; rules go from the most specific (fp8) to the least (fp32).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PRECISIONS = ("fp8", "int8", "bf16", "fp16", "tf32", "fp32", "fp64", "unknown")

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(pattern, re.IGNORECASE))
    for label, pattern in (
        ("fp8", r"e4m3|e5m2|fp8|f8f8|__nv_fp8"),
        ("int8", r"int8|(?<![a-z])i8(?![0-9])|imma|i8i8|s8s8|u8s8|igemm|_i8_|i8816|i16832"),
        ("bf16", r"bf16|bfloat16|BFloat16"),
        ("fp16", r"fp16|(?<![a-z])f16|half|__half|h884|h1688|h16816|hgemm|(?<![a-z])h884|"
                 r"_h\d{3,5}gemm|hmma"),
        ("tf32", r"tf32|s1688tf32|tensorfloat"),
        ("fp64", r"dgemm|fp64|(?<![a-z])f64|d884|dmma"),
        ("fp32", r"sgemm|fp32|(?<![a-z])f32|s1688|s884|s16816|<float|\bfloat\b|float\*"),
    )
)


def precision_of(kernel_name: str) -> str:
    """The precision a kernel name suggests, or ``"unknown"``."""
    for label, pat in _RULES:
        if pat.search(kernel_name):
            return label
    return "unknown"


def precisions_of(names: Iterable[str]) -> list[str]:
    """:func:`precision_of` for each name."""
    return [precision_of(n) for n in names]
