"""Canaries: one named test per private asyncio / anyio / threading assumption of the engine.

The engine's loop modules (``virtualtime/_engine/_loop.py`` and its mixins, ``_handles.py``,
``_outside.py`` and the modules it reads the world with, ``_timers.py``,
``_anyio_sleep.py``) touch a few private parts of asyncio, concurrent.futures, threading and
anyio, each with a comment saying why.  If a new Python (or anyio) changes one of them, the
matching test here fails first and says which symbol moved and where virtualtime relies on
it -- instead of traces silently losing spans or virtual timeouts silently overtaking worker
threads.

Each canary is small and independent: fix the named place in the engine, then the canary.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.base_subprocess
import asyncio.futures
import asyncio.sslproto
import concurrent.futures
import contextvars
import inspect
import os
import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest

import virtualtime

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def changed(what: str, where: str) -> str:
    """The canary's failure message: which symbol changed, and where virtualtime uses it."""
    return f"Python {PY} changed {what}; see {where}"


# ------------------------------------------------------------------ asyncio handles


def test_canary_handle_and_timerhandle_slots_are_the_ones_Timer_sets() -> None:
    # _handles.py, class _Timer: builds a TimerHandle by setting its slots directly.
    handle_slots = set(asyncio.Handle.__slots__)
    timer_slots = set(asyncio.TimerHandle.__slots__)
    expected_handle = {
        "_callback",
        "_args",
        "_cancelled",
        "_loop",
        "_source_traceback",
        "_repr",
        "__weakref__",
        "_context",
    }
    assert handle_slots == expected_handle, changed(
        f"asyncio.Handle.__slots__ (now {sorted(handle_slots)})",
        "virtualtime/_engine/_handles.py (the _Timer class)",
    )
    assert timer_slots == {"_scheduled", "_when"}, changed(
        f"asyncio.TimerHandle.__slots__ (now {sorted(timer_slots)})",
        "virtualtime/_engine/_handles.py (the _Timer class)",
    )


def test_canary_a_stock_timerhandle_has_the_field_values_Timer_sets() -> None:
    # _handles.py, class _Timer: the values it gives each slot must be the stock constructor's.
    loop = asyncio.new_event_loop()
    try:
        context = contextvars.copy_context()
        stock: Any = asyncio.TimerHandle(5.0, print, (1,), loop, context)
        values = {
            "_when": stock._when,
            "_callback": stock._callback,
            "_args": stock._args,
            "_cancelled": stock._cancelled,
            "_loop": stock._loop,
            "_repr": stock._repr,
            "_context": stock._context,
        }
    finally:
        loop.close()
    assert values == {
        "_when": 5.0,
        "_callback": print,
        "_args": (1,),
        "_cancelled": False,
        "_loop": loop,
        "_repr": None,
        "_context": context,
    }, changed(
        "what asyncio.TimerHandle.__init__ stores", "virtualtime/_engine/_handles.py (_Timer)"
    )
    assert stock._scheduled is False, changed(
        "TimerHandle._scheduled (the loop sets it when it queues the timer)",
        "virtualtime/_engine/_handles.py (_Timer) and virtualtime/_engine/_timers.py",
    )


def test_canary_asyncio_sleep_wakes_through_set_result_unless_cancelled() -> None:
    # _handles.py, _WAKERS: the direct-wake path recognises asyncio.sleep's timer callback by
    # identity.  If asyncio.sleep schedules something else, sleeps would lose the fast path
    # and trace spans.
    waker = getattr(asyncio.futures, "_set_result_unless_cancelled", None)
    assert callable(waker), changed(
        "asyncio.futures._set_result_unless_cancelled (gone)",
        "virtualtime/_engine/_handles.py (_WAKERS)",
    )
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(asyncio.sleep(10))
        loop.call_soon(loop.stop)
        loop.run_forever()
        scheduled = [h._callback for h in loop._scheduled]  # type: ignore[attr-defined]
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    finally:
        loop.close()
    assert scheduled == [waker], changed(
        f"the callback asyncio.sleep schedules (now {scheduled!r})",
        "virtualtime/_engine/_handles.py (_WAKERS)",
    )


def test_canary_timerhandle_cancel_reports_to_timer_handle_cancelled() -> None:
    # _loop.py, _timer_handle_cancelled: the loop counts cancelled timers through this hook.
    source = inspect.getsource(asyncio.TimerHandle.cancel)
    assert "_timer_handle_cancelled" in source, changed(
        "TimerHandle.cancel (no longer calls loop._timer_handle_cancelled)",
        "virtualtime/_engine/_loop.py (VirtualEventLoop._timer_handle_cancelled)",
    )


# ------------------------------------------------------------------ the stock loop's state


LOOP_PRIVATE = (
    "_ready",
    "_stopping",
    "_debug",
    "_default_executor",
    "_current_handle",
    "_closed",
    "_clock_resolution",
    "_ssock",
)
LOOP_PRIVATE_METHODS = (
    "_check_closed",
    "_check_thread",
    "_check_callback",
    "_check_default_executor",
    "_check_running",
    "_process_events",
    "_run_once",
    "_timer_handle_cancelled",
)


@pytest.mark.parametrize("name", LOOP_PRIVATE)
def test_canary_the_stock_loop_has_the_state_the_virtual_loop_reads(name: str) -> None:
    # _fields.py (its TYPE_CHECKING block) and the loop modules' "asyncio-private" comments.
    loop = asyncio.SelectorEventLoop()
    try:
        assert hasattr(loop, name), changed(
            f"BaseEventLoop.{name} (gone)", "virtualtime/_engine/_loop.py (VirtualEventLoop)"
        )
    finally:
        loop.close()


@pytest.mark.parametrize("name", LOOP_PRIVATE_METHODS)
def test_canary_the_stock_loop_has_the_methods_the_virtual_loop_calls(name: str) -> None:
    assert callable(getattr(asyncio.base_events.BaseEventLoop, name, None)) or callable(
        getattr(asyncio.SelectorEventLoop, name, None)
    ), changed(f"BaseEventLoop.{name} (gone)", "virtualtime/_engine/_loop.py (VirtualEventLoop)")


def test_canary_the_ready_queue_is_a_deque_of_handles() -> None:
    # _cycle.py, VirtualEventLoop._run_once: pops handles off _ready like the stock one (and
    # the kit's sleep, in sim/_sleep.py and _cwake.c, asks whether anything is ready).
    loop = asyncio.SelectorEventLoop()
    try:
        loop.call_soon(print)
        ready = loop._ready  # type: ignore[attr-defined]
        kinds = [type(h) for h in ready]
    finally:
        loop.close()
    assert kinds == [asyncio.Handle], changed(
        f"BaseEventLoop._ready (now holds {kinds})", "virtualtime/_engine/_cycle.py (_run_once)"
    )


@pytest.mark.skipif(os.name != "posix", reason="Unix loops only")
def test_canary_unix_loops_keep_signal_handlers_in_a_dict() -> None:
    # _loop.py, VirtualEventLoop.__init__: signals arrive through the self-pipe.
    loop = asyncio.SelectorEventLoop()
    try:
        handlers = getattr(loop, "_signal_handlers", None)
    finally:
        loop.close()
    assert isinstance(handlers, dict), changed(
        "_UnixSelectorEventLoop._signal_handlers", "virtualtime/_engine/_loop.py (VirtualEventLoop)"
    )


def test_canary_slow_callbacks_are_logged_through_base_events() -> None:
    # _cycle.py, _run_once's slow-callback report: base_events.logger and _format_handle.
    assert hasattr(asyncio.base_events, "logger"), changed(
        "asyncio.base_events.logger", "virtualtime/_engine/_cycle.py (_run_once, slow callbacks)"
    )
    assert callable(getattr(asyncio.base_events, "_format_handle", None)), changed(
        "asyncio.base_events._format_handle",
        "virtualtime/_engine/_cycle.py (_run_once, slow callbacks)",
    )


def test_canary_get_running_loop_has_a_fast_private_twin() -> None:
    # _loop.py, running_virtual_loop, and _driving.py, VirtualEventLoop._vt_outside.
    from asyncio import events

    assert callable(getattr(events, "_get_running_loop", None)), changed(
        "asyncio.events._get_running_loop", "virtualtime/_engine/_loop.py (running_virtual_loop)"
    )


def test_canary_a_task_blocked_on_a_future_names_it_in_fut_waiter() -> None:
    # _reports.py, _describe_task: the deadlock report says what a task awaits.
    async def main() -> object:
        future = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(asyncio.wait_for(future, 10))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        waiter = getattr(task, "_fut_waiter", "missing")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return waiter

    waiter = asyncio.run(main())
    assert waiter != "missing", changed(
        "Task._fut_waiter", "virtualtime/_engine/_reports.py (_describe_task)"
    )


# ------------------------------------------------------------------ threads and futures


def test_canary_future_chaining_callbacks_have_these_names() -> None:
    # _thread_jobs.py, completed_by / wrapped_into / _DELIVERIES: chained futures are recognised
    # by the names of asyncio's chaining callbacks.
    from virtualtime._engine._thread_jobs import completed_by, wrapped_into

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        release = threading.Event()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            job = pool.submit(release.wait, 5)
            wrapped = asyncio.wrap_future(job)
            into = wrapped_into(job, loop)
            release.set()
            await wrapped
        gate = asyncio.Event()
        waiting = asyncio.run_coroutine_threadsafe(gate.wait(), loop)
        await asyncio.sleep(0)  # the loop runs the chaining callback ...
        await asyncio.sleep(0)  # ... and starts the task
        by = completed_by(waiting, loop)
        gate.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return into, by

    assert virtualtime.run(main()) == (True, True), changed(
        "asyncio.futures._chain_future's callbacks (_call_set_state / _call_check_cancel)",
        "virtualtime/_engine/_thread_jobs.py (completed_by, wrapped_into)",
    )
    chain: Any = asyncio.futures
    assert "_set_state" in inspect.getsource(chain._chain_future), changed(
        "asyncio.futures._chain_future (_set_state)",
        "virtualtime/_engine/_thread_jobs.py (_DELIVERIES)",
    )


def test_canary_concurrent_futures_keep_done_callbacks_in_a_list() -> None:
    # _thread_jobs.py, _chain_callbacks.
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    future.add_done_callback(print)
    assert getattr(future, "_done_callbacks", None) == [print], changed(
        "concurrent.futures.Future._done_callbacks",
        "virtualtime/_engine/_thread_jobs.py (_chain_callbacks)",
    )


def test_canary_blocked_result_and_work_item_frames_are_where_the_model_looks() -> None:
    # _thread_jobs.py, _blocked_on / _work_item_future: frames named "result" in
    # concurrent/futures/_base.py and "run" in concurrent/futures/thread.py.
    from virtualtime._engine._thread_jobs import _FUTURES_BASE, _FUTURES_THREAD

    base = concurrent.futures._base.Future.result.__code__
    assert (base.co_name, base.co_filename.endswith(_FUTURES_BASE)) == ("result", True), changed(
        "concurrent.futures Future.result's location", "virtualtime/_engine/_thread_jobs.py"
    )
    run = concurrent.futures.thread._WorkItem.run.__code__
    assert (run.co_name, run.co_filename.endswith(_FUTURES_THREAD)) == ("run", True), changed(
        "concurrent.futures.thread._WorkItem.run",
        "virtualtime/_engine/_thread_jobs.py (_work_item_future)",
    )
    assert "future" in inspect.getsource(concurrent.futures.thread._WorkItem.__init__), changed(
        "_WorkItem.future", "virtualtime/_engine/_thread_jobs.py (_work_item_future)"
    )


def test_canary_threading_keeps_its_running_threads_in_a_table() -> None:
    # _shared/_threads.py, thread_table_size: threads are counted through threading._active.
    from virtualtime._shared._threads import thread_table_size

    limbo = len(threading._limbo)  # type: ignore[attr-defined]
    assert thread_table_size() == threading.active_count() - limbo, changed(
        "threading._active", "virtualtime/_shared/_threads.py (thread_table_size)"
    )


def test_canary_a_pool_worker_thread_is_known_by_its_target() -> None:
    # _shared/_threads.py, worker_threads: a thread pool's worker runs a function named
    # _worker (Thread._target), and only such threads (and anyio's) are inspected for jobs.
    from virtualtime._shared._threads import worker_threads

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()
        workers = [t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")]
        assert workers, "no pool thread seen"
        assert all(t in worker_threads() for t in workers), changed(
            "Thread._target of concurrent.futures workers (no longer a function named _worker)",
            "virtualtime/_shared/_threads.py (worker_threads)",
        )
    assert threading.main_thread() not in worker_threads()


def test_canary_the_threads_other_rules_cover_are_known_by_their_targets() -> None:
    # _shared/_threads.py, NewThreads: asyncio's waitpid threads and trio's cached workers are
    # not "new threads" (children and to_thread jobs cover them); they are known by the
    # __qualname__ of their target.
    import asyncio.unix_events

    import trio

    from virtualtime._shared._threads import _COVERED_TARGETS

    watchers = [
        getattr(asyncio.unix_events, name)
        for name in ("ThreadedChildWatcher", "_ThreadedChildWatcher")
        if hasattr(asyncio.unix_events, name)
    ]
    assert watchers, changed(
        "asyncio.unix_events.ThreadedChildWatcher", "virtualtime/_shared/_threads.py"
    )
    for watcher in watchers:
        assert watcher._do_waitpid.__qualname__ in _COVERED_TARGETS, changed(
            f"{watcher.__name__}._do_waitpid", "virtualtime/_shared/_threads.py (_COVERED_TARGETS)"
        )

    def target_of_this_thread() -> str:
        target = getattr(threading.current_thread(), "_target", None)
        return str(getattr(target, "__qualname__", ""))

    async def main() -> str:
        return await trio.to_thread.run_sync(target_of_this_thread)

    assert trio.run(main) in _COVERED_TARGETS, changed(
        "trio's thread cache (WorkerThread._work)",
        "virtualtime/_shared/_threads.py (_COVERED_TARGETS)",
    )


# ------------------------------------------------------------------ transports, subprocesses


def test_canary_transports_tls_and_stream_readers_expose_what_the_model_reads() -> None:
    # _outside.py, _sockets.py, _children.py: loop._transports, SSLProtocolState names,
    # StreamReader._waiter.
    states = {s.name for s in asyncio.sslproto.SSLProtocolState}
    assert {"DO_HANDSHAKE", "FLUSHING", "SHUTDOWN"} <= states, changed(
        f"asyncio.sslproto.SSLProtocolState (now {sorted(states)})",
        "virtualtime/_engine/_outside.py (_PENDING_TLS)",
    )
    loop = virtualtime.new_event_loop()
    try:
        transports = loop._transports  # type: ignore[attr-defined]
    finally:
        loop.close()
    assert hasattr(transports, "items"), changed(
        "BaseSelectorEventLoop._transports",
        "virtualtime/_engine/_sockets.py (our_addresses) and _outside.py (_tls_pending)",
    )
    assert "self._waiter = None" in inspect.getsource(asyncio.StreamReader.__init__), changed(
        "asyncio.StreamReader._waiter", "virtualtime/_engine/_children.py (_child_awaited)"
    )


def test_canary_subprocess_transports_keep_exit_waiters() -> None:
    # _children.py, _child_awaited: proc.wait() futures live in _exit_waiters.
    source = inspect.getsource(asyncio.base_subprocess.BaseSubprocessTransport)
    assert "_exit_waiters" in source, changed(
        "BaseSubprocessTransport._exit_waiters", "virtualtime/_engine/_children.py (_child_awaited)"
    )
    assert "_drain_waiters" in inspect.getsource(asyncio.streams.FlowControlMixin), changed(
        "FlowControlMixin._drain_waiters", "virtualtime/_engine/_children.py (_child_awaited)"
    )


# ------------------------------------------------------------------ anyio worker threads


def test_canary_anyio_worker_threads_have_the_attributes_the_model_reads() -> None:
    # _outside.py, OutsideWork._other_worker_threads: anyio's to_thread workers are recognised
    # by .idle_workers, .loop and .stopping, and deliver results through _report_result.
    anyio = pytest.importorskip("anyio")
    from anyio._backends import _asyncio as anyio_asyncio

    seen: dict[str, Any] = {}

    def in_worker() -> None:
        thread = threading.current_thread()
        seen["type"] = type(thread)
        for name in ("idle_workers", "loop", "stopping"):
            seen[name] = hasattr(thread, name)

    async def main() -> None:
        await anyio.to_thread.run_sync(in_worker)
        seen["loop is ours"] = seen["type"] is anyio_asyncio.WorkerThread

    anyio.run(main, backend="asyncio")
    missing = [n for n in ("idle_workers", "loop", "stopping") if not seen.get(n)]
    assert not missing, changed(
        f"anyio's WorkerThread attributes (missing {missing})",
        "virtualtime/_engine/_outside.py (OutsideWork._other_worker_threads)",
    )
    assert seen["loop is ours"], changed(
        "anyio._backends._asyncio.WorkerThread", "virtualtime/_engine/_outside.py (_ANYIO_ASYNCIO)"
    )
    assert callable(getattr(anyio_asyncio.WorkerThread, "_report_result", None)), changed(
        "anyio WorkerThread._report_result", "virtualtime/_engine/_thread_jobs.py (_DELIVERIES)"
    )


def test_canary_a_future_awaited_by_a_task_is_marked_asyncio_future_blocking() -> None:
    # The compiled virtualtime.sleep and sim kit sleep (_cwake.c) yield their future as
    # ``await future`` does: they set ``_asyncio_future_blocking`` first, which the Task
    # checks (a future yielded without it is "yield was used instead of yield from").
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        before = future._asyncio_future_blocking
        step = future.__await__()
        assert step.send(None) is future
        after = future._asyncio_future_blocking
        future.cancel()
        return before, after

    assert asyncio.run(main()) == (False, True)

    class Bare:
        def __await__(self) -> Generator[Any, None, None]:
            yield asyncio.get_running_loop().create_future()  # not marked blocking

    async def bare() -> None:
        await Bare()

    with pytest.raises(RuntimeError, match="yield was used instead of yield from"):
        asyncio.run(bare())


@pytest.mark.parametrize("kind", ["Task", "_PyTask"])
def test_canary_a_futures_callbacks_are_callback_and_context_pairs(kind: str) -> None:
    # _cycle.py, the pure rounds' lone wake-up: it reads a due future's one callback and its
    # context from Future._callbacks, takes it out with remove_done_callback (so set_result
    # schedules nothing) and runs it in that context itself, from the loop's round: the
    # waiting task goes on.
    where = "virtualtime/_engine/_cycle.py (the lone wake-up)"
    loop: Any = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        none = future._callbacks
        assert none is None, changed(f"Future._callbacks with no callback ({none!r})", where)

        async def waiter() -> str:
            return str(await future)

        task = getattr(asyncio.tasks, kind)(waiter(), loop=loop)
        loop.run_until_complete(asyncio.sleep(0))  # the task now waits for the future
        waiting = future._callbacks
        assert isinstance(waiting, list), changed(f"Future._callbacks ({waiting!r})", where)
        assert len(waiting) == 1, changed(f"Future._callbacks ({waiting!r})", where)
        callback, context = waiting[0]
        assert getattr(callback, "__self__", None) is task
        assert isinstance(context, contextvars.Context)
        assert future.remove_done_callback(callback) == 1
        ready = len(loop._ready)
        future.set_result(7)
        assert len(loop._ready) == ready  # nothing scheduled
        loop.call_soon(context.run, callback, future)  # (a task steps only in a round)
        assert loop.run_until_complete(task) == "7"
    finally:
        loop.close()


def test_canary_anyio_sleeps_through_a_backend_classmethod_that_awaits_asyncio_sleep() -> None:
    # _anyio_sleep.py: anyio.sleep(delay) awaits get_async_backend().sleep(delay), and on the
    # asyncio backend that is a classmethod over a coroutine function of (cls, delay) whose
    # body awaits the module's sleep, asyncio.sleep -- the one method the fast path replaces.
    anyio = pytest.importorskip("anyio")
    from anyio._backends import _asyncio as anyio_asyncio
    from anyio._core import _eventloop

    from virtualtime._engine import _anyio_sleep

    where = "virtualtime/_engine/_anyio_sleep.py"
    names = _eventloop.sleep.__code__.co_names
    assert "get_async_backend" in names, changed("anyio.sleep (no get_async_backend)", where)
    assert "sleep" in names, changed("anyio.sleep (no backend .sleep)", where)
    method = vars(anyio_asyncio.AsyncIOBackend)["sleep"]
    assert isinstance(method, classmethod), changed("AsyncIOBackend.sleep's kind", where)
    stock = getattr(method.__func__, "__wrapped__", method.__func__)
    assert _anyio_sleep._stock_method(type("B", (), {"sleep": classmethod(stock)})), changed(
        "AsyncIOBackend.sleep's signature", where
    )
    assert "sleep" in stock.__code__.co_names, changed("AsyncIOBackend.sleep's body", where)
    backend_sleep = vars(anyio_asyncio)["sleep"]
    assert backend_sleep is asyncio.sleep, changed("anyio's asyncio backend sleep", where)

    async def main() -> float:
        await anyio.sleep(2)
        return float(anyio.current_time())

    options = {"loop_factory": virtualtime.new_event_loop}
    assert anyio.run(main, backend="asyncio", backend_options=options) == 2.0
    assert _anyio_sleep.installed(), changed("AsyncIOBackend.sleep (not replaced)", where)


# ------------------------------------------------------------------ numbered tasks


def test_canary_a_debug_task_records_its_origin_without_create_task() -> None:
    # _loop.py, VirtualEventLoop.create_task: like the stock method, it drops its own frame
    # from a debug-mode task's _source_traceback, whose last entry names the caller.
    where = "virtualtime/_engine/_loop.py (VirtualEventLoop.create_task)"

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        task = loop.create_task(asyncio.sleep(0))  # the origin
        await task
        return getattr(task, "_source_traceback", None)

    record = asyncio.run(main(), debug=True)
    assert isinstance(record, list), changed("Task._source_traceback", where)
    assert record[-1].line == "task = loop.create_task(asyncio.sleep(0))  # the origin", changed(
        "which frame Task._source_traceback ends with", where
    )


def test_canary_anyio_cancel_scopes_keep_child_scopes_in_a_set_made_by_the_constructor() -> None:
    # _anyio_sleep.py, _order_scopes: a CancelScope's _child_scopes is made in __init__
    # (deadline, shield) and anyio only adds, removes, discards and iterates it -- what
    # ChildScopes, the ordered stand-in made on virtual loops, provides.
    pytest.importorskip("anyio")
    import re

    from anyio._backends import _asyncio as anyio_asyncio

    from virtualtime._engine import _anyio_sleep

    where = "virtualtime/_engine/_anyio_sleep.py (_order_scopes, ChildScopes)"
    scope_type = anyio_asyncio.CancelScope
    assert "_child_scopes" in scope_type.__slots__, changed("CancelScope.__slots__", where)
    init = getattr(scope_type.__init__, "__wrapped__", scope_type.__init__)
    parameters = [(p.name, p.default) for p in inspect.signature(init).parameters.values()]
    assert parameters == [
        ("self", inspect.Parameter.empty),
        ("deadline", float("inf")),
        ("shield", False),
    ], changed("CancelScope.__init__'s parameters", where)
    assert "_child_scopes" in init.__code__.co_names, changed("CancelScope.__init__", where)
    source = inspect.getsource(anyio_asyncio)
    # What follows each mention: a method, or the end of a name (its slot, its annotation, a
    # for loop's colon, a call's parenthesis); an operator or subscript would be new.
    operations = set(re.findall(r"_child_scopes\b\s*(\.\w+|\S)", source))
    assert operations <= {".add", ".remove", ".discard", '"', ":", ")", ","}, changed(
        f"what anyio does with _child_scopes ({sorted(operations)})", where
    )
    assert re.search(r"for \w+ in self\._child_scopes:", source), changed(
        "how anyio walks _child_scopes", where
    )
    _anyio_sleep.install()
    assert _anyio_sleep.scopes_ordered(), changed("CancelScope (not ordered)", where)


# ------------------------------------------------------------------ the network seam


def test_canary_the_methods_the_network_seam_routes_exist_on_the_stock_loop() -> None:
    # _network.py, NetworkMixin: each routed method falls back to the stock loop's own, found
    # through super(); a method asyncio drops or renames would fail only when it is called.
    from virtualtime._engine._network import NetworkMixin

    routed = [name for name, value in vars(NetworkMixin).items() if callable(value)]
    stock = asyncio.SelectorEventLoop
    missing = [
        name for name in routed if not inspect.iscoroutinefunction(getattr(stock, name, None))
    ]
    assert not missing, changed(
        f"the stock loop's network coroutines (missing or not coroutines: {missing})",
        "virtualtime/_engine/_network.py (NetworkMixin)",
    )


def test_canary_a_ready_handle_keeps_its_context_in_context() -> None:
    # _network.py, context_of: a world's pause and crash gate reads whose code a ready handle
    # is from the context it was scheduled with, Handle._context (stock and lean handles).
    from virtualtime._engine._network import context_of

    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        handles = [
            loop.call_soon(print, context=context),
            loop.call_later(5, print, context=context),
            asyncio.Handle(print, (), loop, context),
        ]
        for handle in handles:
            handle.cancel()
        return [context_of(handle) is context for handle in handles]

    assert virtualtime.run(main()) == [True, True, True], changed(
        "where a handle keeps its context (Handle._context)",
        "virtualtime/_engine/_network.py (context_of)",
    )


# ------------------------------------------------------------------ seeded runs


def test_canary_the_pure_python_task_class_exists() -> None:
    # _seeding.py, _TASK_TYPES: code that swaps asyncio.Task for the pure-Python class still
    # makes tasks whose steps perturb="ready" may reorder; without the class, only C tasks.
    assert isinstance(getattr(asyncio.tasks, "_PyTask", None), type), changed(
        "asyncio.tasks._PyTask (gone)", "virtualtime/_engine/_seeding.py (_TASK_TYPES)"
    )


@pytest.mark.parametrize("kind", ["Task", "_PyTask"])
def test_canary_a_task_step_and_wake_up_are_methods_of_the_task(kind: str) -> None:
    # _seeding.py, _is_task_step: perturb="ready" tells a task's steps and wake-ups from the
    # other ready callbacks by the handle's callback, whose __self__ is the task.
    from virtualtime._engine._seeding import _is_task_step

    task_class = getattr(asyncio.tasks, kind)
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()

        async def waiter() -> None:
            await future

        task = task_class(waiter(), loop=loop)
        step = loop._ready[-1]  # type: ignore[attr-defined]
        loop.run_until_complete(asyncio.sleep(0))  # the task now waits for the future
        future.set_result(None)
        wake_up = loop._ready[-1]  # type: ignore[attr-defined]
        seen = [getattr(handle._callback, "__self__", None) for handle in (step, wake_up)]
        assert seen == [task, task], changed(
            f"what a {kind}'s step and wake-up handles call (their callbacks' __self__: {seen})",
            "virtualtime/_engine/_seeding.py (_is_task_step)",
        )
        assert _is_task_step(step)
        assert _is_task_step(wake_up)
        assert not _is_task_step(loop.call_soon(int))  # any other callback
        loop.run_until_complete(task)
    finally:
        loop.close()


def test_canary_system_random_draws_through_random_urandom(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # net/_entropy.py, SeededEntropy: random.SystemRandom (and so secrets) reads the bytes of
    # os.urandom through random._urandom, which a seeded run replaces with its own stream.
    import random
    import secrets

    asked: list[int] = []

    def urandom(size: int) -> bytes:
        asked.append(size)
        return b"\x01" * size

    monkeypatch.setattr(random, "_urandom", urandom)
    drawn = (random.SystemRandom().getrandbits(32), secrets.token_bytes(3))
    assert drawn == (0x01010101, b"\x01\x01\x01"), changed(
        "where random.SystemRandom reads its bytes (not random._urandom any more)",
        "virtualtime/net/_entropy.py (SeededEntropy.__enter__)",
    )
    assert asked == [4, 3]


def test_canary_base_event_loop_sets_its_flags_as_attributes_the_slots_take() -> None:
    # The virtual loop keeps asyncio's _stopping, _debug and _closed flags in slots (read at
    # their offsets by the compiled core): BaseEventLoop must set them by plain attribute
    # assignment (__init__, stop(), the end of run_forever, set_debug(), close()), so that the
    # slots -- never the instance dict -- hold them.
    loop = virtualtime.new_event_loop()

    def flags() -> tuple[object, object, object]:
        return loop._stopping, loop._debug, loop._closed

    try:
        assert flags() == (False, False, False)
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert flags() == (False, False, False)
        loop.stop()
        loop.set_debug(True)
        assert flags() == (True, True, False)
        assert loop.get_debug() is True
        loop.set_debug(False)
    finally:
        loop.close()
    assert flags() == (True, False, True)
    assert not {"_stopping", "_debug", "_closed"} & set(loop.__dict__)
