"""The exceptions virtualtime raises.

Every error that is about virtual time itself derives from :class:`VirtualTimeError`, so
``except virtualtime.VirtualTimeError`` catches all of them.  Bad *arguments* are reported with
the standard ``ValueError`` / ``TypeError`` instead, because that is what callers already expect
from Python APIs; those messages always name the offending argument and the rule it broke.
"""

from __future__ import annotations

__all__ = ["DeadlockError", "RunawayError", "VirtualTimeError"]


class VirtualTimeError(RuntimeError):
    """Base class of every virtual-time error raised by this package.

    Raised directly when a driving verb is used in the wrong place: for example
    ``loop.evolve()`` on a loop that is already running (use ``await virtualtime.evolve()``
    from inside it), or ``await virtualtime.step()`` when the running loop is not virtual.
    """


class DeadlockError(VirtualTimeError):
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


class RunawayError(VirtualTimeError):
    """The loop went round too many times at one virtual instant without time moving.

    A callback or task that reschedules itself with zero delay forever would otherwise spin
    the loop for ever while a driving verb waits for the instant to settle.  The limit is the
    loop option ``max_rounds_per_instant``.
    """
