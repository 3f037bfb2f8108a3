"""What a loop with ``history=n`` remembers: dispatched timers and task lives, as records.

The record types (:class:`RecordKind`, :class:`HistoryRecord`, :class:`TaskRecord`; the
public ones are re-exported by ``virtualtime`` and ``virtualtime.trace``) and
:class:`HistoryMixin`, the part of the loop that keeps them: raw tuples while the loop runs
(cheap for the garbage collector to ignore), turned into records only when
:attr:`VirtualEventLoop.history <virtualtime.VirtualEventLoop.history>` or
:attr:`~virtualtime.VirtualEventLoop.task_history` is read.  Traces and plots are drawn from
these.  A loop without history pays nothing here.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

from .._shared._time import to_seconds
from ._fields import LoopFields
from ._handles import _WAKERS, set_result_unless_cancelled
from ._timers import WAITER

__all__ = ["HistoryMixin", "HistoryRecord", "RecordKind", "TaskRecord"]

_WAITER = WAITER


class RecordKind(enum.Enum):
    """What a dispatched timer woke: the ``kind`` of a :class:`HistoryRecord`."""

    TASK = "task"
    """A task asleep on the timer (``asyncio.sleep``, anyio's ``sleep``, ``virtualtime.sleep``)."""
    CALLBACK = "callback"
    """A plain callback (``call_later``, the expiry of ``asyncio.timeout``)."""


class HistoryRecord(NamedTuple):
    """One dispatched timer, as kept by ``VirtualEventLoop(history=n)``.

    ``time`` is the virtual instant it fired, ``scheduled`` the virtual instant it was
    scheduled at, ``priority`` and ``seq`` its place in the total order, and ``what`` a short
    description of what it woke: ``"task <name>"`` for a sleeping task, or the callback's
    qualified name.  ``task_id`` tells tasks apart that share a name (anyio reuses names): an
    identifier of the woken task, stable for as long as the record is kept, or None for a
    plain callback.  ``kind`` says which of the two it was (:class:`RecordKind`); read
    :attr:`task_name` rather than taking ``what`` apart.
    """

    time: float
    priority: int
    seq: int
    what: str
    scheduled: float
    task_id: int | None = None
    kind: RecordKind = RecordKind.CALLBACK

    @property
    def task_name(self) -> str | None:
        """The woken task's name (``kind`` is ``TASK``), or None for a plain callback."""
        return self.what[len("task ") :] if self.kind is RecordKind.TASK else None


class TaskRecord(NamedTuple):
    """One task made by a loop that keeps history (:attr:`VirtualEventLoop.task_history`).

    ``created`` is the virtual instant the task was made, ``ended`` the instant it finished
    (returned, raised or was cancelled), or None if it had not finished when the list was
    read; ``name`` is its name and ``task_id`` the same identifier :attr:`HistoryRecord.task_id`
    gives its sleeps.  Traces draw a task's life from these, so that a task that never sleeps
    on a timer (it waits on queues, events, other tasks) still gets a row.
    """

    created: float
    ended: float | None
    name: str
    task_id: int


def _history_record(raw: tuple[int, int, int, object, int]) -> HistoryRecord:
    ticks, priority, seq, what, scheduled = raw
    if isinstance(what, asyncio.Task):
        return HistoryRecord(
            to_seconds(ticks),
            priority,
            seq,
            f"task {what.get_name()}",
            to_seconds(scheduled),
            id(what),
            RecordKind.TASK,
        )
    name = getattr(what, "__qualname__", None) or repr(what)
    return HistoryRecord(to_seconds(ticks), priority, seq, name, to_seconds(scheduled))


def _task_name(task: asyncio.Future[Any]) -> str:
    """A task's name; a task factory may also make futures that are not tasks (no name)."""
    get_name = getattr(task, "get_name", None)
    return str(get_name()) if callable(get_name) else type(task).__name__


class HistoryMixin(LoopFields):
    """The loop's history: timers dispatched and tasks made, kept with ``history=n``."""

    def _vt_history_records(self) -> Sequence[HistoryRecord]:
        """:attr:`VirtualEventLoop.history`: the kept dispatched timers, as records."""
        if self._vt_history is None:
            return ()
        return tuple(map(_history_record, self._vt_history))

    def _vt_task_records(self) -> Sequence[TaskRecord]:
        """:attr:`VirtualEventLoop.task_history`: the kept task lives, as records."""
        if self._vt_lives is None or self._vt_running is None:
            return ()
        now = self._vt_ticks
        lives = list(self._vt_lives)
        # Running, or done at this instant with its done callback still to come.
        lives += [
            (number, created, now if task.done() else -1, id(task), _task_name(task))
            for task, (number, created) in list(self._vt_running.items())
        ]
        lives.sort()
        return tuple(
            TaskRecord(to_seconds(created), None if ended < 0 else to_seconds(ended), name, task_id)
            for _number, created, ended, task_id, name in lives
        )

    def _vt_task_made(self, task: asyncio.Future[Any]) -> None:
        """History is on: note when ``task`` was made, and have it say when it ends."""
        running = self._vt_running
        if running is not None:
            running[task] = (self._vt_lives_made(), self._vt_ticks)
            task.add_done_callback(self._vt_task_ended)

    def _vt_task_ended(self, task: asyncio.Future[Any]) -> None:
        running, lives = self._vt_running, self._vt_lives
        if running is None or lives is None:
            return
        made = running.pop(task, None)
        if made is not None:
            lives.append((*made, self._vt_ticks, id(task), _task_name(task)))

    def _vt_forget_seq(self, seq: int) -> None:
        self._vt_scheduled_at.pop(seq, None)

    def _vt_record(self, entry: tuple[int, int, int, Any]) -> None:
        ticks, priority, seq, handle = entry
        assert self._vt_history is not None
        scheduled, task = self._vt_scheduled_at.pop(seq, (ticks, None))
        if type(handle) is _WAITER:
            callback: object = set_result_unless_cancelled
        else:
            callback = handle._callback
        what: object = task if task is not None and callback in _WAKERS else callback
        self._vt_history.append((self._vt_ticks, priority, seq, what, scheduled))
