"""Outside work the loop cannot see through its own descriptors: libraries with clocks of their own.

Some libraries do their I/O and keep their deadlines outside the event loop.  grpc.aio is the
case in point: its calls run in gRPC's C core, which talks to the peer on sockets the loop
never sees and keeps each call's deadline on the real clock; a poller thread of gRPC's own
waits for the core's events and tells the loop through a socketpair (a reader the loop does
see) that an operation has finished.  To the loop, a call in flight looks like an idle
socketpair -- nothing owed -- so without this module virtual time would jump to the next timer
at once, and a task's ``asyncio.sleep(1000)`` would end long before a 0.3 s answer arrived.

So a grpc.aio *client* call started from the loop and not finished yet is outside work (see
:mod:`._outside`): while one is in flight the clock stands still and a timer fires only after
as much real time as its delay.  That holds for every kind of call -- unary-unary, unary-stream,
stream-unary, stream-stream -- until the call has its final status: a stream kept open keeps
the loop at real pace for as long as it is open.

How a call in flight is recognised
----------------------------------
grpc.aio runs each client call through tasks of the loop that made it: ``UnaryUnaryCall``
awaits its answer in a task (``_invoke``), ``StreamUnaryCall`` in another (``_conduct_rpc``),
and the streaming calls keep a task that waits for the final status from the start
(``_AioCall._handle_status_once_received``, in gRPC's compiled part) until the call ends.
These names are grpc-private; they are read, never called, and a canary test
(``tests/test_boundary_grpc.py``) pins them, with every kind of call.  A call counts while a
task of this loop runs one of those coroutines.

What it costs
-------------
This module never imports grpc: a program that has not imported ``grpc.aio`` pays one dict
lookup per idle round.  Once it has, a loop that gRPC has not bound to (no reader of gRPC's
poller among its descriptors) pays a look at its registered descriptors; a loop that gRPC has
bound to pays a check of the call tasks it found last time, and a pass over the loop's tasks
only when a task has been made since (any task, with a task factory set).

Servers
-------
A grpc.aio *server* running in the loop is not outside work: waiting for the next request owes
the loop nothing (as a listening socket does not), and a request's handler runs in the loop,
in virtual time, like any other task.  gRPC's socketpair keeps such a loop alive, waiting in
real time for clients, instead of being reported as a deadlock.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE
from types import CodeType
from typing import Any, Final

from .._shared._awaits import ASYNC_GEN_STEPS, generator_of

__all__ = ["calls_in_flight"]

_modules: Final = sys.modules
_CALLS: Final = "grpc.aio._call"
"""The grpc.aio module of the client call classes: imported with ``grpc.aio``."""
_CORE: Final = "grpc._cython.cygrpc"
"""gRPC's compiled part: the poller and ``_AioCall``."""
_CHAIN_MAX: Final = 32
"""Most links of a task's await chain looked at."""


class _Watch:
    """What :func:`calls_in_flight` remembers about one loop between idle rounds."""

    __slots__ = ("calls", "made", "reader_fd")

    def __init__(self) -> None:
        self.calls: list[asyncio.Task[Any]] = []
        """The call tasks found on the last pass (checked first: a call usually outlasts
        many rounds)."""
        self.made: str | None = None
        """The loop's task counter at the last pass (see :func:`_tasks_made`)."""
        self.reader_fd = -1
        """The descriptor of gRPC's poller reader on this loop, once found."""


_watches: Final[weakref.WeakKeyDictionary[object, _Watch]] = weakref.WeakKeyDictionary()
_codes: frozenset[CodeType] = frozenset()
_codes_from: object = None  # the grpc.aio._call module _codes were read from


def calls_in_flight(loop: object) -> bool:
    """Is a grpc.aio client call started from ``loop`` still in flight?

    Asked by the outside-work model on the loop's idle rounds; true from the moment the call's
    task has started until the call has its final status (its answer, an error, a deadline, a
    cancellation).  Always false while ``grpc.aio`` is not imported.
    """
    calls_module = _modules.get(_CALLS)
    if calls_module is None:
        return False
    watch = _watches.get(loop)
    if watch is None:
        watch = _watches[loop] = _Watch()
    codes = _call_codes(calls_module)
    for task in watch.calls:
        if not task.done() and _in_a_call(task, codes):
            return True
    if not isinstance(loop, asyncio.AbstractEventLoop) or not _bound(loop, watch):
        watch.calls = []
        return False
    made = _tasks_made(loop)
    if made is not None and made == watch.made and not watch.calls:
        # No task made since a pass that found no call: a call starts in tasks of its own.
        return False
    watch.made = made
    # A pass over every task: also after a call was seen, since a task may read what is left
    # of a stream after the call's own tasks have ended (each read still comes from gRPC's
    # poller thread).
    watch.calls = [task for task in asyncio.all_tasks(loop) if _in_a_call(task, codes)]
    return bool(watch.calls)


def _in_a_call(task: asyncio.Task[Any], codes: frozenset[CodeType]) -> bool:
    """Does ``task`` run a call's coroutine, or await one (down its chain of awaits)?

    The chain: a coroutine's ``cr_await``; an async generator's ``ag_await``, reached from the
    step awaitable that ``async for`` awaits (see :mod:`virtualtime._shared._awaits`).
    """
    link: object = task.get_coro()
    for _ in range(_CHAIN_MAX):
        if link is None:
            return False
        code = getattr(link, "cr_code", None) or getattr(link, "ag_code", None)
        if code in codes:
            return True
        following = getattr(link, "cr_await", None)
        if following is None:
            following = getattr(link, "ag_await", None)
        if following is None and type(link) in ASYNC_GEN_STEPS:
            following = generator_of(link)
        link = following
    return False


def _tasks_made(loop: asyncio.AbstractEventLoop) -> str | None:
    """The virtual loop's count of tasks made so far, or None where it cannot tell.

    A virtual loop numbers the tasks ``create_task`` makes, with one ``itertools.count``
    (``_vt_task_number``, its bound ``__next__``): its repr shows the next number without
    taking it.  Tasks made by a task factory (eager tasks too) are not numbered, so with a
    factory set every pass looks at the tasks.
    """
    counter = getattr(getattr(loop, "_vt_task_number", None), "__self__", None)
    if counter is None or loop.get_task_factory() is not None:
        return None
    return repr(counter)


def _call_codes(calls_module: object) -> frozenset[CodeType]:
    """The code of every coroutine that runs a grpc.aio client call as a task of its own.

    grpc-private (read only, see the module docstring): the coroutine methods of the call
    classes in ``grpc.aio._call`` (a call's ``_invoke``, ``_conduct_rpc``,
    ``_send_unary_request``, ``_prepare_rpc``, the request iterator's consumer, and any of its
    public coroutines a program runs as a task), and the compiled ``_AioCall``'s
    ``_handle_status_once_received``, which a streaming call's status waits in.
    """
    global _codes, _codes_from
    if _codes_from is calls_module:
        return _codes
    codes: set[CodeType] = set()
    for cls in vars(calls_module).values():
        if isinstance(cls, type) and cls.__module__ == _CALLS:
            for member in vars(cls).values():
                code = getattr(member, "__code__", None)
                if isinstance(code, CodeType) and code.co_flags & (
                    CO_COROUTINE | CO_ASYNC_GENERATOR
                ):
                    codes.add(code)
    core_call = getattr(_modules.get(_CORE), "_AioCall", None)
    status = getattr(getattr(core_call, "_handle_status_once_received", None), "__code__", None)
    if isinstance(status, CodeType):
        codes.add(status)
    _codes, _codes_from = frozenset(codes), calls_module
    return _codes


def _bound(loop: asyncio.AbstractEventLoop, watch: _Watch) -> bool:
    """Has gRPC bound its poller to ``loop`` (a reader for its socketpair)?

    gRPC binds every loop that makes a channel, and a call can only be started from such a
    loop; the check spares other loops the pass over their tasks.  A loop that is not a
    virtual loop (no counting selector) is not checked.
    """
    selector = getattr(loop, "_vt_selector", None)
    if selector is None:
        return True
    keys = selector.get_map()
    if watch.reader_fd >= 0:
        key = keys.get(watch.reader_fd)
        if key is not None and _is_poller_reader(key.data):
            return True
    for key in list(keys.values()):
        if _is_poller_reader(key.data):
            watch.reader_fd = key.fd
            return True
    watch.reader_fd = -1
    return False


def _is_poller_reader(data: object) -> bool:
    """Is this selector entry's reader gRPC's poller, waking the loop for finished operations?

    asyncio-private: a selector loop registers ``(reader handle, writer handle)`` as the data of
    each key, and a handle keeps its callback in ``_callback`` (canary: tests/test_canaries.py).
    grpc-private: the poller's reader is ``functools.partial(PollerCompletionQueue.
    _handle_events, loop)`` (canary: tests/test_boundary_grpc.py).
    """
    if not isinstance(data, tuple) or not data:
        return False
    callback = getattr(data[0], "_callback", None)
    owner = getattr(getattr(callback, "func", None), "__self__", None)
    poller = getattr(_modules.get(_CORE), "PollerCompletionQueue", None)
    return isinstance(poller, type) and isinstance(owner, poller)
