"""Bad input on the trio side: every public callable refuses it, clearly and with no effect.

Issue 34 (items 11 and 12): huge finite numbers (``1e308``, ``10**400``) gave a bare
``OverflowError`` naming nothing, and some values were taken unchecked.  Here a Hypothesis walk
crosses the public trio-side callables -- ``virtualtime.trio.VirtualClock`` (its options, its
setters, ``jump``/``fast_forward``), ``virtualtime.trio.run`` and ``RunGuard``, the driving verbs
on a trio run, ``virtualtime.anyio_run`` -- with bad values (NaN, infinities, huge finite
numbers, negatives, wrong types, ``None`` where it is not allowed).  Each refusal must be of the
``VirtualTimeError`` family (``InvalidValueError``/``InvalidTypeError``), name the argument in
its message, and leave the clock as it was.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import virtualtime
import virtualtime.trio as vtrio
from virtualtime import InvalidTypeError, InvalidValueError

FAMILY = (InvalidValueError, InvalidTypeError)

HUGE = (1e308, 10**400, 2.0**200)
"""Finite, but past the horizon of virtual time (about 4.25e28 s) or beyond any float."""

NOT_FINITE = (math.nan, math.inf, -math.inf)
NEGATIVE = (-1, -1e-9, -1e308)
WRONG_TYPES: tuple[object, ...] = (None, "1", b"1", [1], {}, object(), 1j, True, False)
NOT_BOOL: tuple[object, ...] = (0, 1, 1.0, None, "yes", math.nan, [True])


def _snapshot(clock: vtrio.VirtualClock) -> tuple[Any, ...]:
    return (
        clock.current_time(),
        clock.rate,
        clock.autojump,
        clock.autojump_threshold,
        clock.deadlock_timeout,
        clock.jumps,
    )


@dataclass(frozen=True)
class Case:
    """One public parameter: how to pass it a value, the values it refuses, the name the
    message must carry."""

    what: str
    name: str
    bad: tuple[object, ...]
    call: Callable[[Any, Any], object]

    def __repr__(self) -> str:
        return self.what


def _option(name: str) -> Callable[[Any, Any], object]:
    return lambda clock, value: vtrio.VirtualClock(**{name: value})


def _setter(name: str) -> Callable[[Any, Any], object]:
    return lambda clock, value: setattr(clock, name, value)


async def _never_called() -> None:  # pragma: no cover - every call here is refused first
    raise AssertionError("a refused call ran its main function")


def _run_option(name: str) -> Callable[[Any, Any], object]:
    return lambda clock, value: vtrio.run(_never_called, **{name: value})


def _anyio_option(name: str) -> Callable[[Any, Any], object]:
    return lambda clock, value: virtualtime.anyio_run(
        _never_called, backend="trio", **{name: value}
    )


def _inside(verb: Callable[[Any], Awaitable[object]]) -> Callable[[Any, Any], object]:
    """Call ``verb(value)`` from inside a run on a clock of its own (at t=10 by then); what it
    raised, raised here, once the clock is found unchanged by it."""

    def call(_: vtrio.VirtualClock, value: object) -> object:
        clock = vtrio.VirtualClock(start=5, deadlock_timeout=0.01)

        async def main() -> object:
            await trio.sleep(5)
            before = _snapshot(clock)
            try:
                return await verb(value)
            finally:
                assert _snapshot(clock) == before, "a refused verb changed the clock"

        return vtrio.run(main, clock=clock)

    return call


SPAN = NOT_FINITE + NEGATIVE + HUGE + WRONG_TYPES
DELAY = NOT_FINITE + NEGATIVE + (10**400,) + WRONG_TYPES

CASES = (
    Case("VirtualClock(start=)", "start", SPAN, _option("start")),
    Case("VirtualClock(autojump=)", "autojump", NOT_BOOL, _option("autojump")),
    Case(
        "VirtualClock(autojump_threshold=)",
        "autojump_threshold",
        DELAY,
        _option("autojump_threshold"),
    ),
    Case("VirtualClock(rate=)", "rate", DELAY, _option("rate")),
    Case(
        "VirtualClock(deadlock_timeout=)",
        "deadlock_timeout",
        (math.nan, -math.inf, *NEGATIVE, 10**400, *WRONG_TYPES),
        _option("deadlock_timeout"),
    ),
    Case("VirtualClock(patch_time=)", "patch_time", NOT_BOOL, _option("patch_time")),
    Case(
        "VirtualClock(wall_start=)",
        "wall_start",
        (math.nan, math.inf, 10**400, "soon", [1]),
        _option("wall_start"),
    ),
    Case("clock.rate =", "rate", DELAY, _setter("rate")),
    Case("clock.autojump =", "autojump", NOT_BOOL, _setter("autojump")),
    Case("clock.autojump_threshold =", "autojump_threshold", DELAY, _setter("autojump_threshold")),
    Case(
        "clock.deadlock_timeout =",
        "deadlock_timeout",
        (math.nan, -math.inf, *NEGATIVE, 10**400, *WRONG_TYPES),
        _setter("deadlock_timeout"),
    ),
    Case("clock.jump()", "seconds", SPAN, lambda clock, value: clock.jump(value)),
    Case("clock.fast_forward()", "seconds", SPAN, lambda clock, value: clock.fast_forward(value)),
    Case("virtualtime.trio.run(start=)", "start", SPAN, _run_option("start")),
    Case("virtualtime.trio.run(rate=)", "rate", DELAY, _run_option("rate")),
    Case(
        "virtualtime.trio.run(async_fn)",
        "async_fn",
        (None, 5, "main", math.nan),
        lambda clock, value: vtrio.run(value),
    ),
    Case(
        "virtualtime.trio.run(clock=)",
        "clock",
        (5, "clock", math.nan, object()),
        lambda clock, value: vtrio.run(_never_called, clock=value),
    ),
    Case(
        "RunGuard(clock)",
        "clock",
        (None, 5, "clock"),
        lambda clock, value: vtrio.RunGuard(value, _never_called),
    ),
    Case(
        "RunGuard(async_fn)",
        "async_fn",
        (None, 5, "main"),
        lambda clock, value: vtrio.RunGuard(clock, value),
    ),
    Case(
        "anyio_run(main)",
        "main",
        (None, 5, "main"),
        lambda clock, value: virtualtime.anyio_run(value, backend="trio"),
    ),
    Case(
        "anyio_run(backend=)",
        "backend",
        (None, 5, "curio", "", math.nan),
        lambda clock, value: virtualtime.anyio_run(_never_called, backend=value),
    ),
    Case("anyio_run(start=)", "start", SPAN, _anyio_option("start")),
    Case(
        "anyio_run(deadlock_timeout=)",
        "deadlock_timeout",
        (math.nan, -1, None, "1"),
        _anyio_option("deadlock_timeout"),
    ),
    Case("await virtualtime.evolve()", "dt", SPAN, _inside(virtualtime.evolve)),
    Case("await virtualtime.fast_forward()", "dt", SPAN, _inside(virtualtime.fast_forward)),
    Case(
        "await virtualtime.run_until()",
        "t",
        (*NOT_FINITE, *HUGE, *WRONG_TYPES, 4.9, 0),
        _inside(virtualtime.run_until),
    ),
)


@st.composite
def case_and_value(draw: st.DrawFn) -> tuple[Case, object]:
    case = draw(st.sampled_from(CASES))
    return case, draw(st.sampled_from(case.bad))


@settings(max_examples=300, deadline=None)
@given(case_and_value())
def test_every_trio_entry_point_refuses_bad_values_clearly_and_changes_nothing(
    drawn: tuple[Case, object],
) -> None:
    case, value = drawn
    clock = vtrio.VirtualClock(start=5, deadlock_timeout=0.01)
    before = _snapshot(clock)
    with pytest.raises(FAMILY) as caught:
        case.call(clock, value)
    assert _names(str(caught.value), case.name), f"{case!r} with {value!r}: {caught.value}"
    assert _snapshot(clock) == before, f"{case!r} with {value!r} changed the clock"


def _names(message: str, name: str) -> bool:
    """Whether ``message`` is about the argument ``name`` (not just a word containing it)."""
    return message.startswith(f"{name} ") or f" {name} " in message or f"{name}=" in message


def test_every_bad_value_is_tried() -> None:
    """The walk above covers every case (a case whose values all pass would be dead weight)."""
    for case in CASES:
        for value in case.bad:
            clock = vtrio.VirtualClock(start=5, deadlock_timeout=0.01)
            with pytest.raises(FAMILY) as caught:
                case.call(clock, value)
            assert _names(str(caught.value), case.name), f"{case!r} {value!r}: {caught.value}"


def test_huge_spans_are_refused_in_rate_mode_too() -> None:
    clock = vtrio.VirtualClock(start=5, rate=2.0)
    before = clock.rate
    for value in HUGE:
        with pytest.raises(
            InvalidValueError, match=r"seconds (would take virtual time past|must be finite)"
        ):
            clock.jump(value)
    assert clock.rate == before
    assert clock.current_time() < 1e6


def test_a_span_that_reaches_the_horizon_from_late_on_is_refused() -> None:
    clock = vtrio.VirtualClock(start=4e28)
    with pytest.raises(InvalidValueError, match="horizon"):
        clock.jump(1e28)
    assert clock.current_time() == 4e28
    clock.jump(1e27)  # still short of it
    assert clock.current_time() == 4.1e28
