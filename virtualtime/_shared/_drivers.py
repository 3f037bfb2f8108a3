"""The registry of drivers: how the driving verbs find a virtual clock that is not asyncio's.

``virtualtime.now/peek/settle/step/evolve/run_until/fast_forward`` are written once, in the
asyncio engine (:mod:`virtualtime._engine._control`), and mean the same on every backend.  The
engine must not know which other backends exist, and those backends must not import the engine:
both sit above this module, which holds the contract between them.

* A backend with a virtual clock of its own registers a *finder* here when it is imported
  (:func:`register`).  A clock of that backend can only be running if the backend's module was
  imported, so nothing is missed by registering then rather than earlier.
* When no asyncio loop runs in the calling thread, each verb asks :func:`find`.  Every finder is
  called with the verb's name (``"virtualtime.evolve()"``) and answers with one of: the
  running clock as a :class:`Driver`; None, when its backend is not running in this thread; or
  a :class:`~virtualtime.UsageError` when its backend runs here with a clock that is not
  virtual (the error names the verb and says how to run with a virtual clock).
* The first finder that answers with a driver wins; when none does, the verb raises the
  engine's own "needs a running virtual event loop" error.

Use it when adding a backend: implement :class:`Driver` over its clock and register a finder.
Nothing here imports asyncio or any backend.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ._errors import InvalidTypeError, InvalidValueError

__all__ = ["Driver", "Finder", "find", "register", "registered", "unregister"]


class Driver(Protocol):
    """The running virtual clock of a non-asyncio backend, as the driving verbs use it.

    Each method has the meaning of the verb of the same name (see
    :mod:`virtualtime._engine._control`) and is called from a task of the run that clock
    drives.  The verbs check what they can before asking (``dt`` is already a float >= 0);
    a driver checks what only it can (``t`` against its own time and horizon) and raises the
    family's errors for bad values, leaving its clock unchanged.
    """

    def now(self) -> float:
        """The clock's virtual time, in seconds."""
        ...

    def peek(self) -> float:
        """Virtual time of the next pending deadline, or ``math.inf``."""
        ...

    async def settle(self) -> float:
        """Let everything ready run until the run is idle; time does not move."""
        ...

    async def step(self) -> float | None:
        """Settle, fire the next instant and settle; None when nothing is pending."""
        ...

    async def evolve(self, dt: float) -> float:
        """Fire every deadline in ``[now, now + dt]`` at its own instant; return the new time."""
        ...

    async def run_until(self, t: float) -> float:
        """:meth:`evolve` up to the absolute virtual time ``t``."""
        ...

    async def fast_forward(self, dt: float) -> float:
        """Leap ``dt`` at once, then settle; return the new time."""
        ...


Finder = Callable[[str], Driver | None]
"""Called with a verb's name; returns the running driver, None, or raises ``UsageError``."""

_finders: dict[str, Finder] = {}
"""Backend name -> its finder, in the order the backends registered."""


def register(backend: str, finder: Finder) -> None:
    """Let the driving verbs find ``backend``'s running virtual clock through ``finder``.

    Called once by the backend's module when it is imported.  Registering a name again
    replaces its finder (a reloaded module leaves no stale one behind).  A ``backend`` that is
    not a non-empty string, or a ``finder`` that is not callable, is refused before anything
    is registered.
    """
    if not isinstance(backend, str):
        raise InvalidTypeError(
            f"backend must be a str naming the backend, got {backend!r} ({type(backend).__name__})"
        )
    if not backend:
        raise InvalidValueError("backend must be a non-empty name, got ''")
    if not callable(finder):
        raise InvalidTypeError(
            f"finder must be a callable taking the verb's name, got {finder!r} "
            f"({type(finder).__name__})"
        )
    _finders[backend] = finder


def unregister(backend: str) -> None:
    """Forget ``backend``'s finder (nothing happens if it has none)."""
    _finders.pop(backend, None)


def registered() -> tuple[str, ...]:
    """The names of the backends whose finders are registered, in the order asked."""
    return tuple(_finders)


def find(what: str) -> Driver | None:
    """The running virtual clock of another backend, for the verb ``what``; None if none runs.

    Asked only when no asyncio loop runs in this thread.  A finder's ``UsageError`` (its
    backend runs here, but not in virtual time) goes to the caller unchanged.
    """
    for finder in tuple(_finders.values()):
        driver = finder(what)
        if driver is not None:
            return driver
    return None
