"""Reading trio tasks: what a blocked task waits for, the cancel scopes it sits in, its tree.

The :class:`~virtualtime.trio.VirtualClock` decides when time may jump from what the run's
blocked tasks wait for, and reports a deadlock by naming them.  trio says neither, so this
module reads both from public attributes: a task's chain of awaited coroutines (``Task.coro``,
``cr_await``, ``cr_code``) tells its wait (:func:`classify`: an idle wait, a thread job, a
file descriptor), the objects its frames refer to tell the cancel scopes around it
(:func:`timers_of`, :func:`lift_shields`), and the nurseries tell the task tree
(:func:`task_tree`).  Everything here only reads, except :func:`lift_shields`, which the
deadlock clean-up uses.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import types
import typing
from collections import abc as _abc

import trio
import trio.lowlevel
import trio.testing

from .._shared import _awaits

__all__ = [
    "FD_INSIDE",
    "FD_OUTSIDE",
    "FD_PEER",
    "WAKEUP_TASK",
    "W_CALLBACK",
    "W_IDLE",
    "W_READ",
    "W_THREAD",
    "W_WRITE",
    "Wait",
    "classify",
    "every_task",
    "library_dirs",
    "lift_shields",
    "task_tree",
    "timers_of",
]

WAKEUP_TASK: typing.Final = "<TrioToken.run_sync_soon task>"
"""trio's own task that waits on its wake-up socket: never outside work, never a reason to
keep a deadlocked run alive."""

# What a blocked task waits for, read from its await chain (public ``Task.coro`` and the
# coroutine objects' ``cr_await``/``cr_code``): the public trio functions below mark it.
W_IDLE: typing.Final = 1  # trio.testing.wait_all_tasks_blocked
W_THREAD: typing.Final = 2  # trio.to_thread.run_sync, waiting for its thread
W_CALLBACK: typing.Final = 3  # trio.to_thread.run_sync, running a from_thread call in trio
W_READ: typing.Final = 4  # trio.lowlevel.wait_readable
W_WRITE: typing.Final = 5  # trio.lowlevel.wait_writable

_TO_THREAD_CODE: typing.Final = trio.to_thread.run_sync.__code__
_WAIT_RESCHEDULED_CODE: typing.Final = trio.lowlevel.wait_task_rescheduled.__code__
_W_INSIDE: typing.Final = 0  # a wait on trio alone (a sleep, an Event...): stop looking
_MARKS: typing.Final[dict[types.CodeType, int]] = {
    trio.testing.wait_all_tasks_blocked.__code__: W_IDLE,
    _TO_THREAD_CODE: W_THREAD,
    trio.lowlevel.wait_readable.__code__: W_READ,
    trio.lowlevel.wait_writable.__code__: W_WRITE,
    # Waits that never lead to I/O, a thread or an idle wait: the walk stops there (speed).
    trio.sleep.__code__: _W_INSIDE,
    trio.sleep_until.__code__: _W_INSIDE,
    trio.sleep_forever.__code__: _W_INSIDE,
    trio.Event.wait.__code__: _W_INSIDE,
    trio.lowlevel.ParkingLot.park.__code__: _W_INSIDE,
    trio.MemoryReceiveChannel.receive.__code__: _W_INSIDE,
    trio.MemorySendChannel.send.__code__: _W_INSIDE,
}

# How a file descriptor a task waits on relates to the world outside this run.
FD_INSIDE: typing.Final = 0  # both ends are ours (or a listener): never outside work
FD_OUTSIDE: typing.Final = 1  # a child process, a pipe or socket to another process...
FD_PEER: typing.Final = 2  # a TCP or Unix connection: ask _peers.Connections (unless ours)

_LIBRARY_DIRS: typing.Final = tuple(
    os.path.dirname(path) + os.sep
    for path in (trio.__file__, os.path.dirname(__file__))
    if path is not None
)
"""Frames from these packages are trio's (or our) insides, trimmed from deadlock reports."""


def library_dirs() -> tuple[str, ...]:
    dirs = _LIBRARY_DIRS
    for name in ("anyio", "outcome"):  # their frames too, if they are in use (never imported)
        path = getattr(sys.modules.get(name), "__file__", None)
        if path is not None:
            dirs = (*dirs, os.path.dirname(path) + os.sep)
    return dirs


class Wait(typing.NamedTuple):
    """What one blocked task waits for (see :func:`classify`)."""

    kind: int
    in_thread_job: bool
    fd: object = None
    fd_class: int = FD_INSIDE
    peer: object = None
    timers: frozenset[tuple[int, float]] = frozenset()
    number: int = -1
    """The descriptor number (what :class:`~virtualtime._shared._peers.Connections` is asked)."""
    port: int = -1
    """The local port of a TCP connection (-1: not TCP)."""


_COROUTINE: typing.Final = types.CoroutineType
_GENERATOR: typing.Final = types.GeneratorType


_AGEN_STEPS: typing.Final = _awaits.ASYNC_GEN_STEPS
"""A task blocked inside ``async for`` (httpx's ``Response.aiter_raw``, anyio's stream
iterators) awaits one of these: it refers to its async generator, whose ``ag_await`` goes on."""
_generator_of: typing.Final = _awaits.generator_of


def classify(
    task: trio.lowlevel.Task,
    _coroutine: type = _COROUTINE,
    _generator: type = _GENERATOR,
    _marks: typing.Any = _MARKS.get,
) -> Wait | None:
    """Read what ``task`` (blocked now) waits for from its chain of awaited coroutines.

    None for anything the clock need not know about (a sleep, an Event, a channel...).
    This runs for every task that ran, so it walks the chain without raising anything (the
    keyword defaults are local bindings, for speed).
    """
    coro: typing.Any = task.coro
    in_thread_job = False
    while True:
        kind = type(coro)
        if kind is _coroutine:
            mark = _marks(coro.cr_code)
            if mark is not None:
                if mark == _W_INSIDE:
                    break
                if mark == W_IDLE:
                    return Wait(W_IDLE, in_thread_job)
                if mark != W_THREAD:
                    return Wait(mark, in_thread_job, coro.cr_frame.f_locals.get("fd"))
                inner = coro.cr_await
                if type(inner) is _COROUTINE and inner.cr_code is _WAIT_RESCHEDULED_CODE:
                    return Wait(W_THREAD, True)
                in_thread_job = True  # running a from_thread call: look deeper
            coro = coro.cr_await
        elif kind is _generator:
            coro = coro.gi_yieldfrom
        elif kind in _AGEN_STEPS:
            generator = _generator_of(coro)
            coro = None if generator is None else generator.ag_await
        else:
            break
    return Wait(W_CALLBACK, True) if in_thread_job else None


def lift_shields(task: trio.lowlevel.Task) -> None:
    """Unshield every cancel scope ``task`` is waiting inside (deadlock clean-up only).

    The scopes a suspended coroutine has entered are referenced from its frame (a ``with``
    statement keeps the scope's ``__exit__``); ``gc.get_referents`` finds them, and the
    public ``CancelScope.shield`` setter lifts them.  anyio's scopes wrap trio's and have the
    same attribute.
    """
    coro: typing.Any = task.coro
    scope_types = (trio.CancelScope, *_anyio_scope_types())
    while coro is not None:
        for ref in gc.get_referents(coro):
            scope: typing.Any = getattr(ref, "__self__", ref)
            if isinstance(scope, scope_types) and getattr(scope, "shield", False):
                setattr(scope, "shield", False)  # noqa: B010 - typed as a bare object here
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)


@contextlib.contextmanager
def _sample_manager() -> _abc.Iterator[None]:
    yield


_GENERATOR_MANAGER: typing.Final = type(_sample_manager())
"""contextlib's class for ``@contextmanager`` objects (``trio.fail_after`` is one)."""


def timers_of(task: trio.lowlevel.Task) -> frozenset[tuple[int, float]]:
    """``(id, deadline)`` of every cancel scope ``task`` is waiting inside.

    Used only for tasks waiting on outside work: a new timeout (or a moved deadline) means
    the program set a timer just now.  The scopes are found as in :func:`lift_shields`,
    through ``@contextmanager`` wrappers such as ``fail_after``.
    """
    found: set[tuple[int, float]] = set()
    scope_types = (trio.CancelScope, *_anyio_scope_types())

    def visit(obj: object, depth: int) -> None:
        target: typing.Any = getattr(obj, "__self__", obj) if type(obj) is types.MethodType else obj
        if isinstance(target, scope_types):
            found.add((id(target), getattr(target, "deadline", math.inf)))
            return
        if depth >= 4:
            return
        if isinstance(target, _GENERATOR_MANAGER):
            target = getattr(target, "gen", None)
        if isinstance(target, (types.GeneratorType, types.AsyncGeneratorType)):
            for ref in gc.get_referents(target):
                visit(ref, depth + 1)

    coro: typing.Any = task.coro
    while coro is not None:
        if type(coro) in _AGEN_STEPS:
            # Inside ``async for``: the generator's own scopes count too -- a library's read
            # timeout set afresh for each chunk (httpcore) is a new timer.
            coro = _generator_of(coro)
            if coro is None:
                break
        for ref in gc.get_referents(coro):
            visit(ref, 0)
        coro = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )
    return frozenset(found)


def _anyio_scope_types() -> tuple[type, ...]:
    anyio = sys.modules.get("anyio")
    scope = getattr(anyio, "CancelScope", None)
    return (scope,) if isinstance(scope, type) else ()


def _task_name(task: trio.lowlevel.Task) -> str:
    return task.name


def _all_tasks() -> list[trio.lowlevel.Task]:
    return task_tree(trio.lowlevel.current_root_task())


def every_task(root: trio.lowlevel.Task | None) -> list[trio.lowlevel.Task]:
    """``root`` and its descendants, in no particular order (:func:`task_tree`, unsorted)."""
    if root is None:
        return []
    tasks = [root]
    for task in tasks:  # grows as it goes: each task's children join the end
        for nursery in task.child_nurseries:
            tasks.extend(nursery.child_tasks)
    return tasks


def task_tree(root: trio.lowlevel.Task | None) -> list[trio.lowlevel.Task]:
    """``root`` and its descendants, depth first, siblings in name order (a stable report)."""
    if root is None:
        return []
    tasks: list[trio.lowlevel.Task] = []
    stack = [root]
    while stack:
        task = stack.pop()
        tasks.append(task)
        for nursery in reversed(task.child_nurseries):
            stack.extend(sorted(nursery.child_tasks, key=_task_name, reverse=True))
    return tasks
