"""`engine/stepping.py`: generator-stepped searches run to their end or a step at a time."""

from __future__ import annotations

from collections.abc import Generator

from attribution.engine.stepping import finish, step


def _search(n: int) -> Generator[None, None, int]:
    total = 0
    for i in range(n):
        total += i
        yield
    return total


def test_finish_returns_the_search_result() -> None:
    assert finish(_search(5)) == 10
    assert finish(_search(0)) == 0  # a search with no step


def test_step_takes_one_step_and_says_when_it_is_done() -> None:
    gen = _search(2)
    assert step(gen) == (False, None)
    assert step(gen) == (False, None)
    assert step(gen) == (True, 1)  # the third next ends it with its result
