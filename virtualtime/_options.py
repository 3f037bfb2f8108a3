"""The options catalogue: every option of a virtual loop or clock, named and checked once.

:class:`LoopOptions` is the one place that says which options exist, what each defaults to,
which of them trio's clock shares, and what a good value is.  Every entry point builds one
and passes it on -- :class:`~virtualtime.VirtualEventLoop`, :class:`virtualtime.trio.
VirtualClock`, :func:`virtualtime.new_event_loop`, :func:`virtualtime.run`,
:func:`virtualtime.anyio_run`, :func:`virtualtime.trio.run`, the event-loop policy, the pytest
marker and ``virtualtime run`` -- so all of them accept the same names and refuse the same
values with the same message, before anything is created.

:func:`configure` is the seam for code that must change the loops and clocks *other* code
creates (the ``virtualtime run`` command, a tracer, a progress display): inside ``with
virtualtime.configure(start=1000, on_create=seen.append):`` every virtual loop and clock
made in that context gets those options and is reported to the callback.  No constructor is
patched for it; the constructors read it.

Part of ``options``: may import ``shared``, ``clocks`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import difflib
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from numbers import Real
from typing import Any, Final, Literal, TypedDict

from ._clocks._patch import check_wall_start
from ._shared._errors import FellBehindError as FellBehindError
from ._shared._errors import InvalidTypeError, InvalidValueError
from ._shared._time import (
    NEVER,
    TICKS_PER_SECOND,
    check_bool,
    check_delay,
    check_finite,
    check_rate,
    shown,
)

__all__ = [
    "ASYNCIO_ONLY",
    "OPTION_NAMES",
    "TRIO_OPTION_NAMES",
    "ClockKwargs",
    "FellBehindError",
    "LoopKwargs",
    "LoopOptions",
    "check_option",
    "configure",
    "fell_behind",
]

Backend = Literal["asyncio", "trio"]
Perturb = Literal["timers", "ready"]
"""What a seed perturbs: ties of same-instant timers, or those and the ready task steps."""


_HORIZON: Final = NEVER / TICKS_PER_SECOND
"""The horizon of virtual time in seconds (2**125 ns); ``start`` must lie before it."""

_ASYNCIO_ONLY: Final = {"asyncio_only": True}


@dataclasses.dataclass(frozen=True)
class LoopOptions:
    """The options of a virtual loop (all twelve) or a trio clock (the eight it shares).

    Use it to check options long before anything is created (a config file, a command
    line), or to build them once and pass them on to many loops or clocks --
    ``virtualtime.new_event_loop(options)``, ``virtualtime.trio.VirtualClock(options)``.
    Everyday code just passes keywords, which are checked by this same class.

    Build one with :meth:`of` (checks names and values) or ``LoopOptions(...).validate()``;
    the meaning of each option is documented on :class:`~virtualtime.VirtualEventLoop`.  A
    validated instance holds normalised values: floats for times, ``None`` for "keep no
    history", and a POSIX timestamp (or ``None``: "the real time at creation") for
    ``wall_start``.
    """

    start: float = 0.0
    autojump: bool = True
    autojump_threshold: float = 0.0
    rate: float = 0.0
    rate_strict: bool | float = False
    history: int | None = dataclasses.field(default=None, metadata=_ASYNCIO_ONLY)
    deadlock_timeout: float = 0.25
    max_rounds_per_instant: int = dataclasses.field(default=1_000_000, metadata=_ASYNCIO_ONLY)
    patch_time: bool = False
    wall_start: float | datetime.datetime | None = None
    seed: int | None = dataclasses.field(default=None, metadata=_ASYNCIO_ONLY)
    perturb: Perturb = dataclasses.field(default="timers", metadata=_ASYNCIO_ONLY)

    @classmethod
    def of(cls, options: Mapping[str, object], *, backend: Backend = "asyncio") -> LoopOptions:
        """Check the names (for ``backend``) and the values of ``options``; the result.

        Raises :class:`~virtualtime.InvalidTypeError` (a ``TypeError``) for an unknown name
        or one the backend does not have, and the option's own error for a bad value.
        """
        check_names(options, backend)
        if not options:
            return _DEFAULT_OPTIONS  # every default is valid: nothing to check
        values = dict(_DEFAULTS)
        for name, value in options.items():
            values[name] = _CHECKS[name](value)
        return _checked(cls(**values))

    def validate(self) -> LoopOptions:
        """Check every value; return a copy with the values normalised (see the class)."""
        values = {name: _CHECKS[name](getattr(self, name)) for name in OPTION_NAMES}
        return _checked(LoopOptions(**values))

    def replace(self, **changes: Any) -> LoopOptions:
        """A validated copy with ``changes`` (checked like :meth:`of`)."""
        check_names(changes, "asyncio")
        return dataclasses.replace(self, **changes).validate()

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults, by name."""
        return {name: value for name, value in self.items() if value != _DEFAULTS[name]}

    def items(self) -> Iterator[tuple[str, Any]]:
        """``(name, value)`` of every option, in catalogue order."""
        for name in OPTION_NAMES:
            yield name, getattr(self, name)

    def for_trio(self) -> LoopOptions:
        """These options for trio's clock: an asyncio-only option that is set is an error."""
        set_here = [name for name in ASYNCIO_ONLY if getattr(self, name) != _DEFAULTS[name]]
        if set_here:
            raise InvalidTypeError(_asyncio_only_message(set_here))
        return self


OPTION_NAMES: Final = tuple(field.name for field in dataclasses.fields(LoopOptions))
"""Every option of :class:`~virtualtime.VirtualEventLoop`, in catalogue order."""

ASYNCIO_ONLY: Final = tuple(
    field.name for field in dataclasses.fields(LoopOptions) if field.metadata.get("asyncio_only")
)
"""The options only the asyncio loop has: they describe its timer heap, which trio lacks."""

TRIO_OPTION_NAMES: Final = tuple(name for name in OPTION_NAMES if name not in ASYNCIO_ONLY)
"""The options :class:`virtualtime.trio.VirtualClock` shares with the loop, same meaning."""

_DEFAULTS: Final[Mapping[str, Any]] = {
    field.name: field.default for field in dataclasses.fields(LoopOptions)
}


class ClockKwargs(TypedDict, total=False):
    """The keyword options of a trio ``VirtualClock`` (for type checkers)."""

    start: float
    autojump: bool
    autojump_threshold: float
    rate: float
    rate_strict: bool | float
    deadlock_timeout: float
    patch_time: bool
    wall_start: float | datetime.datetime | None


class LoopKwargs(ClockKwargs, total=False):
    """The keyword options of a ``VirtualEventLoop`` (for type checkers)."""

    history: int | None
    max_rounds_per_instant: int
    seed: int | None
    perturb: Perturb


# ---------------------------------------------------------------------- the checks


def check_names(options: Mapping[str, object], backend: Backend) -> None:
    """Refuse unknown option names (and, on trio, the asyncio-only ones), naming them."""
    accepted = OPTION_NAMES if backend == "asyncio" else TRIO_OPTION_NAMES
    wrong = [name for name in options if name not in accepted]
    if not wrong:
        return
    asyncio_only = [name for name in wrong if name in ASYNCIO_ONLY]
    if asyncio_only and backend == "trio":
        raise InvalidTypeError(_asyncio_only_message(asyncio_only))
    hints = []
    for name in wrong:
        close = difflib.get_close_matches(str(name), accepted, n=1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    raise InvalidTypeError(
        f"unknown option{'s' if len(wrong) > 1 else ''} {', '.join(hints)}; the options "
        f"{'of the asyncio loop' if backend == 'asyncio' else 'of the trio clock'} are "
        f"{', '.join(accepted)}"
    )


def _asyncio_only_message(names: list[str]) -> str:
    return (
        f"option{'s' if len(names) > 1 else ''} {', '.join(names)} exist"
        f"{'' if len(names) > 1 else 's'} only on the asyncio loop; trio's clock accepts "
        f"{', '.join(TRIO_OPTION_NAMES)}"
    )


_short = shown


def _check_start(value: object) -> float:
    start = check_delay("start", value)
    if start >= _HORIZON:
        raise InvalidValueError(
            f"start must be before the horizon of virtual time ({_HORIZON:.4g} s), "
            f"got {_short(value)}"
        )
    return start


def _check_rate_strict(value: object) -> bool | float:
    # True: SimPy's strict rule (one virtual second, whatever the rate); a number: that many
    # virtual seconds.  True == 1.0, so a LoopOptions compares equal either way, as it should.
    if isinstance(value, bool):
        return value
    if not isinstance(value, Real):
        raise InvalidTypeError(
            "rate_strict must be True, False or a number of virtual seconds > 0 (how far a "
            f"paced run may fall behind real time), got {shown(value)} ({type(value).__name__})"
        )
    allowed = check_finite("rate_strict", value)
    if allowed <= 0:
        raise InvalidValueError(
            f"rate_strict must be > 0 virtual seconds (False turns it off), got {shown(value)}"
        )
    return allowed


def _check_history(history: object) -> int | None:
    if history is None:
        return None
    if isinstance(history, bool) or not isinstance(history, int):
        raise InvalidTypeError(
            f"history must be None or an int (how many records to keep), got {history!r}"
        )
    if history < 0:
        raise InvalidValueError(f"history must be >= 0 (0 or None keeps none), got {history!r}")
    if history > sys.maxsize:
        raise InvalidValueError(
            f"history must be at most sys.maxsize ({sys.maxsize}), got {_short(history)}"
        )
    return history or None


def _check_deadlock_timeout(value: object) -> float:
    # math.inf: never declare a deadlock (a server waiting for clients from outside).
    if isinstance(value, float) and value == math.inf:
        return math.inf
    return check_delay("deadlock_timeout", value)


def _check_max_rounds(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"max_rounds_per_instant must be an int, got {value!r}")
    if value < 1:
        raise InvalidValueError(f"max_rounds_per_instant must be >= 1, got {value!r}")
    return value


def _check_seed(value: object) -> int | None:
    if value is None:
        return None  # unseeded: the loop's FIFO order, as always
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(
            f"seed must be None or an int >= 0 (the same seed gives the same run), got "
            f"{shown(value)} ({type(value).__name__})"
        )
    if value < 0:
        raise InvalidValueError(f"seed must be an int >= 0, got {shown(value)}")
    return value


def _check_perturb(value: object) -> Perturb:
    if not isinstance(value, str):
        raise InvalidTypeError(
            f"perturb must be 'timers' or 'ready' (what the seed perturbs), got "
            f"{shown(value)} ({type(value).__name__})"
        )
    if value == "timers":
        return "timers"
    if value == "ready":
        return "ready"
    raise InvalidValueError(
        "perturb must be 'timers' (the seed orders same-instant timers of equal priority) or "
        f"'ready' (those and the task steps made ready in one round), got {shown(value)}"
    )


def _check_together(options: LoopOptions) -> None:
    """The rules between options (each value is checked on its own first)."""
    if options.perturb == "ready" and options.seed is None:
        raise InvalidValueError(
            "perturb='ready' needs a seed (the seed decides the order of the ready task "
            "steps); pass seed=<an int >= 0> too, or leave perturb at 'timers'"
        )


def _check_wall_start(value: object) -> float | None:
    if value is None:
        return None  # "the real time when the loop or clock is created"

    return check_wall_start(value)


_CHECKS: Final[Mapping[str, Callable[[object], Any]]] = {
    "start": _check_start,
    "autojump": lambda value: check_bool("autojump", value),
    "autojump_threshold": lambda value: check_delay("autojump_threshold", value),
    "rate": lambda value: check_rate("rate", value),
    "rate_strict": _check_rate_strict,
    "history": _check_history,
    "deadlock_timeout": _check_deadlock_timeout,
    "max_rounds_per_instant": _check_max_rounds,
    "patch_time": lambda value: check_bool("patch_time", value),
    "wall_start": _check_wall_start,
    "seed": _check_seed,
    "perturb": _check_perturb,
}
assert tuple(_CHECKS) == OPTION_NAMES


def _checked(options: LoopOptions) -> LoopOptions:
    """``options``, marked as checked: made of values the checks returned.

    A constructor handed such an instance (``anyio_run`` and ``simulate`` check the options
    first, then pass them on) takes it as it is, instead of checking all twelve again: that
    was a tenth of the cost of a loop.  The mark is no field (equality, ``repr`` and
    ``dataclasses.replace`` ignore it; a replaced copy is checked afresh).  The rules between
    options are checked here, once every value is.
    """
    _check_together(options)
    object.__setattr__(options, "_vt_checked", True)
    return options


def _is_checked(options: LoopOptions) -> bool:
    return options.__dict__.get("_vt_checked", False) is True


_DEFAULT_OPTIONS: Final = _checked(LoopOptions())
"""The defaults, already valid (what a loop made without options uses)."""


def check_option(name: str, value: object) -> Any:
    """One option's value, normalised, or its error (for the settable options' setters)."""
    return _CHECKS[name](value)


def from_call(
    options: object, kwargs: Mapping[str, object], who: str, backend: Backend = "asyncio"
) -> LoopOptions:
    """The validated options of a constructor called with a :class:`LoopOptions` or keywords."""
    if options is None:
        return LoopOptions.of(kwargs, backend=backend)
    if not isinstance(options, LoopOptions):
        raise InvalidTypeError(
            f"{who}() takes its options as keywords or one LoopOptions, got {options!r}"
        )
    if kwargs:
        raise InvalidTypeError(
            f"{who}() takes a LoopOptions or keyword options, not both (got {', '.join(kwargs)})"
        )
    checked = options if _is_checked(options) else options.validate()
    return checked.for_trio() if backend == "trio" else checked


# ------------------------------------------------------------ the rule of rate_strict
# The error lives here for now, beside the option whose rule it reports; its home is the
# error family (virtualtime._shared._errors), and the loop and the clock import it from here.


def fell_behind(due: float, now: float, rate: float, strict: bool | float) -> FellBehindError:
    """The error of a run at ``rate`` whose wake-up due at ``due`` comes when the pace says
    ``now``, more than ``strict`` (a true ``rate_strict``) allows; one wording for both
    backends."""
    behind = now - due
    allowed = float(strict)
    rule = "one virtual second, SimPy's strict rule" if strict is True else f"{allowed:g} virtual s"
    return FellBehindError(
        f"the run fell behind real time: at rate={rate:g}, the wake-up due at t={due!r} came "
        f"{behind:.6g} virtual s ({behind / rate:.3g} real s) late, when the pace was at "
        f"t={now:.6g}; rate_strict={strict!r} allows {rule} ({allowed / rate:.3g} real s at this "
        "rate).  The steps before it took more real time than the rate leaves them: lower the "
        "rate, make the steps cheaper, or allow more (rate_strict=<virtual seconds>)",
        due,
        behind,
        allowed,
        rate,
    )


# ---------------------------------------------------------------- the context seam


@dataclasses.dataclass(frozen=True)
class _Layer:
    options: Mapping[str, Any]
    on_create: Callable[[Any], object] | None
    on_close: Callable[[Any], object] | None


_CONTEXT: Final = contextvars.ContextVar[tuple[_Layer, ...]]("virtualtime_configure", default=())
_EVERY_THREAD: list[_Layer] = []
"""Layers from ``configure(..., all_threads=True)``: seen by every thread, any context."""


def _layers() -> tuple[_Layer, ...]:
    context = _CONTEXT.get()
    return (*_EVERY_THREAD, *context) if _EVERY_THREAD else context


def configured(
    options: LoopOptions, *, trio: bool = False
) -> tuple[LoopOptions, tuple[_Layer, ...]]:
    """``options`` with every active :func:`configure` layer on top; and those layers.

    The constructors of the loop and the trio clock call this; nothing else needs to.
    """
    layers = _layers()
    if not layers:
        return options, ()
    values = dict(options.items())
    for layer in layers:
        for name, value in layer.options.items():
            if trio and name in ASYNCIO_ONLY:
                continue
            if name == "history":
                own = values["history"]
                value = max(own or 0, value or 0) or None
            values[name] = value
    merged = LoopOptions(**values)
    _check_together(merged)  # (a layer's seed=None under a loop's perturb="ready")
    return merged, layers


def created(obj: object, layers: tuple[_Layer, ...]) -> None:
    """Tell every layer's ``on_create`` about a new loop or clock (outermost first)."""
    for layer in layers:
        if layer.on_create is not None:
            layer.on_create(obj)


def closed(obj: object, layers: tuple[_Layer, ...]) -> None:
    """Tell every layer's ``on_close`` that a loop closed or a trio run ended."""
    for layer in layers:
        if layer.on_close is not None:
            layer.on_close(obj)


def configure(
    *,
    on_create: Callable[[Any], object] | None = None,
    on_close: Callable[[Any], object] | None = None,
    all_threads: bool = False,
    **options: Any,
) -> contextlib.AbstractContextManager[LoopOptions]:
    """Set the options of every virtual loop and clock created in this context.

    Use it to change loops and clocks that *other* code creates -- a program you run, a
    library's own ``virtualtime.run`` -- without touching that code::

        with virtualtime.configure(start=3600, patch_time=True, on_create=print):
            asyncio.run(main(), loop_factory=virtualtime.new_event_loop)

    ``options`` are the loop options (checked at once, like everywhere else); they win over
    what a constructor was given, except ``history``, where the larger count wins so that a
    tracer never shrinks what the code keeps.  A trio clock takes the options it has and
    ignores the asyncio-only ones (``history``, ``max_rounds_per_instant``, ``seed`` and
    ``perturb``).  ``on_create(obj)`` is called with each new
    :class:`~virtualtime.VirtualEventLoop` or :class:`virtualtime.trio.VirtualClock` once it
    is built; ``on_close(obj)`` when such a loop closes, or when a trio run on such a clock
    ends.  Contexts nest: inner options go on top, and every level's callbacks run.

    "This context" is a :mod:`contextvars` context: the current thread, and tasks and
    ``asyncio.to_thread`` calls started from it -- not threads started with
    ``threading.Thread``.  ``all_threads=True`` reaches every thread while the block runs.
    It yields the validated options.  Everything is checked when ``configure`` is called,
    before the ``with`` block is entered.
    """
    check_bool("all_threads", all_threads)
    for name, hook in (("on_create", on_create), ("on_close", on_close)):
        if hook is not None and not callable(hook):
            raise InvalidTypeError(
                f"{name} must be None or a callable taking the loop or clock, got {shown(hook)}"
            )
    checked = LoopOptions.of(options)
    given = {name: getattr(checked, name) for name in options}
    return _configured(_Layer(given, on_create, on_close), checked, all_threads)


@contextlib.contextmanager
def _configured(layer: _Layer, checked: LoopOptions, all_threads: bool) -> Iterator[LoopOptions]:
    """The context of :func:`configure`, whose arguments are already checked."""
    if all_threads:
        _EVERY_THREAD.append(layer)
        try:
            yield checked
        finally:
            _EVERY_THREAD.remove(layer)
        return
    token = _CONTEXT.set((*_CONTEXT.get(), layer))
    try:
        yield checked
    finally:
        _CONTEXT.reset(token)


def wall_epoch(options: LoopOptions) -> float:
    """The wall-clock epoch (POSIX timestamp) of ``options.start``: ``wall_start``, else now."""

    return check_wall_start(options.wall_start)
