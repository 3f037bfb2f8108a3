"""What the loop says when it is stuck: the deadlock report and the runaway report.

:class:`ReportsMixin` builds :class:`~virtualtime.DeadlockError` (nothing can happen: which
tasks are blocked, where each is suspended, what is registered outside) and
:class:`~virtualtime.RunawayError` (the loop spins at one instant: what keeps it busy), and
the helpers that describe a task (its chain of awaits) and a ready handle for them.  Reports
are sorted so that the same program gives the same report in every run.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Any

from .._shared._errors import DeadlockError, RunawayError
from .._shared._time import to_seconds
from ._checks import _NEVER
from ._waits import WaitsMixin

__all__ = ["ReportsMixin"]


def _describe_handle(handle: asyncio.Handle) -> str:
    """What a ready handle will run: a task and where it is, or a callback's name."""
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        name, where = _describe_task(owner)
        return f"task {name!r} at {where}"
    target = getattr(callback, "func", callback)  # functools.partial
    name = getattr(target, "__qualname__", None) or repr(target)
    code = getattr(target, "__code__", None)
    if code is not None:
        return f"callback {name}() from {code.co_filename}:{code.co_firstlineno}"
    return f"callback {name}"


def _describe_task(task: asyncio.Task[Any]) -> tuple[str, str]:
    """``(name, where)`` for a blocked task: its chain of awaits, outermost first."""
    coro: Any = task.get_coro()
    frames: list[str] = []
    while coro is not None and len(frames) < 20:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        code = frame.f_code
        frames.append(f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    where = " -> ".join(frames) if frames else "not started"
    # asyncio-private: the future a task is blocked on; read only for this report.
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is not None:
        where += f", awaiting {type(waiter).__name__}"
    return task.get_name(), where


def _report_order(entry: tuple[str, str]) -> tuple[str, int, str]:
    """Tasks by name, numbers as numbers (``Task-2`` before ``Task-10``), then by place."""
    name, where = entry
    stem, _, number = name.rpartition("-")
    if stem and number.isdigit():
        return stem, int(number), where
    return name, -1, where


class ReportsMixin(WaitsMixin):
    """The loop's reports of a deadlock and of a runaway instant."""

    def _vt_deadlock_error(self) -> DeadlockError:
        # all_tasks() is a set: sorted, so the same program gives the same report every run.
        blocked = tuple(
            sorted(
                (_describe_task(task) for task in asyncio.all_tasks(self) if not task.done()),
                key=_report_order,
            )
        )
        live = self._vt_timers.live()
        finite = [entry for entry in live if entry[0] < _NEVER]
        if finite and not self._vt_autojump:
            reason = (
                f"time is manual (autojump=False) and nothing advances it: {len(finite)} "
                f"timer(s) pending, the next at t={to_seconds(min(finite)[0])!r}; drive time "
                "with loop.step()/loop.evolve(dt) from outside, or await "
                "virtualtime.evolve(dt) from a task"
            )
        else:
            reason = (
                "no callback is ready, no timer is pending"
                + (" (only timers at infinity, or beyond the horizon)" if live else "")
                + " and nothing outside the loop can wake it"
            )
        lines = [f"deadlock at virtual time t={self._vt_now!r}: {reason}."]
        if blocked:
            lines.append("Blocked tasks:")
            lines.extend(f"  - {name}: {where}" for name, where in blocked)
        registered = self._vt_world.describe()
        if registered:
            lines.append("Registered outside the loop, none of which can answer:")
            lines.extend(f"  - {what}" for what in registered)
        return DeadlockError("\n".join(lines), blocked)

    def _vt_runaway(self) -> None:
        count = self._vt_instant_count
        self._vt_instant_count = 0
        start, crept = self._vt_creeping
        moved = "without time moving"
        if crept and start + crept == self._vt_ticks:
            moved = (
                f"with time moving only by creeping {crept} ns from t={to_seconds(start)!r} "
                "(past timers re-armed at the current instant)"
            )
        spinning = [_describe_handle(handle) for handle in list(self._ready)[:3]]
        error = RunawayError(
            f"the loop went round {count} times at virtual time t={self._vt_now!r} {moved} "
            f"(max_rounds_per_instant={self._vt_max_instant}). Something busy-waits: it "
            "reschedules itself with zero delay (call_soon, sleep(0), call_later(0)) waiting "
            "for a condition that only the passing of time would change, but virtual time "
            "passes only while the loop is idle. Wait for the condition itself instead (an "
            "asyncio.Event, a Future, a Condition), or poll with a positive delay "
            "(await asyncio.sleep(0.01)); if the condition comes from a thread or another "
            "process, await it through loop.run_in_executor() / asyncio.to_thread(), or run "
            "with autojump_threshold > 0. Raise max_rounds_per_instant only for a long but "
            "finite burst of work at one instant."
            + (f" Running at that instant: {'; '.join(spinning)}." if spinning else "")
        )
        waiting = [d.future for _, _, d in self._vt_drives if d.future is not None]
        if waiting:
            # Drivers inside the loop receive the error; the loop itself goes on.
            for future in waiting:
                if not future.done():
                    future.set_exception(error)
            self._vt_drives[:] = [e for e in self._vt_drives if e[2].future is None]
            heapq.heapify(self._vt_drives)
            return
        raise error
