"""The exceptions virtualtime raises: one family, each also the builtin callers already catch.

Every error this package raises on purpose derives from :class:`VirtualTimeError`, so
``except virtualtime.VirtualTimeError`` catches all of them.  Each one *also* derives from the
builtin that Python code expects for that kind of mistake, so existing handlers keep working:

=========================  ====================  ==========================================
class                      also a                raised when
=========================  ====================  ==========================================
:class:`InvalidValueError` ``ValueError``        an argument has the right type but a bad
                                                 value (``start=-1``, ``dt=nan``)
:class:`InvalidTypeError`  ``TypeError``         an argument has the wrong type, or an
                                                 option name is unknown
:class:`UsageError`        ``RuntimeError``      a verb is used in the wrong place (a driving
                                                 verb with no virtual loop running)
:class:`DeadlockError`     ``RuntimeError``      nothing can ever happen again
:class:`RunawayError`      ``RuntimeError``      the loop spins at one instant
:class:`FellBehindError`   ``RuntimeError``      a run paced with ``rate`` fell further
                                                 behind real time than ``rate_strict`` allows
:class:`UnsupportedError`  ``RuntimeError``      this Python build lacks what a feature needs
                                                 (``patch_time`` on a free-threaded build, or
                                                 a CPython whose object layout changed)
=========================  ====================  ==========================================

The argument errors' messages always name the offending argument and the rule it broke.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import math

__all__ = [
    "DeadlockError",
    "FellBehindError",
    "InvalidTypeError",
    "InvalidValueError",
    "RunawayError",
    "UnsupportedError",
    "UsageError",
    "VirtualTimeError",
]


class VirtualTimeError(Exception):
    """Base class of every error this package raises deliberately.

    Catch it to handle anything virtualtime refuses; catch the builtin a subclass also derives
    from (``ValueError``, ``TypeError``, ``RuntimeError``) to handle one kind of refusal the
    way you would for any other library.
    """


class InvalidValueError(VirtualTimeError, ValueError):
    """An argument or option has an acceptable type but a value outside its rule."""


class InvalidTypeError(VirtualTimeError, TypeError):
    """An argument or option has the wrong type, or an option name does not exist."""


class UsageError(VirtualTimeError, RuntimeError):
    """A verb was used where it cannot work.

    For example ``loop.evolve()`` on a loop that is already running (use ``await
    virtualtime.evolve()`` from inside it), ``await virtualtime.step()`` when the running loop
    is not virtual, or a trio run guarded twice by the same clock.
    """


class DeadlockError(VirtualTimeError, RuntimeError):
    """Nothing can ever happen again, yet the program is waiting.

    Raised by the virtual loop instead of hanging forever when no callback is ready, no timer
    is pending, and nothing outside the loop (a socket, a subprocess, a worker thread) can
    wake it.  In manual mode it is also raised when timers are pending but nobody is driving
    time forward.  The message lists every blocked task and where it is suspended; the same
    information is available as :attr:`blocked` (a tuple of ``(task name, location)``).
    """

    def __init__(self, message: str, blocked: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.blocked = blocked


class RunawayError(VirtualTimeError, RuntimeError):
    """The loop went round too many times at one virtual instant without time moving.

    A callback or task that reschedules itself with zero delay forever would otherwise spin
    the loop for ever while a driving verb waits for the instant to settle.  The limit is the
    loop option ``max_rounds_per_instant``.
    """


class UnsupportedError(VirtualTimeError, RuntimeError):
    """This Python build lacks what a feature needs.

    ``patch_time=True`` redirects CPython's clock objects in place; it refuses a free-threaded
    build, and a CPython whose builtin-function or method-descriptor layout no longer reads
    back as expected (checked before every write), instead of writing anything.
    """


class FellBehindError(VirtualTimeError, RuntimeError):
    """A run paced with ``rate`` fell further behind real time than ``rate_strict`` allows.

    Raised by a loop or clock made with ``rate_strict`` when a wake-up (a timer, a deadline,
    a simulation's sleep) comes more than the allowed number of virtual seconds after the pace
    said it was due -- the steps before it took more real time than the rate leaves them --
    instead of letting the run carry on late.  It is a ``RuntimeError``, as SimPy's strict
    real-time mode raises.  :attr:`due` is the virtual instant of that wake-up, :attr:`behind`
    how many virtual seconds the run was behind (``behind / rate`` real seconds),
    :attr:`allowed` the virtual seconds ``rate_strict`` allows and :attr:`rate` the rate.
    """

    def __init__(
        self,
        message: str,
        due: float = math.nan,
        behind: float = math.nan,
        allowed: float = math.nan,
        rate: float = math.nan,
    ) -> None:
        super().__init__(message)
        self.due = due
        self.behind = behind
        self.allowed = allowed
        self.rate = rate
