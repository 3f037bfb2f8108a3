"""Every public parameter of ``virtualtime.sim`` refuses a bad value the same way.

A property test walks the kit's public callables, constructors, methods and property setters
with values a newcomer (or a bug upstream) hands them -- NaN, infinities, ``1e308``,
``10**400``, negatives, strings, ``None``, lists, bools, arbitrary objects -- and holds each
refusal to one rule: a :class:`~virtualtime.InvalidValueError` or
:class:`~virtualtime.InvalidTypeError` (also ``ValueError``/``TypeError``, never a bare one
and never an ``OverflowError``), whose message names the argument, raised before the object
changed.  Values a parameter accepts are left out of its walk by its own ``valid`` rule, so
the rule is written down here once per kind of parameter.

An AST walk then checks that no module of the kit raises a bare builtin error at all.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import virtualtime
from virtualtime import InvalidTypeError, InvalidValueError, sim

HORIZON = 2**125 / 1e9

BAD: tuple[object, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1e308,
    10**400,
    -(10**400),
    -1,
    -0.5,
    0,
    "5",
    "",
    None,
    b"1",
    [1],
    (),
    True,
    False,
    object(),
)
"""The values every parameter is walked with (each parameter skips the ones it accepts)."""


def bad_values() -> st.SearchStrategy[object]:
    return st.sampled_from(BAD) | st.floats(allow_nan=True, allow_infinity=True) | st.integers()


# --------------------------------------------------------------------------- what is valid


def _real(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, Real):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return number == number


def _finite(value: object) -> bool:
    return _real(value) and math.isfinite(float(value))  # type: ignore[arg-type]


def any_real(value: object) -> bool:
    return _real(value)


def finite(value: object) -> bool:
    return _finite(value)


def instant(value: object) -> bool:
    return _finite(value) and abs(float(value)) < HORIZON  # type: ignore[arg-type]


def span(value: object) -> bool:
    return instant(value) and float(value) >= 0  # type: ignore[arg-type]


def positive_span(value: object) -> bool:
    return span(value) and float(value) > 0  # type: ignore[arg-type]


def delay(value: object) -> bool:
    return _real(value) and float(value) >= 0  # type: ignore[arg-type]


def capacity(value: object) -> bool:
    return _real(value) and float(value) > 0  # type: ignore[arg-type]


def amount(value: object) -> bool:
    return _finite(value) and float(value) > 0  # type: ignore[arg-type]


def level(value: object) -> bool:
    return _finite(value) and float(value) >= 0  # type: ignore[arg-type]


def until(value: object) -> bool:
    return value is None or value == math.inf or span(value)


def integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def flag(value: object) -> bool:
    return isinstance(value, bool)


def label(value: object) -> bool:
    return value is None or isinstance(value, str)


def window(value: object) -> bool:
    return value is None or _finite(value)


def order(value: object) -> bool:
    return value in sim.ORDERS


def backend(value: object) -> bool:
    return value in ("asyncio", "trio")


def nothing(value: object) -> bool:
    return False


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One parameter of one public callable.

    ``make()`` builds a fresh object (inside a running simulation when ``in_sim``);
    ``call(obj, value)`` hands it the value; ``state(obj)`` is what must not change.
    """

    name: str
    argument: str
    valid: Callable[[object], bool]
    call: Callable[[Any, object], object]
    make: Callable[[], Any] = lambda: None
    state: Callable[[Any], object] = repr
    in_sim: bool = False


def _resource_state(res: sim.Resource) -> object:
    stats = res.stats
    return repr(res), res.count, len(res.queue), stats.served(), stats.users.value


def _buffer_state(buf: Any) -> object:
    return repr(buf), len(buf.get_queue), len(buf.put_queue), buf.stats.level.value


async def _noop() -> None:
    return None


def _started(env: sim.Simulation) -> object:
    return env.processes, repr(env)


def _run_until(env: sim.Simulation, value: object) -> object:
    return env.run(value).send(None)


def _timer_with_event() -> tuple[sim.Timer, sim.PeriodicAction]:
    event = sim.PeriodicAction(lambda event, timer: None, start=1, period=1)
    return sim.Timer(event), event


def _vehicle() -> sim.Vehicle[tuple[float, ...]]:
    return sim.Vehicle(sim.Euclidean(), position=(0.0, 0.0), velocity=1.0)


def _vehicle_state(van: sim.Vehicle[Any]) -> object:
    return repr(van), van.distance_travelled, van.operating_time, van.step_size


def _clock_state(clock: sim.Clock) -> object:
    return repr(clock), clock.now, clock.rate, clock.occurrences


def _set(attribute: str) -> Callable[[Any, object], object]:
    def setter(obj: Any, value: object) -> None:
        setattr(obj, attribute, value)

    return setter


CASES: tuple[Case, ...] = (
    # -- running a model
    Case("simulate(until)", "until", until, lambda _, v: sim.simulate(_noop, until=v)),  # type: ignore[arg-type]
    Case("simulate(order)", "order", order, lambda _, v: sim.simulate(_noop, order=v)),  # type: ignore[arg-type]
    Case("simulate(backend)", "backend", backend, lambda _, v: sim.simulate(_noop, backend=v)),  # type: ignore[arg-type]
    Case(
        "simulate(end_when_idle)",
        "end_when_idle",
        flag,
        lambda _, v: sim.simulate(_noop, end_when_idle=v),  # type: ignore[arg-type]
    ),
    Case("simulate(main)", "main", nothing, lambda _, v: sim.simulate(v)),  # type: ignore[arg-type]
    Case("Simulation(order)", "order", order, lambda _, v: sim.Simulation(order=v)),  # type: ignore[arg-type]
    Case(
        "Simulation.simulate(until)",
        "until",
        until,
        lambda env, v: env.simulate(_noop, until=v),
        make=sim.Simulation,
    ),
    Case(
        "Simulation.run(until)",
        "until",
        until,
        _run_until,
        make=lambda: virtualtime.sim._kit._SIM.get(),
        state=_started,
        in_sim=True,
    ),
    Case(
        "start(coro)",
        "coro",
        nothing,
        lambda env, v: sim.start(v),  # type: ignore[arg-type]
        make=lambda: virtualtime.sim._kit._SIM.get(),
        state=_started,
        in_sim=True,
    ),
    Case("sleep(delay)", "delay", delay, lambda _, v: sim.sleep(v), in_sim=True),  # type: ignore[arg-type]
    Case("sleep(delay, value)", "delay", delay, lambda _, v: sim.sleep(v, "x"), in_sim=True),  # type: ignore[arg-type]
    Case("first_of(x)", "argument 0", nothing, lambda _, v: sim.first_of(v), in_sim=True),  # type: ignore[arg-type]
    Case("all_of(x)", "argument 0", nothing, lambda _, v: sim.all_of(v), in_sim=True),  # type: ignore[arg-type]
    Case("Signal.fail(exc)", "exc", nothing, lambda s, v: s.fail(v), make=sim.Signal),
    # -- resources, containers, stores
    Case("Resource(capacity)", "capacity", capacity, lambda _, v: sim.Resource(v)),  # type: ignore[arg-type]
    Case("Resource(name)", "name", label, lambda _, v: sim.Resource(name=v)),  # type: ignore[arg-type]
    Case(
        "PriorityResource.request(priority)",
        "priority",
        integer,
        lambda r, v: r.request(priority=v),
        make=sim.PriorityResource,
        state=_resource_state,
        in_sim=True,
    ),
    Case(
        "PreemptiveResource.request(preempt)",
        "preempt",
        flag,
        lambda r, v: r.request(preempt=v),
        make=sim.PreemptiveResource,
        state=_resource_state,
        in_sim=True,
    ),
    Case("Container(capacity)", "capacity", capacity, lambda _, v: sim.Container(v)),  # type: ignore[arg-type]
    Case("Container(init)", "init", level, lambda _, v: sim.Container(init=v)),  # type: ignore[arg-type]
    Case(
        "Container.get(amount)",
        "amount",
        amount,
        lambda c, v: c.get(v),
        make=lambda: sim.Container(10, init=5),
        state=_buffer_state,
        in_sim=True,
    ),
    Case(
        "Container.put(amount)",
        "amount",
        lambda v: amount(v) and float(v) <= 10,  # type: ignore[arg-type]
        lambda c, v: c.put(v),
        make=lambda: sim.Container(10, init=5),
        state=_buffer_state,
        in_sim=True,
    ),
    Case("Store(capacity)", "capacity", capacity, lambda _, v: sim.Store(v)),  # type: ignore[arg-type]
    Case(
        "FilterStore.get(filter)",
        "filter",
        lambda v: v is None,
        lambda s, v: s.get(v),
        make=sim.FilterStore,
        state=_buffer_state,
        in_sim=True,
    ),
    # -- statistics
    Case(
        "ResourceStats.utilisation(start)",
        "start",
        window,
        lambda r, v: r.stats.utilisation(start=v),
        make=sim.Resource,
        state=_resource_state,
        in_sim=True,
    ),
    Case(
        "Tally.mean(end)",
        "end",
        window,
        lambda t, v: t.mean(end=v),
        make=sim.Tally,
        state=lambda t: list(t.values()),
    ),
    Case("Tally.add(t)", "t", finite, lambda t, v: t.add(v, 1.0), make=sim.Tally, state=len),
    Case(
        "Tally.add(value)", "value", finite, lambda t, v: t.add(1.0, v), make=sim.Tally, state=len
    ),
    Case(
        "TimeSeries.record(value)",
        "value",
        finite,
        lambda s, v: s.record(v),
        make=lambda: sim.TimeSeries(lambda: 1.0),
        state=lambda s: (s.value, s.mean()),
    ),
    Case(
        "TimeSeries.value_at(t)",
        "t",
        lambda v: finite(v) and float(v) >= 0,  # type: ignore[arg-type]
        lambda s, v: s.value_at(v),
        make=lambda: sim.TimeSeries(lambda: 1.0),
        state=lambda s: (s.value, s.mean()),
    ),
    # -- clocks, timers, timelines
    Case("Clock(rate)", "rate", level, lambda _, v: sim.Clock(v)),  # type: ignore[arg-type]
    Case(
        "Clock(start)",
        "start",
        lambda v: v is None or instant(v),
        lambda _, v: sim.Clock(start=v),  # type: ignore[arg-type]
    ),
    Case(
        "Clock.child(rate)",
        "rate",
        level,
        lambda c, v: c.child(v),
        make=sim.Clock,
        state=lambda c: (c.children, _clock_state(c)),
    ),
    Case("Clock.rate =", "rate", level, _set("rate"), make=sim.Clock, state=_clock_state),
    Case(
        "Clock.fast_forward(dt)",
        "dt",
        span,
        lambda c, v: c.fast_forward(v),
        make=sim.Clock,
        state=_clock_state,
    ),
    Case(
        "Clock.schedule(time)",
        "time",
        lambda v: v is None or instant(v),  # a time in the past is due at once (Ruck)
        lambda c, v: c.schedule("x", v),
        make=sim.Clock,
        state=_clock_state,
    ),
    Case(
        "Clock.run_until(time)",
        "time",
        instant,  # a time in the past returns at once (Ruck)
        lambda c, v: c.run_until(v),
        make=sim.Clock,
        state=_clock_state,
    ),
    Case(
        "PeriodicAction(start)",
        "start",
        instant,
        lambda _, v: sim.PeriodicAction(lambda e, t: None, start=v),  # type: ignore[arg-type]
    ),
    Case(
        "PeriodicAction(period)",
        "period",
        positive_span,
        lambda _, v: sim.PeriodicAction(lambda e, t: None, period=v),  # type: ignore[arg-type]
    ),
    Case(
        "PeriodicAction(priority)",
        "priority",
        lambda v: integer(v) or (isinstance(v, str) and v in sim.PRIORITIES),
        lambda _, v: sim.PeriodicAction(lambda e, t: None, priority=v),  # type: ignore[arg-type]
    ),
    Case(
        "PeriodicAction.config(period)",
        "period",
        lambda v: v is None or positive_span(v),
        lambda te, v: te[1].config(period=v),
        make=_timer_with_event,
        state=lambda te: (repr(te[0]), repr(te[1]), te[1].period),
    ),
    Case(
        "Timer.run_sync(until)",
        "until",
        instant,  # a new timer starts its time with its first run
        lambda te, v: te[0].run_sync(v),
        make=_timer_with_event,
        state=lambda te: (repr(te[0]), te[0].time, repr(te[1])),
    ),
    Case("Timer(snap)", "snap", span, lambda _, v: sim.Timer(snap=v)),  # type: ignore[arg-type]
    Case(
        "Timeline.add(delay)",
        "delay",
        span,
        lambda tl, v: tl.add("x", v),
        make=sim.Timeline,
        state=lambda tl: (tl.time, len(tl), tl.active),
    ),
    Case(
        "Timeline.add(duration)",
        "duration",
        lambda v: v is None or v == math.inf or span(v),
        lambda tl, v: tl.add("x", 1, v),
        make=sim.Timeline,
        state=lambda tl: (tl.time, len(tl), tl.active),
    ),
    Case(
        "Timeline.update(dt)",
        "dt",
        span,
        lambda tl, v: tl.update(v),
        make=sim.Timeline,
        state=lambda tl: (tl.time, len(tl), tl.active),
    ),
    # -- vehicles and geometries
    Case(
        "Vehicle(velocity)",
        "velocity",
        lambda v: amount(v),
        lambda _, v: sim.Vehicle(sim.Euclidean(), position=(0.0, 0.0), velocity=v),  # type: ignore[arg-type]
    ),
    Case(
        "Vehicle(history)",
        "history",
        lambda v: v is None or (integer(v) and v >= 0),  # type: ignore[operator]
        lambda _, v: sim.Vehicle(sim.Euclidean(), position=(0.0, 0.0), velocity=1, history=v),  # type: ignore[arg-type]
    ),
    Case(
        "Vehicle.velocity =",
        "velocity",
        amount,
        _set("velocity"),
        make=_vehicle,
        state=_vehicle_state,
    ),
    Case(
        "Vehicle.step_size =",
        "step_size",
        lambda v: v is None or amount(v),
        _set("step_size"),
        make=_vehicle,
        state=_vehicle_state,
    ),
    Case(
        "Vehicle.record_external_move(distance)",
        "distance",
        level,
        lambda van, v: van.record_external_move(v, 1.0),
        make=_vehicle,
        state=_vehicle_state,
    ),
    Case(
        "Vehicle.record_external_move(duration)",
        "duration",
        span,
        lambda van, v: van.record_external_move(1.0, v),
        make=_vehicle,
        state=_vehicle_state,
    ),
    Case("Fleet(name)", "name", label, lambda _, v: sim.Fleet(name=v)),  # type: ignore[arg-type]
    Case("Fleet.add(vehicle)", "vehicle", nothing, lambda f, v: f.add(v), make=sim.Fleet),
    Case(
        "Euclidean(dimensions)",
        "dimensions",
        lambda v: v in (None, 2, 3) and not isinstance(v, bool),
        lambda _, v: sim.Euclidean(v),  # type: ignore[arg-type]
    ),
    Case(
        "Polyline.point_at(s)",
        "s",
        finite,
        lambda p, v: p.point_at(v),
        make=lambda: sim.Polyline([(0, 0), (1, 0)]),
    ),
    Case(
        "GuidePath.grid(rows)",
        "rows",
        lambda v: integer(v) and 1 <= v <= 5 * 10**6,  # type: ignore[operator]
        lambda _, v: sim.GuidePath.grid(v, 2),  # type: ignore[arg-type]
    ),
    Case(
        "GuidePath.grid(spacing)",
        "spacing",
        amount,
        lambda _, v: sim.GuidePath.grid(2, 2, v),  # type: ignore[arg-type]
    ),
)


def _refused(case: Case, value: object) -> None:
    """Hand ``value`` to ``case`` and hold the refusal to the rule."""

    def attempt() -> tuple[BaseException | None, object, object]:
        obj = case.make()
        before = case.state(obj)
        error: BaseException | None = None
        try:
            result = case.call(obj, value)
        except Exception as exc:  # the refusal under test
            error = exc
        else:
            close = getattr(result, "close", None)
            if callable(close):
                close()
            abandon = getattr(result, "_abandon", None)
            if callable(abandon):
                abandon()
        return error, before, case.state(obj)

    if case.in_sim:

        async def main() -> tuple[BaseException | None, object, object]:
            return attempt()

        outcome = sim.simulate(main)
        assert outcome is not None
        error, before, after = outcome
    else:
        error, before, after = attempt()
    assert error is not None, f"{case.name} accepted {value!r}"
    assert isinstance(error, InvalidValueError | InvalidTypeError), (
        f"{case.name} refused {value!r} with {type(error).__name__}: {error}"
    )
    assert case.argument in str(error), f"{case.name}: {error} does not name {case.argument}"
    assert after == before, f"{case.name} changed state refusing {value!r}"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@settings(
    max_examples=15,  # per parameter; the fixed list below tries every listed value too
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(value=bad_values())
def test_every_public_parameter_refuses_bad_values_by_name_before_changing_anything(
    case: Case, value: object
) -> None:
    assume(not case.valid(value))
    _refused(case, value)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_listed_bad_value_is_refused(case: Case) -> None:
    """The fixed list, every value, every parameter (hypothesis samples; this is exhaustive)."""
    refused = [value for value in BAD if not case.valid(value)]
    assert refused, f"{case.name}: no bad value to try"
    for value in refused:
        _refused(case, value)


# --------------------------------------------------------------------------- decisions


def test_until_inf_is_until_none_and_huge_finite_untils_are_refused() -> None:
    """``until=math.inf`` is an instant never reached, so the run ends when every process
    has ended -- what ``until=None`` means (it used to wait for infinity and deadlock); a finite
    ``until`` past the horizon of virtual time cannot be reached either, but saying so is
    kinder than treating a typo (``1e308``) as "for ever"."""

    async def main() -> float:
        await sim.sleep(3)
        return sim.now()

    assert sim.simulate(main, until=math.inf) == 3.0
    with pytest.raises(InvalidValueError, match=r"until must be None, math\.inf or an instant"):
        sim.simulate(main, until=1e308)


# --------------------------------------------------------------------------- one family

PACKAGE = Path(sim.__file__).parent
BARE = frozenset({"ValueError", "TypeError", "RuntimeError", "Exception", "OverflowError"})


def test_no_module_of_the_kit_raises_a_bare_builtin_error() -> None:
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id in BARE:
                    found.append(f"{path.name}:{node.lineno}: raise {func.id}(...)")
    assert found == [], "raise a virtualtime error (virtualtime/_shared/_errors.py) instead"
