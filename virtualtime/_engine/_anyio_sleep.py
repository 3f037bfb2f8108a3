"""anyio's ``sleep`` on the virtual loop, through :func:`virtualtime.sleep`.

On its asyncio backend ``anyio.sleep(delay)`` checks ``delay`` and then awaits
``AsyncIOBackend.sleep(delay)``, a coroutine whose whole body is ``await asyncio.sleep(delay)``:
two coroutine levels below anyio's own, a future, a timer handle and a callback for every
wake-up.  On a virtual loop :func:`virtualtime.sleep` is the same wait -- the same instant,
computed the same way, and the same place in the same timer heap (priority 0, numbered by the
same counter), so same-instant wake-ups keep their order -- with one level less and no handle.
Cancellation, anyio's cancel scopes, ``asyncio.timeout`` and the count of dead timers act on it
exactly as on ``asyncio.sleep`` (``tests/test_anyio_fast_path.py`` runs random programs both
ways and compares their stories).

:func:`install` replaces that one classmethod with :func:`_backend_sleep`, which takes the
native sleep only when it is the same wait: a virtual loop runs in this thread, that loop
would give ``asyncio.sleep`` its lean timer (no history kept, not in debug mode, not closed:
otherwise the history or debug records ``asyncio.sleep`` makes must stay as they are) and its
class keeps the stock ``call_later`` and ``create_future``, and the delay is a plain positive
number short of the horizon.  Anything else -- another loop, a zero delay (anyio's
checkpoints), ``math.inf`` (``sleep_forever``), a subclass with its own timers -- calls the
original method, so anyio on a stock loop, in this process or another thread, behaves as it
always did, for the cost of a type check and a thread-local read.

The loop installs it the first time it runs with anyio's asyncio backend imported (that is,
under ``anyio.run`` or anyio's pytest plugin, which import it before they make the loop).
``AsyncIOBackend`` is private to anyio: the replaced method is checked to be what it was when
this was written (a classmethod over a coroutine function of ``(cls, delay)``), and if it is
not -- a new anyio, or someone else's patch -- nothing is installed and anyio keeps its own
path.  ``tests/test_canaries.py`` names the assumption.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .._shared._threads import ANYIO_ASYNCIO
from . import _control
from ._loop import RUNNING_HERE

__all__ = ("install", "installed")

_FAR: Final = 1e18  # as in _loop.call_later: longer delays take the general path there too
_INT_OR_FLOAT: Final = (int, float)

_state: dict[str, Any] = {"tried": False, "stock": None}
_lock: Final = threading.Lock()  # two loops may start at once in two threads


def _stock_method(backend: type) -> Callable[[type, float], Awaitable[None]] | None:
    """The original ``AsyncIOBackend.sleep`` function, if it is still the one we know."""
    method = backend.__dict__.get("sleep")
    if not isinstance(method, classmethod):
        return None
    function = method.__func__
    if not inspect.iscoroutinefunction(function):
        return None
    if list(inspect.signature(function).parameters) != ["cls", "delay"]:
        return None
    return function


def install() -> bool:
    """Route ``anyio.sleep`` on virtual loops to :func:`virtualtime.sleep`; True once done.

    Called by the loop when it starts running with anyio's backend imported; it does its work
    once per process.  Returns False, and changes nothing, when anyio's asyncio backend
    is not imported yet or its ``sleep`` is not the method this module knows.
    """
    with _lock:
        if _state["tried"]:
            return _state["stock"] is not None
        module = sys.modules.get(ANYIO_ASYNCIO)
        if module is None:
            return False  # try again the next time a loop starts
        _state["tried"] = True
        return _install(module)


def _install(module: Any) -> bool:
    backend = getattr(module, "AsyncIOBackend", None)
    if not isinstance(backend, type):
        return False
    stock = _stock_method(backend)
    if stock is None:
        return False
    native = _control.sleep  # the compiled core's sleep when it was built, else pure_sleep
    here = RUNNING_HERE

    def _backend_sleep(cls: type, delay: float) -> Awaitable[None]:
        # The whole fast-path decision: two checks, a thread-local read and a flag.
        if type(delay) in _INT_OR_FLOAT and 0 < delay < _FAR:
            loop = here.loop
            if loop is not None and loop._vt_native_sleep:
                return native(delay)
        return stock(cls, delay)

    _backend_sleep.__doc__ = stock.__doc__
    _backend_sleep.__qualname__ = f"{backend.__qualname__}.sleep"
    _backend_sleep.__wrapped__ = stock  # type: ignore[attr-defined]
    # anyio-private: replacing the backend's classmethod is the one seam between anyio.sleep
    # and asyncio.sleep (see the module docstring and test_canaries.py).
    setattr(backend, "sleep", classmethod(_backend_sleep))  # noqa: B010 - a class of anyio's
    _state["stock"] = stock
    return True


def installed() -> bool:
    """Whether ``anyio.sleep`` takes the native sleep on virtual loops in this process."""
    return _state["stock"] is not None
