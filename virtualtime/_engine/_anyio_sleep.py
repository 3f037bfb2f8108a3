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
under ``anyio.run`` or anyio's pytest plugin, which import it before they make the loop),
through the hook this module registers with the loop when it is imported
(:func:`virtualtime._engine._loop.on_anyio_backend`; the package's front door imports it).
``AsyncIOBackend`` is private to anyio: the replaced method is checked to be what it was when
this was written (a classmethod over a coroutine function of ``(cls, delay)``), and if it is
not -- a new anyio, or someone else's patch -- nothing is installed and anyio keeps its own
path.  ``tests/test_canaries.py`` names the assumption.

The same hook makes anyio's cancellation order reproducible on virtual loops.  A cancelled
anyio task group delivers the cancellation to its tasks (a ``set`` of tasks, which the loop's
numbered tasks iterate in a fixed order: see :class:`virtualtime._engine._handles.Task`) and then to
its child cancel scopes -- every task anyio starts runs inside a scope of its own, so that is
where the group's children are -- iterating a ``set`` of scopes, which hash by address.  So a
cancel scope made while a virtual loop runs in this thread keeps its child scopes in
:class:`ChildScopes` instead, which iterates in the order they were entered (the order the
children started, on a virtual loop the order they were created).  Scopes on other loops keep
their set.  ``CancelScope`` is anyio-private too: its constructor is checked to be the one
this was written for, and ``tests/test_canaries.py`` pins both the constructor and the four
operations anyio performs on the child scopes (``add``, ``remove``, ``discard``, iterate).

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import inspect
import math
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .._shared._threads import ANYIO_ASYNCIO
from . import _control, _loop
from ._running import RUNNING_HERE

__all__ = ("ChildScopes", "install", "installed", "scopes_ordered")

_FAR: Final = 1e18  # as in _loop.call_later: longer delays take the general path there too
_INT_OR_FLOAT: Final = (int, float)

_state: dict[str, Any] = {"backend": None, "stock": None, "scope_init": None}
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
        module = sys.modules.get(ANYIO_ASYNCIO)
        backend = getattr(module, "AsyncIOBackend", None)
        if not isinstance(backend, type):
            return False  # not imported (or still importing): try again when a loop starts
        # Once per class, not once per process: an anyio imported afresh (a test runner that
        # restores sys.modules, importlib.reload) is a new class to patch.  And a class this
        # module already patched -- from an earlier copy of this module, re-imported the same
        # way -- is recognised by the mark its wrappers carry, and taken as it is.
        if _state["backend"] is backend:
            return _state["stock"] is not None
        _state["backend"] = backend
        _state["stock"] = _state["scope_init"] = None
        _order_scopes(module)
        return _install(module)


def _install(module: Any) -> bool:
    backend = getattr(module, "AsyncIOBackend", None)
    if not isinstance(backend, type):
        return False
    ours = _already_wrapped(backend.__dict__.get("sleep"))
    if ours is not None:
        _state["stock"] = ours
        return True
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
    _backend_sleep._vt_wrapper = True  # type: ignore[attr-defined]
    # anyio-private: replacing the backend's classmethod is the one seam between anyio.sleep
    # and asyncio.sleep (see the module docstring and test_canaries.py).
    setattr(backend, "sleep", classmethod(_backend_sleep))  # noqa: B010 - a class of anyio's
    _state["stock"] = stock
    return True


def _already_wrapped(attribute: object) -> Any:
    """The stock function inside one of this module's wrappers, or None if it is not one."""
    function = getattr(attribute, "__func__", attribute)
    if getattr(function, "_vt_wrapper", False):
        return getattr(function, "__wrapped__", None)
    return None


def installed() -> bool:
    """Whether ``anyio.sleep`` takes the native sleep on virtual loops in this process.

    Read from anyio's class itself (the mark its wrapper carries), so every copy of this
    module answers alike, whichever copy installed it.
    """
    return _already_wrapped(vars(_backend_class() or object).get("sleep")) is not None


def _backend_class() -> type | None:
    backend = getattr(sys.modules.get(ANYIO_ASYNCIO), "AsyncIOBackend", None)
    return backend if isinstance(backend, type) else None


class ChildScopes(dict[Any, None]):
    """An anyio cancel scope's child scopes, iterated in the order they were entered.

    The operations anyio performs on its ``set`` of child scopes, on an insertion-ordered
    dict: ``add``, ``remove`` (``KeyError`` when absent, as a set), ``discard``, iteration,
    ``len`` and truth.
    """

    __slots__ = ()

    def add(self, scope: object) -> None:
        self[scope] = None

    def remove(self, scope: object) -> None:
        del self[scope]

    def discard(self, scope: object) -> None:
        self.pop(scope, None)


def _order_scopes(module: Any) -> bool:
    """Give the cancel scopes made on virtual loops ordered child scopes; True once done."""
    scope_type = getattr(module, "CancelScope", None)
    if not isinstance(scope_type, type) or "_child_scopes" not in getattr(
        scope_type, "__slots__", ()
    ):
        return False
    stock_init = scope_type.__dict__.get("__init__")
    ours = _already_wrapped(stock_init)
    if ours is not None:
        _state["scope_init"] = ours
        return True
    if not inspect.isfunction(stock_init):
        return False
    parameters = [(p.name, p.default) for p in inspect.signature(stock_init).parameters.values()]
    if parameters != [("self", inspect.Parameter.empty), ("deadline", math.inf), ("shield", False)]:
        return False
    here = RUNNING_HERE

    def __init__(self: Any, deadline: float = math.inf, shield: bool = False) -> None:
        stock_init(self, deadline, shield)
        if here.loop is not None:  # a virtual loop runs in this thread
            self._child_scopes = ChildScopes()

    __init__.__doc__ = stock_init.__doc__
    __init__.__qualname__ = stock_init.__qualname__
    __init__.__wrapped__ = stock_init  # type: ignore[attr-defined]
    __init__._vt_wrapper = True  # type: ignore[attr-defined]
    # anyio-private: the one place a scope's collection of child scopes is made (see the
    # module docstring and test_canaries.py).
    setattr(scope_type, "__init__", __init__)  # noqa: B010 - a class of anyio's
    _state["scope_init"] = stock_init
    return True


def scopes_ordered() -> bool:
    """Whether anyio cancel scopes made on virtual loops keep their child scopes in order."""
    scope_type = getattr(sys.modules.get(ANYIO_ASYNCIO), "CancelScope", None)
    return _already_wrapped(vars(scope_type).get("__init__") if scope_type else None) is not None


_loop.on_anyio_backend(install)
