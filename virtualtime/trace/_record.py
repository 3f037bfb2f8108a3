"""Recording: the active recorder, and the spans other layers report into it.

A :class:`TraceRecorder` collects the runs (loops and trio clocks) of one program and the
spans reported while it is active; it lives in a :class:`contextvars.ContextVar`, so entering
one makes it active for every task started from there.  :func:`record_span` is the hook other
layers call (a no-op when nothing records); :func:`recording` tells them whether building a
span's arguments is worth it.  The recorder builds its trace with the Chrome trace builder
(``_chrome``).

Part of ``trace``: may import ``shared``, ``engine`` (see tests/layout.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._engine._history import TaskRecord
from .._shared._errors import InvalidValueError
from .._shared._time import check_finite
from ._chrome import Span, _check_tasks, _document, _run_events, write_trace

if TYPE_CHECKING:
    from .._engine._history import HistoryRecord


class TraceRecorder:
    """Collects the runs of a program and the spans other layers report, for one trace.

    Use it as a context manager around the code you want traced: while it is active,
    :func:`record_span` files spans into it, each under the run (loop or trio clock) it was
    reported from.  Call :meth:`add_run` for every loop or clock that should appear (in the
    order they should appear), then :meth:`trace` or :meth:`write`.  The ``virtualtime run
    --trace`` command does exactly this.
    """

    def __init__(self) -> None:
        self._runs: list[_Run] = []
        self._keys: dict[int, int] = {}
        self._spans: dict[int, list[Span]] = {}
        self._tokens: list[Token[TraceRecorder | None]] = []

    def __enter__(self) -> TraceRecorder:
        self._tokens.append(_active.set(self))
        return self

    def __exit__(self, *exc_info: object) -> None:
        _active.reset(self._tokens.pop())

    def add_run(
        self,
        key: object,
        label: str,
        history: Sequence[HistoryRecord] = (),
        dropped: int = 0,
        *,
        start: float | None = None,
        tasks: Iterable[TaskRecord] = (),
    ) -> None:
        """Register one run: ``key`` is its loop or clock, ``history`` what it dispatched.

        ``dropped`` is how many timers fired that the (bounded) history no longer holds; it
        is noted in the trace.  ``start`` is the virtual time the run began at (the loop's
        ``start_time``), where the timeline's axis starts.  ``tasks`` are the tasks the run
        made (the loop's :attr:`~virtualtime.VirtualEventLoop.task_history`): each gets a row
        for its whole life, even one that never sleeps on a timer.  Registering a key again
        replaces its label, history, start and tasks.
        """
        if start is not None:
            start = check_finite("start", start)
        lives = _check_tasks(tasks)
        index = self._index(key)
        self._runs[index] = _Run(key, label, tuple(history), dropped, start, lives)

    def forget(self, key: object) -> None:
        """Stop filing spans under ``key``'s run, and let go of ``key``; its run stays.

        Call it when the loop or clock is done (closed), so the recorder does not keep it
        alive and a new loop that happens to get the same ``id`` starts a run of its own.
        """
        index = self._keys.pop(id(key), None)
        if index is not None:
            self._runs[index] = self._runs[index]._replace(key=None)

    def add_span(self, span: Span, key: object | None = None) -> None:
        """File ``span`` under the run of ``key`` (default: the run that is executing now)."""
        if key is None:
            key = _current_run_key()
        self._spans.setdefault(self._index(key), []).append(span)

    def _index(self, key: object) -> int:
        index = self._keys.get(id(key))
        if index is None:
            index = self._keys[id(key)] = len(self._runs)
            self._runs.append(_Run(key, f"run {index + 1}", (), 0, None, ()))
        return index

    def trace(self, **metadata: object) -> dict[str, Any]:
        """The Chrome trace of every registered run, one trace process per run."""
        events: list[dict[str, Any]] = []
        runs = []
        for index, run_ in enumerate(self._runs):
            pid = index + 1
            spans = self._spans.get(index, ())
            events.extend(
                _run_events(run_.history, spans, pid=pid, label=run_.label, tasks=run_.tasks)
            )
            run: dict[str, object] = {
                "pid": pid,
                "label": run_.label,
                "timers": len(run_.history),
                "dropped": run_.dropped,
            }
            if run_.tasks:
                run["tasks"] = len(run_.tasks)
            if run_.start is not None:
                run["start"] = run_.start
            runs.append(run)
        return _document(events, runs=runs, **metadata)

    def write(self, path: str | os.PathLike[str], **metadata: object) -> int:
        """Write :meth:`trace` to ``path``; return the number of events written."""
        return write_trace(self.trace(**metadata), path)


class _Run(NamedTuple):
    """One run a :class:`TraceRecorder` holds (``key`` None once forgotten)."""

    key: object
    label: str
    history: Sequence[HistoryRecord]
    dropped: int
    start: float | None
    tasks: tuple[TaskRecord, ...]


_active: Final[ContextVar[TraceRecorder | None]] = ContextVar(
    "virtualtime.trace.recorder", default=None
)
"""The recorder :func:`record_span` files into in this context (None: nothing records)."""


def recording() -> bool:
    """Whether a trace is being recorded now (so :func:`record_span` is not a no-op).

    Check it before building expensive span arguments.
    """
    return _active.get() is not None


def record_span(
    row: str, name: str, start: float, end: float, *, category: str = "span", **args: object
) -> None:
    """Report that ``row`` spent virtual time ``start``..``end`` doing ``name``.

    This is the hook other layers call to appear in traces and timelines; when nothing is recording
    it only checks the times.  ``row`` names the timeline row (``"vehicle van-1"``), ``name``
    labels the span (``"depot -> dock 3"``), ``category`` groups spans for colour (describe a
    category of your own with :func:`register_category`; an unknown one is drawn in a colour of
    its own, labelled with its name), and ``args`` are shown when the span is selected in
    Perfetto.  Times are virtual seconds of the clock the caller runs on; ``end`` must not be
    before ``start``.
    """
    start = check_finite("record_span: start", start)
    end = check_finite("record_span: end", end)
    if end < start:
        raise InvalidValueError(f"record_span: end ({end!r}) must not be before start ({start!r})")
    recorder = _active.get()
    if recorder is None:
        return
    recorder.add_span(Span(str(row), str(name), float(start), float(end), category, args))


def _current_run_key() -> object:
    """The running asyncio loop or trio clock, or None when neither is running."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            clock: object = trio.lowlevel.current_clock()
        except RuntimeError:
            return None
        return clock
    return None
