"""The loop's side facing the outside world: waiting when nothing is ready, and the hooks.

When nothing is ready, :meth:`IdleMixin._vt_idle` decides between waiting in real time for
outside work (the model of :mod:`virtualtime._engine._outside` says how long), moving virtual
time (autojump, rate, drives) and declaring a deadlock; :meth:`IdleMixin._vt_poll` is the one
place the loop blocks on its selector.  The hooks that tell the outside-work model about a
thread job, a hold on time and a child process live here too; the public methods that call
them (``run_in_executor``, ``shutdown_default_executor``) are the loop's own.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time as _time_module
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from .._options import fell_behind
from .._shared._time import to_seconds, to_ticks
from ._checks import _NEVER
from ._reports import ReportsMixin

__all__ = ["IdleMixin"]

_T = TypeVar("_T")

_real_monotonic: Final = _time_module.monotonic

_MAX_REAL_WAIT: Final = 3600.0
"""Longest single real-time block on the selector; longer waits are made of several."""


class IdleMixin(ReportsMixin):
    """Waiting for the outside world when nothing is ready; telling its model what we start."""

    def _vt_job(self, func: Callable[..., _T], args: tuple[Any, ...]) -> _T:
        # Runs in the worker thread: remember which thread works for us, so that a job
        # which is itself waiting for this loop (run_coroutine_threadsafe(...).result(),
        # anyio.from_thread.run) does not hold time still for ever.
        threads = self._vt_world.job_threads
        ident = threading.get_ident()
        threads.add(ident)
        try:
            return func(*args)
        finally:
            threads.discard(ident)

    # shutdown_default_executor, with the stock method's parameters: 3.12 added ``timeout``.
    @contextlib.contextmanager
    def _vt_holding_time(self) -> Iterator[None]:
        # Outside work for as long as the block runs: time stands still.
        self._vt_world.holds += 1
        self._vt_world.changes += 1
        self._vt_update_fast()
        try:
            yield
        finally:
            self._vt_world.holds -= 1
            self._vt_update_fast()

    async def _make_subprocess_transport(self, *args: Any, **kwargs: Any) -> Any:
        # asyncio-private: every subprocess_exec/subprocess_shell (and so
        # asyncio.create_subprocess_*) builds its transport here, under every child watcher.
        # The outside-work model keeps a weak reference to know which children still run.
        transport = await super()._make_subprocess_transport(  # type: ignore[misc]
            *args, **kwargs
        )
        self._vt_world.track_child(transport)
        self._vt_update_fast()
        return transport

    def _vt_poll(self, timeout: float | None) -> bool:
        """Block on the selector for up to ``timeout`` real seconds; True if events came."""
        if timeout is not None and timeout > _MAX_REAL_WAIT:
            timeout = _MAX_REAL_WAIT
        event_list = self._vt_selector.select(timeout)
        if event_list:
            self._vt_world.saw_events(event_list)
            # asyncio-private: _process_events turns selector events into ready callbacks;
            # it is the stock loop's own dispatch step, called exactly as _run_once does.
            self._process_events(event_list)
            self._vt_instant_count = 0
            return True
        return False

    def _vt_idle(self) -> None:
        """Nothing is ready: wait for the outside world, move time, or report a deadlock.

        Returns once something may be ready (or a timer is due at the current instant).  The
        outside-work model (:mod:`virtualtime._engine._outside`) says how long to wait, in real
        time, before time may move; the mode (autojump, manual, rate, drives) says where to.
        """
        heap = self._vt_heap
        drives = self._vt_drives
        world = self._vt_world
        while True:
            now = self._vt_ticks
            head = heap[0][0] if heap else _NEVER
            if head <= now:
                return
            drive = drives[0][0] if drives else _NEVER
            if drive <= now:
                self._vt_finish_drives()
                return

            if drives:
                target = min(head, drive)
            elif self._vt_autojump or (self._vt_paced and head < _NEVER):
                target = head
            else:
                target = _NEVER

            if target >= _NEVER:
                recheck = world.pending(_real_monotonic())
                if recheck is not None:
                    # Outside work may still deliver: wait for it in real time.
                    if self._vt_poll(recheck):
                        return
                    continue
                world.forget()
                self._vt_wait_or_deadlock()
                return

            wait = world.wait_before(target, now)
            if wait > 0:
                # Outside work is pending: virtual time may not run ahead of real time.
                if self._vt_poll(wait):
                    return
                continue
            if self._vt_paced and not drives:
                # Rate mode: wait, in real time, until the anchor says the head is due.  The
                # anchor is not re-based on each wake-up, so a late wake-up shortens the next
                # wait instead of accumulating as drift.
                wait = self._vt_anchor.real_until(to_seconds(head))
                if wait > 0:
                    if self._vt_poll(wait):
                        # Real I/O between two instants sees the time that has passed.
                        ticks = min(to_ticks(self._vt_anchor.virtual()), head)
                        if ticks > self._vt_ticks:
                            self._vt_set_ticks(ticks)
                        return
                    continue
                if self._vt_rate_strict:
                    self._vt_keep_pace(head)
            if self._vt_threshold > 0:
                if self._vt_poll(self._vt_threshold):
                    return
            elif (self._vt_selector.registered > 1 or self._vt_signals) and self._vt_poll(0):
                # Bytes already in the kernel go first -- and so do signals: a signal handler's
                # wake-up byte waits in the self-pipe, which only a poll reads.
                return
            self._vt_set_ticks(target)
            if self._vt_paced and (drives or not self._vt_rate_strict):
                # The pacing goes on from here -- a late timer's lateness is forgiven -- except
                # under rate_strict, whose pace is kept from the start (see _vt_keep_pace).
                self._vt_anchor.rebase(self._vt_now)
            # Loop again: a due timer returns at once, a reached drive finishes.

    def _vt_keep_pace(self, head: int) -> None:
        """rate_strict: the timer at tick ``head`` is due; raise if it is too late.

        The anchor is kept from the start of the run (or the last rate change or driving
        verb), so how far it has run past ``head`` is how far the run has fallen behind real
        time, summed over every step since -- a run a little too slow at each step is caught
        too.
        """
        due = to_seconds(head)
        now = self._vt_anchor.virtual()
        strict = self._vt_rate_strict
        if now - due > float(strict):
            raise fell_behind(due, now, self._vt_anchor.rate, strict)

    def _vt_wait_or_deadlock(self) -> None:
        """No timer may fire and no outside work is pending: wait, or report a deadlock."""
        world = self._vt_world
        if self._vt_target is None or self._vt_deadlock_timeout == math.inf or world.keeps_alive():
            # Running forever on purpose (waiting for stop()), or something outside may still
            # speak by itself (an idle connection, a child, a signal): wait, using no CPU.
            self._vt_poll(_MAX_REAL_WAIT)
            return
        if self._vt_poll(self._vt_deadlock_timeout):
            return
        if self._ready or world.pending(_real_monotonic()) is not None:
            return
        raise self._vt_deadlock_error()
