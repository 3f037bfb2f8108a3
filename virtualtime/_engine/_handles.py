"""The loop's handles and tasks: lean timer and ready handles, numbered tasks, the wakers.

What the virtual loop puts in its timer heap and its ready queue, and the tasks it makes:
:class:`_Timer` and :class:`_Soon` (stock ``TimerHandle``/``Handle`` objects built without the
stock constructors' per-call debug checks), :class:`Task` (a stock task whose hash is its
creation number, so sets of tasks iterate in one order in every run), and the *wakers* -- the
timer callbacks that do nothing but resolve a future (:func:`set_result_unless_cancelled` and
asyncio's own), which the loop recognises and resolves in timer order.  Read it to see what
one timer or one wake-up costs; the loop that uses them is :mod:`virtualtime._engine._loop`.

Like the loop's other modules, this one touches private parts of asyncio; each touch is marked
``# asyncio-private:`` (or said so in a docstring) with the reason, and ``tests/test_canaries.py``
pins each assumption.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

__all__ = [
    "Task",
    "set_result_unless_cancelled",
]

_T = TypeVar("_T")

_InvalidStateError: Final = asyncio.InvalidStateError


class _Timer(asyncio.TimerHandle):
    """A TimerHandle built without the stock constructor's per-call debug checks.

    asyncio-private: the fields below are exactly those of ``Handle`` and ``TimerHandle``
    (unchanged from 3.11 to 3.15).  Setting them directly saves a ``get_debug()`` call and a
    ``super()`` chain on every timer, the single hottest allocation of a virtual-time program.
    Debug-mode loops use the stock constructor, which records the source traceback.
    """

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        self._context = contextvars.copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None
        self._when = when
        self._scheduled = True

    def cancel(self) -> None:
        # The stock TimerHandle.cancel() calls back into the loop and then Handle.cancel(),
        # which asks get_debug(); a non-debug timer needs only this.
        if not self._cancelled:
            if self._scheduled:
                self._loop._vt_timers.cancelled += 1  # type: ignore[attr-defined]
            self._cancelled = True
            self._callback = None  # type: ignore[assignment]
            self._args = None  # type: ignore[assignment]


class _Soon(asyncio.Handle):
    """A ready-queue Handle built without the stock constructor's per-call debug check.

    asyncio-private: the fields are exactly those of ``Handle`` (unchanged from 3.11 to 3.15),
    as for :class:`_Timer`.  Every task wake-up goes through ``call_soon`` (a future schedules
    its waiter's callback with it), so the stock ``get_debug()`` call and the
    ``call_soon`` -> ``_call_soon`` -> ``Handle.__init__`` chain cost on every wake-up.  The
    fields are therefore set where the handle is made -- inline in
    :meth:`VirtualEventLoop.call_soon`, and in C by the compiled core.  ``_Soon()`` makes an
    empty handle: its constructor is ``object.__init__``, which runs in C, so the call costs
    less than ``object.__new__(_Soon)`` and far less than the stock ``Handle.__init__``.
    Debug-mode loops use the stock path, which records the source traceback.
    """

    __slots__ = ()
    if not TYPE_CHECKING:  # (type checkers keep reading Handle's signature)
        __init__ = object.__init__  # see above: the maker sets the fields
    # The stock fields the loop sets (typeshed does not declare these private ones).
    _context: contextvars.Context
    _loop: asyncio.AbstractEventLoop
    _callback: Callable[..., object]
    _repr: str | None
    _source_traceback: Any


class Task(asyncio.Task[_T]):
    """A task of the virtual loop: a stock asyncio task whose hash is its creation number.

    ``loop.create_task`` (and so ``asyncio.create_task``, ``TaskGroup``, ``gather`` of
    coroutines, anyio's task groups, the task that runs ``virtualtime.run``'s coroutine) makes
    these unless a task factory is set.  Why: code that keeps tasks in a ``set`` iterates them
    in the order of their hashes, and a stock task hashes by its memory address -- so a
    cancelled ``TaskGroup`` (asyncio's and anyio's both iterate a set) cancelled its children
    in an order that changed with the address layout of the process, the hash seed and
    everything allocated before.  Numbered tasks make that order, and every other iteration
    over a set of tasks (``asyncio.wait``'s ``done`` and ``pending``, ``all_tasks()``), a
    function of the program alone: every run is the same run.

    Everything else is the stock task (the C one where CPython has it): its constructor,
    stepping, cancellation, ``current_task()``, eager start, its repr (the class is named
    ``Task``).  ``isinstance(t, asyncio.Task)`` holds; ``type(t) is asyncio.Task`` does not.
    Equality stays identity.  A task factory you set with ``loop.set_task_factory`` is used
    as on any loop, and its tasks hash as they always do; so does a task class swapped in
    for ``asyncio.tasks.Task`` (CPython's tests of the pure-Python tasks do that).
    """

    __slots__ = ("_vt_order",)

    _vt_order: int

    def __hash__(self) -> int:
        return self._vt_order


def set_result_unless_cancelled(fut: asyncio.Future[Any], result: Any) -> None:
    """Resolve ``fut`` unless it is already done: the timer callback the loop recognises.

    A ``call_later``/``call_at`` timer whose callback is this function (or asyncio's own
    ``futures._set_result_unless_cancelled``, which ``asyncio.sleep`` schedules) is resolved by
    the loop in timer order, without a trip through the ready queue.
    """
    if not fut.done():
        try:  # noqa: SIM105 - contextlib.suppress costs a context manager per wake-up
            fut.set_result(result)
        except _InvalidStateError:  # cancelled in between, by a signal handler (Ctrl-C)
            pass


# Timer callbacks that do nothing but resolve a future (``asyncio.sleep``'s and our own).
# asyncio-private: futures._set_result_unless_cancelled is what asyncio.sleep schedules.
_WAKERS: Final = (
    asyncio.futures._set_result_unless_cancelled,  # type: ignore[attr-defined]
    set_result_unless_cancelled,
)
_SLEEP_WAKER: Final = _WAKERS[0]
_OUR_WAKER: Final = _WAKERS[1]


_WAKE_CONTEXT: Final = contextvars.Context()
"""The context every waker timer (``asyncio.sleep``'s) gets when it is not given one.

A timer handle copies the current context so that its callback runs in it; a waker's callback
only resolves its future, which schedules each of the future's callbacks in *their* own
contexts, so it reads and sets no variable.  The loop resolves the future directly, and even
when it does run the handle (debug mode) nothing can observe the context.  One shared, empty
context instead of a copy per sleep saves a context object (64 bytes, and its allocation) for
every pending ``asyncio.sleep``.
"""
