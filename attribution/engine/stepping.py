"""Searches written as generators, so that the live engine can spread them over its polls: a
step is one ``next``, the search's result the generator's return value.  Owns running one to
its end (:func:`finish`, the batch engine's form) and taking one step (:func:`step`)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar, cast

T = TypeVar("T")


def step(gen: Generator[Any, None, T]) -> tuple[bool, T | None]:
    """One step of ``gen``: (whether it is done, its result if so, else None)."""
    try:
        next(gen)
    except StopIteration as done:
        result: T = done.value
        return True, result
    return False, None


def finish(gen: Generator[Any, None, T]) -> T:
    """Run ``gen`` to its end; its result."""
    while True:
        done, result = step(gen)
        if done:
            return cast(T, result)
