"""What a thread working for the loop is doing: the outside-work model's look at thread jobs.

Helpers of :mod:`virtualtime._engine._outside` that read another thread's state without
stopping it: whose future a concurrent future is chained to (:func:`completed_by`,
:func:`wrapped_into`), which future a thread is blocked on in ``Future.result()``, which
executor work item a pool thread is running, and whether a process pool still owes a future.
They decide, for example, that a ``run_in_executor`` job blocked on
``run_coroutine_threadsafe(...).result()`` waits for *this* loop and so must not hold time.
Each reads a private detail of ``concurrent.futures`` or asyncio, said where it is read;
``tests/test_canaries.py`` and ``tests/test_boundary_threads.py`` pin them.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from .._shared._threads import threads as _threads

__all__ = ["completed_by", "wrapped_into"]

_modules: Final = sys.modules
_FUTURES_BASE: Final = os.path.join("concurrent", "futures", "_base.py")
_FUTURES_THREAD: Final = os.path.join("concurrent", "futures", "thread.py")

# Callbacks by which a finished thread job hands its result to the loop: asyncio's future
# chaining (_set_state, _call_set_state) and anyio's worker threads (_report_result).
_DELIVERIES: Final = frozenset({"_set_state", "_call_set_state", "_report_result"})


def _chain_callbacks(future: concurrent.futures.Future[Any]) -> list[Callable[..., Any]]:
    # concurrent.futures.Future keeps its callbacks in _done_callbacks (every CPython).
    return list(getattr(future, "_done_callbacks", ()))


def _closure_refers_to(callback: Callable[..., Any], obj: object) -> bool:
    cells = getattr(callback, "__closure__", None) or ()
    for cell in cells:
        try:
            if cell.cell_contents is obj:
                return True
        except ValueError:  # an empty cell
            continue
    return False


def completed_by(future: concurrent.futures.Future[Any], loop: object) -> bool:
    """Will ``loop`` complete this concurrent future?

    ``run_coroutine_threadsafe`` (and anyio's ``from_thread.run``, which uses it) chains a
    concurrent future to a task in the loop; asyncio's chaining callback on the concurrent
    side (``_call_check_cancel``) holds the source loop in its closure.
    """
    return any(
        getattr(cb, "__name__", "") == "_call_check_cancel" and _closure_refers_to(cb, loop)
        for cb in _chain_callbacks(future)
    )


def wrapped_into(future: concurrent.futures.Future[Any], loop: object) -> bool:
    """Was this concurrent future wrapped into ``loop`` (``asyncio.wrap_future``)?"""
    return any(
        getattr(cb, "__name__", "") == "_call_set_state" and _closure_refers_to(cb, loop)
        for cb in _chain_callbacks(future)
    )


def _in_process_pool(future: concurrent.futures.Future[Any]) -> bool:
    """Is ``future`` the future of a job a ``ProcessPoolExecutor`` has not finished yet?

    concurrent.futures-private: a process pool's manager thread (``_ExecutorManagerThread``)
    keeps the pool's unfinished work items, each with its ``future``, in
    ``pending_work_items``.  Looked at only when a job thread waits on a future nobody else
    claims; a canary test pins the names.
    """
    process = _modules.get("concurrent.futures.process")
    manager = getattr(process, "_ExecutorManagerThread", None)
    if manager is None:
        return False
    for thread in _threads():
        if isinstance(thread, manager):
            items = getattr(thread, "pending_work_items", None) or {}
            if any(getattr(item, "future", None) is future for item in list(items.values())):
                return True
    return False


def _frame_self(frame: FrameType) -> Any:
    return frame.f_locals.get("self")


def _other_threads_frames() -> dict[int, FrameType]:
    """The frame each other thread is running now.

    This thread's own frame is left out: kept in a local of the frame it is, it would make a
    reference cycle, and every thread's frame of that moment -- with its locals -- would live
    on until the collector ran (a multiprocessing feeder's pickled buffer then fails to close
    at collection, on whatever runs then).
    """
    frames = sys._current_frames()
    del frames[threading.get_ident()]
    return frames


def _blocked_on(frame: FrameType | None) -> concurrent.futures.Future[Any] | None:
    """The future a thread is blocked on in ``Future.result()``, if it is."""
    depth = 0
    while frame is not None and depth < 8:
        code = frame.f_code
        if code.co_name == "result" and code.co_filename.endswith(_FUTURES_BASE):
            future = _frame_self(frame)
            return future if isinstance(future, concurrent.futures.Future) else None
        frame = frame.f_back
        depth += 1
    return None


def _work_item_future(frame: FrameType | None) -> concurrent.futures.Future[Any] | None:
    """The future of the executor work item a pool thread is running, if it is running one."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "run" and code.co_filename.endswith(_FUTURES_THREAD):
            # _WorkItem.run (3.14+ also has a WorkerContext.run, which holds no future).
            future = getattr(_frame_self(frame), "future", None)
            if isinstance(future, concurrent.futures.Future):
                return future
        frame = frame.f_back
    return None
