"""Tracing: what happened when, as a Chrome trace and a timeline picture.

When to use this
----------------
``virtualtime run --trace out.json script.py`` writes a trace of the whole run; open it in
https://ui.perfetto.dev (or ``chrome://tracing``), or draw it with
``virtualtime plot out.json -o timeline.png``.  From Python, build one from any loop that kept
history (``virtualtime.new_event_loop(history=100_000)``) with :func:`chrome_trace` and
:func:`write_trace`, and draw it with :func:`plot_trace`.

How the history becomes rows and spans
--------------------------------------
The loop's history (:class:`~virtualtime.HistoryRecord`) lists every timer it dispatched: the
instant it was scheduled, the instant it fired and what it woke.  A timer that woke a task (its
``kind`` is :attr:`RecordKind.TASK`: an ``asyncio.sleep``, anyio's ``sleep``, a
``virtualtime.sleep``) is a stretch that task spent **asleep**, drawn as a ``sleep`` span on
the task's row from ``scheduled`` to ``time``.  Running takes no virtual time (the clock only
moves from timer to timer), so a stretch of virtual time between a task waking up and its next
timed sleep is time it spent **waiting** on something that is not a timer -- a queue, a lock,
an event, another task, real I/O: that stretch is a ``waiting`` span.  The moment a task runs is
the tick drawn where a sleep ends.  A timer whose callback is not a task wake-up (a
``call_later`` callback, the expiry of ``asyncio.timeout``) is an instant event on the
``timers`` row.  Sleeps that were cancelled before they fired never reach the history, so a task
whose sleep was cut short by a timeout shows that stretch as waiting.

A loop that keeps history also keeps the tasks it made (``loop.task_history``: each
:class:`TaskRecord` says when a task was created and when it ended).  Given those, each task's
row spans its whole life: ``waiting`` from its creation to its first sleep and from its last
sleep to its end, so a task that never sleeps on a timer -- a dispatcher that only waits on a
queue -- is one ``waiting`` span, as long as it lived (a task that ended at the instant it began
has nothing to draw).  Each task keeps one lane of its row for its whole life.  trio keeps no
timer history: ``virtualtime run --trace`` draws each trio task's life as one ``alive`` span.

Other layers add their own spans through :func:`record_span`, and describe their span
categories (colour, legend, how they are drawn) with :func:`register_category`: the
simulation toolkit reports each vehicle journey there, with its outcome, and registers the
outcomes as categories.  A category can ask for the stretch after each of its spans to be
drawn too (:attr:`Category.until_next`): a journey that ended ``halted`` leaves its vehicle
standing until its next journey begins, or until the run ends, and that stretch becomes a
``stopped`` span of its own, so a breakdown shows as long as it lasted.  The trace keeps the
style of every category it uses (``otherData.categories``), so a file plots the same in a
process that never imported the layer that wrote it.  Spans that share a row never overlap: a row
whose spans would overlap (two tasks with the same name) is split into lanes
(``"worker (2)"``).  When history records carry a ``task_id``, a gap between the spans of two
different tasks that share a name is left empty rather than drawn as waiting; without it, tasks
that share a name one after another (anyio names tasks after their function) look like one
task that waited in between.

Who records
-----------
The active :class:`TraceRecorder` lives in a :class:`contextvars.ContextVar`: entering one
makes it active in the current context, and so in every task started from there and in
``asyncio.to_thread`` workers (which copy the context).  A thread started directly with
:class:`threading.Thread` begins with a fresh context and records nothing unless its target
runs under :meth:`contextvars.Context.run` of a copied context.

Units and layout
----------------
Trace time is virtual time: one virtual second is 1,000,000 trace microseconds, so Perfetto's
time axis reads in virtual seconds.  Each loop (each ``asyncio.run``) is a trace *process*
(``pid``) and each row a *thread* (``tid``), numbered in order of the row's first span;
``tid`` 0 of every process is the ``timers`` row, sorted last.  Events are sorted by row and
then by time.

The picture is drawn by :func:`plot_trace` (its own module, ``virtualtime.trace._plot``;
matplotlib is imported only when it is called).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from .._engine._loop import RecordKind, TaskRecord
from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import check_finite
from .._version import __version__

if TYPE_CHECKING:
    from .._engine._loop import HistoryRecord

__all__ = [
    "MICROSECONDS",
    "TIMERS_ROW",
    "Category",
    "NoSuchRows",
    "RecordKind",
    "Span",
    "TaskRecord",
    "TraceRecorder",
    "categories",
    "chrome_trace",
    "load_trace",
    "plot_trace",
    "record_span",
    "recording",
    "register_category",
    "write_trace",
]

MICROSECONDS: Final = 1_000_000
"""Trace microseconds per virtual second."""

TIMERS_ROW: Final = "timers"
"""Name of the row (``tid`` 0) that holds instants for timers that are plain callbacks."""


def _ts(seconds: float) -> float:
    """Virtual seconds to trace microseconds, to the nanosecond."""
    return round(seconds * MICROSECONDS, 3)


def _shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error message, cut short: a hostile value must not flood it."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text):,} characters)"


_FLOAT: Final = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?(?![\w.])")


def _short_repr(value: object) -> str:
    """``repr(value)`` with every float in it rounded to 3 decimals, to name a span.

    A place such as ``(3.3333333333333335, 2.3333333333333335)`` reads ``(3.333, 2.333)``
    (a number that would round to 0 keeps 3 significant digits instead); the exact value
    belongs in the span's arguments.  The simulation toolkit names journeys with it.
    """

    def rounded(match: re.Match[str]) -> str:
        number = float(match.group(0))
        short = repr(round(number, 3))
        if number and not round(number, 3):
            short = f"{number:.3g}"
        return short if len(short) < len(match.group(0)) else match.group(0)

    return _FLOAT.sub(rounded, repr(value))


@dataclass(frozen=True, slots=True)
class Span:
    """One stretch of virtual time on a named row, reported by :func:`record_span`."""

    row: str
    name: str
    start: float
    end: float
    category: str = "span"
    args: Mapping[str, object] = field(default_factory=dict)


# --------------------------------------------------------------------------- recording


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


def _check_tasks(tasks: Iterable[TaskRecord]) -> tuple[TaskRecord, ...]:
    """``tasks`` as a tuple, each checked: a :class:`TaskRecord` with sensible times."""
    if isinstance(tasks, TaskRecord) or not isinstance(tasks, Iterable):
        raise InvalidTypeError(
            f"tasks must be an iterable of TaskRecord (a loop's task_history), got {_shown(tasks)}"
        )
    checked = []
    for task in tasks:
        if not isinstance(task, TaskRecord):
            raise InvalidTypeError(f"tasks: each must be a TaskRecord, got {_shown(task)}")
        if not isinstance(task.name, str):
            raise InvalidTypeError(f"tasks: a task's name must be a str, got {_shown(task.name)}")
        created = check_finite("tasks: created", task.created)
        if task.ended is not None and check_finite("tasks: ended", task.ended) < created:
            raise InvalidValueError(
                f"tasks: ended ({task.ended!r}) must not be before created ({created!r}), "
                f"for task {_shown(task.name)}"
            )
        checked.append(task)
    return tuple(checked)


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


# --------------------------------------------------------------------------- building


def chrome_trace(
    history: Iterable[HistoryRecord],
    spans: Iterable[Span] = (),
    *,
    label: str = "virtual loop",
    start: float | None = None,
    tasks: Iterable[TaskRecord] = (),
) -> dict[str, Any]:
    """The Chrome trace (a JSON-ready dict) of one loop's ``history`` plus extra ``spans``.

    Use it to trace a loop you run yourself::

        loop = virtualtime.new_event_loop(history=100_000)
        loop.run_until_complete(main())
        trace = chrome_trace(loop.history, tasks=loop.task_history, start=loop.start_time)
        write_trace(trace, "out.json")

    ``start`` is the virtual time the run began at; the timeline's axis starts there (without
    it, at 0, or at the first event when that is far from 0).  ``tasks`` are the tasks the
    loop made (its ``task_history``): with them, every task that lived for some virtual time
    gets a row, waiting from its creation to its first sleep and after its last, and a task
    that never slept on a timer is one ``waiting`` span; without them, only tasks that slept
    have rows.
    """
    if start is not None:
        start = check_finite("start", start)
    lives = _check_tasks(tasks)
    records = tuple(history)
    events = _run_events(records, tuple(spans), pid=1, label=label, tasks=lives)
    run: dict[str, object] = {"pid": 1, "label": label, "timers": len(records)}
    if lives:
        run["tasks"] = len(lives)
    if start is not None:
        run["start"] = start
    return _document(events, runs=[run])


def write_trace(trace: Mapping[str, Any], path: str | os.PathLike[str]) -> int:
    """Write ``trace`` as JSON, one event per line; return how many events it holds."""
    events = trace["traceEvents"]
    rest = {key: value for key, value in trace.items() if key != "traceEvents"}
    with open(path, "w", encoding="utf-8") as file:
        file.write('{"traceEvents": [\n')
        file.write(",\n".join(json.dumps(event, separators=(",", ":")) for event in events))
        file.write("\n]")
        for key, value in rest.items():
            file.write(f",\n{json.dumps(key)}: {json.dumps(value)}")
        file.write("\n}\n")
    return len(events)


def _document(events: list[dict[str, Any]], **metadata: object) -> dict[str, Any]:
    used = {str(e["cat"]) for e in events if e["ph"] == "X"}
    if any(e["ph"] == "i" for e in events):
        used.add("timer")
    styles = {name: _style(c) for name, c in _categories.items() if name in used}
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": f"virtualtime {__version__}",
            "time": "virtual: 1 virtual second = 1,000,000 trace microseconds",
            **metadata,
            "categories": styles,
        },
    }


def _style(category: Category) -> dict[str, Any]:
    """How ``category`` is drawn, as kept in a trace file (what the picture needs)."""
    style = asdict(category)
    del style["name"], style["until_next"], style["carry"]
    return style


class _Lanes:
    """Rows of one trace process, split into non-overlapping lanes (trace threads)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.names: dict[int, str] = {0: TIMERS_ROW}
        # row name -> lanes: [tid, end of the last span, owner of the last span]
        self._rows: dict[str, list[list[Any]]] = {}
        self._next = 1

    def place(
        self, row: str, start: float, end: float, owner: object = None
    ) -> tuple[int, float | None]:
        """A lane of ``row`` free at ``start``, and when the same owner's last span there ended.

        ``owner`` identifies what the span belongs to (a task); a lane that ``owner`` used last
        is preferred, so one task stays on one lane.  The second value is None unless the
        lane's previous span had the same owner (or owners are unknown).
        """
        lanes = self._rows.setdefault(row, [])
        free = [lane for lane in lanes if lane[1] <= start]
        best = None
        if owner is not None:
            best = next((lane for lane in free if lane[2] == owner), None)
        if best is None and free:
            best = max(free, key=lambda lane: lane[1])
        if best is None:
            tid = self._next
            self._next += 1
            self.names[tid] = row if not lanes else f"{row} ({len(lanes) + 1})"
            best = [tid, -math.inf, None]
            lanes.append(best)
        previous, previous_owner = best[1], best[2]
        best[1], best[2] = end, owner
        if previous == -math.inf or previous_owner != owner:
            return best[0], None
        return best[0], previous


@dataclass
class _Life:
    """A task's life on its row: from its creation to its end, with the sleeps between."""

    name: str
    owner: int
    created: float
    ended: float
    sleeps: list[HistoryRecord] = field(default_factory=list)

    @property
    def start(self) -> float:
        return min([self.created, *(r.scheduled for r in self.sleeps[:1])])

    @property
    def end(self) -> float:
        return max([self.ended, *(r.time for r in self.sleeps[-1:])])


def _lives(
    history: Sequence[HistoryRecord], tasks: Sequence[TaskRecord], end: float
) -> tuple[list[_Life], list[HistoryRecord]]:
    """Each task's life with its sleeps; and the task records that belong to no known life.

    A sleep belongs to the life of its task (same ``task_id``) that began last before it; a
    task still running when its loop was read lives until ``end``.  A sleep that overlaps the
    previous one of the same life (a timer the task set for someone else) is left to lanes.
    """
    lives = [
        _Life(t.name, t.task_id, t.created, t.ended if t.ended is not None else max(end, t.created))
        for t in sorted(tasks, key=lambda t: t.created)
    ]
    by_id: dict[int, list[_Life]] = {}
    for life in lives:
        by_id.setdefault(life.owner, []).append(life)
    loose: list[HistoryRecord] = []
    for record in history:
        if record.kind is not RecordKind.TASK:
            continue
        candidates = by_id.get(record.task_id, []) if record.task_id is not None else []
        owner = next((c for c in reversed(candidates) if c.created <= record.scheduled), None)
        if owner is None or (owner.sleeps and record.scheduled < owner.sleeps[-1].time):
            loose.append(record)
        else:
            owner.sleeps.append(record)
    return lives, loose


def _run_events(
    history: Sequence[HistoryRecord],
    spans: Iterable[Span],
    *,
    pid: int,
    label: str,
    tasks: Sequence[TaskRecord] = (),
) -> list[dict[str, Any]]:
    lanes = _Lanes(pid)
    body: list[dict[str, Any]] = []
    ordered = sorted(spans, key=_span_order)
    end = _run_end(history, ordered, tasks)
    lives, loose = _lives(history, tasks, end)
    # Tasks take their lanes in order of their first moment: a whole life at a time (one task,
    # one lane), or one sleep at a time for sleeps of tasks whose life is not known.
    units: list[tuple[float, float, int, _Life | HistoryRecord]] = [
        (life.start, life.end, n, life) for n, life in enumerate(lives)
    ]
    units += [(r.scheduled, r.time, len(units) + n, r) for n, r in enumerate(loose)]
    units.sort(key=lambda unit: unit[:3])
    for _start, _end, _n, unit in units:
        if isinstance(unit, _Life):
            if not unit.sleeps and unit.end <= unit.start:
                continue  # ended where it began: no virtual time to draw
            tid, _previous = lanes.place(unit.name, unit.start, unit.end, unit.owner)
            at = unit.created
            for record in unit.sleeps:
                if at < record.scheduled:
                    body.append(_span(pid, tid, "waiting", "waiting", at, record.scheduled, {}))
                body.append(_sleep(pid, tid, record))
                at = max(at, record.time)
            if at < unit.ended:
                body.append(_span(pid, tid, "waiting", "waiting", at, unit.ended, {}))
            continue
        record = unit
        # Tasks may share a name (anyio names them after their function); when the loop
        # tells tasks apart, a gap between two different tasks is not drawn as waiting.
        tid, previous = lanes.place(
            record.task_name or "", record.scheduled, record.time, record.task_id
        )
        if previous is not None and previous < record.scheduled:
            body.append(_span(pid, tid, "waiting", "waiting", previous, record.scheduled, {}))
        body.append(_sleep(pid, tid, record))
    for record in history:
        if record.kind is RecordKind.TASK:
            continue
        body.append(
            {
                "ph": "i",
                "s": "t",
                "name": record.what,
                "cat": "timer",
                "pid": pid,
                "tid": 0,
                "ts": _ts(record.time),
                "args": {
                    "scheduled": record.scheduled,
                    "delay": record.time - record.scheduled,
                    "priority": record.priority,
                    "seq": record.seq,
                },
            }
        )
    ordered = sorted(ordered + _standing(ordered, end), key=_span_order)
    for span in ordered:
        tid, _previous = lanes.place(span.row, span.start, span.end)
        extra: dict[str, Any] = dict(span.args)
        body.append(_span(pid, tid, span.name, span.category, span.start, span.end, extra))
    # Number the rows in order of their first span (then by name); timers go last.
    first: dict[int, float] = {}
    for event in body:
        if event["tid"]:
            first[event["tid"]] = min(first.get(event["tid"], math.inf), event["ts"])
    order = sorted(first, key=lambda tid: (first[tid], lanes.names[tid]))
    renumber = {old: new for new, old in enumerate(order, start=1)}
    renumber[0] = 0
    for event in body:
        event["tid"] = renumber[event["tid"]]
    names = {renumber[tid]: name for tid, name in lanes.names.items() if tid in renumber}
    body.sort(key=lambda event: (event["tid"], event["ts"]))
    meta: list[dict[str, Any]] = [
        _meta(pid, 0, "process_name", name=label),
        _meta(pid, 0, "process_sort_index", sort_index=pid),
    ]
    for tid, name in sorted(names.items()):
        meta.append(_meta(pid, tid, "thread_name", name=name))
        meta.append(_meta(pid, tid, "thread_sort_index", sort_index=tid or len(names)))
    return meta + body


def _span_order(span: Span) -> tuple[float, float]:
    return span.start, span.end


def _sleep(pid: int, tid: int, record: HistoryRecord) -> dict[str, Any]:
    """The ``sleep`` span of a task asleep on a timer, from ``record`` of the history."""
    start, end = record.scheduled, record.time
    args = {"slept": end - start, "priority": record.priority, "seq": record.seq}
    return _span(pid, tid, "sleep", "sleep", start, end, args)


def _run_end(
    history: Sequence[HistoryRecord], spans: Sequence[Span], tasks: Sequence[TaskRecord] = ()
) -> float:
    """The last instant anything in this run is known to have happened."""
    ends = [record.time for record in history] + [span.end for span in spans]
    ends += [task.created if task.ended is None else task.ended for task in tasks]
    return max(ends, default=0.0)


def _standing(spans: Sequence[Span], end: float) -> list[Span]:
    """After each span whose category has ``until_next``, the stretch until its row moves on.

    The added span lasts until the row's next span starts (or ``end``, the end of the run).
    """
    following = {n: c for n, c in _categories.items() if c.until_next is not None}
    if not following:
        return []
    by_row: dict[str, list[Span]] = {}
    for span in spans:
        by_row.setdefault(span.row, []).append(span)
    added = []
    for row, row_spans in by_row.items():
        for index, span in enumerate(row_spans):
            category = following.get(span.category)
            if category is None or category.until_next is None:
                continue
            later = [s.start for s in row_spans[index + 1 :] if s.start >= span.end]
            until = min(later, default=end)
            if until > span.end:
                then, name = category.until_next
                args: dict[str, object] = {key: span.args.get(key) for key in category.carry}
                args["after"] = span.name
                added.append(Span(row, name, span.end, until, then, args))
    return added


def _meta(pid: int, tid: int, kind: str, **args: object) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def _span(
    pid: int, tid: int, name: str, category: str, start: float, end: float, args: dict[str, Any]
) -> dict[str, Any]:
    ts = _ts(start)
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": max(_ts(end) - ts, 0.0),
        "args": args,
    }


def load_trace(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Read a Chrome trace file (or pass a trace dict through), checking its basic shape.

    A file that is not UTF-8 JSON, JSON nested too deeply to be a trace, or JSON without a
    ``traceEvents`` list is an :class:`~virtualtime.InvalidValueError` saying which; the
    events themselves are checked by :func:`plot_trace` as it reads them.
    """
    if isinstance(source, Mapping):
        trace = dict(source)
    elif isinstance(source, (str, os.PathLike)):
        where = _shown(os.fspath(source))
        with open(source, encoding="utf-8") as file:
            try:
                loaded = json.load(file)
            except json.JSONDecodeError as error:
                raise InvalidValueError(f"{where} is not JSON: {error}") from None
            except UnicodeDecodeError as error:
                raise InvalidValueError(f"{where} is not UTF-8 text: {error}") from None
            except RecursionError:
                raise InvalidValueError(
                    f"{where} is JSON nested too deeply to be a trace (a trace is an object "
                    "holding a 'traceEvents' list of flat event objects)"
                ) from None
        trace = {"traceEvents": loaded} if isinstance(loaded, list) else loaded
    else:
        raise InvalidTypeError(
            f"source must be a trace file's path or a trace dict, got {_shown(source)}"
        )
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise InvalidValueError(
            "not a Chrome trace: expected a JSON object with a 'traceEvents' list "
            "(as written by virtualtime run --trace)"
        )
    return trace


# --------------------------------------------------------------------------- categories


_COLOUR: Final = re.compile(r"#[0-9a-fA-F]{6}")
_LAYERS: Final = ("band", "bar", "front")
_HATCH: Final = re.compile(r"[/\\|\-+xoO.*]{1,10}")
"""A matplotlib hatch: its pattern letters, repeated for density (ten is denser than any eye)."""
_LABEL_LIMIT: Final = 200
"""The longest category name or legend text accepted (a legend line, not a paragraph)."""


@dataclass(frozen=True, slots=True)
class Category:
    """How the timeline draws the spans of one category, registered by :func:`register_category`.

    Describe a category when a layer of yours reports spans (:func:`record_span`) and its
    picture should read well: a colour, the legend's words, and how the spans sit on a row.

    ``layer`` is ``"band"`` (a thin strip behind everything: a task asleep or waiting),
    ``"bar"`` (a full-height bar, the default) or ``"front"`` (a bar drawn above the others
    and never narrower than a few pixels: the event a reader looks for, such as a breakdown).
    ``hatch`` is a matplotlib hatch pattern (``"////"``: up to ten of ``/ \\ | - + x o O . *``)
    or None.  ``edges`` draws a thin
    white edge round each bar, so that back-to-back spans stay distinct.

    ``until_next`` is ``(category, name)``: after each span of this category, the trace adds
    a span of that category and name lasting until the row's next span starts (or until the
    run ends) -- what the row was doing in between.  ``carry`` names arguments of the span
    that the added span repeats (each None when the span has no such argument).
    """

    name: str
    colour: str
    legend: str
    layer: Literal["band", "bar", "front"] = "bar"
    hatch: str | None = None
    edges: bool = True
    until_next: tuple[str, str] | None = None
    carry: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label in ("name", "legend"):
            value = getattr(self, label)
            if not isinstance(value, str) or not value or len(value) > _LABEL_LIMIT:
                raise InvalidValueError(
                    f"Category: {label} must be a non-empty str of at most {_LABEL_LIMIT} "
                    f"characters, got {_shown(value)}"
                )
        named = f"Category {self.name!r}"
        if not isinstance(self.colour, str) or not _COLOUR.fullmatch(self.colour):
            raise InvalidValueError(
                f"{named}: colour must be '#rrggbb' (six hex digits), got {_shown(self.colour)}"
            )
        if not isinstance(self.layer, str) or self.layer not in _LAYERS:
            raise InvalidValueError(
                f"{named}: layer must be one of {', '.join(map(repr, _LAYERS))}, "
                f"got {_shown(self.layer)}"
            )
        if self.hatch is not None and (
            not isinstance(self.hatch, str) or not _HATCH.fullmatch(self.hatch)
        ):
            raise InvalidValueError(
                f"{named}: hatch must be None or 1 to 10 of the pattern letters "
                f"/ \\ | - + x o O . *, got {_shown(self.hatch)}"
            )
        if not isinstance(self.edges, bool):
            raise InvalidValueError(f"{named}: edges must be a bool, got {_shown(self.edges)}")
        then = self.until_next
        if then is not None and not (
            isinstance(then, tuple)
            and len(then) == 2
            and all(isinstance(t, str) and t and len(t) <= _LABEL_LIMIT for t in then)
        ):
            raise InvalidValueError(
                f"{named}: until_next must be None or (category, name), two "
                f"non-empty strs, got {_shown(then)}"
            )
        if not isinstance(self.carry, tuple) or not all(isinstance(k, str) for k in self.carry):
            raise InvalidValueError(
                f"{named}: carry must be a tuple of str, got {_shown(self.carry)}"
            )


_categories: dict[str, Category] = {}


def register_category(category: Category, *, replace: bool = False) -> None:
    """Teach traces and timelines a span category: its colour, legend and drawing.

    This is the extension point for layers that report spans: call it once, at import, for
    each category the layer's :func:`record_span` calls use (the simulation toolkit
    registers its journey outcomes this way).  Registering an equal category again does
    nothing; a different one under a name already taken is a ``ValueError`` unless
    ``replace=True`` (for example to recolour a built-in category).
    """
    if not isinstance(category, Category):
        raise InvalidTypeError(f"register_category needs a Category, got {_shown(category)}")
    known = _categories.get(category.name)
    if known is not None and known != category and not replace:
        raise InvalidValueError(
            f"register_category: category {category.name!r} is already registered as "
            f"{known!r}; pass replace=True to change it"
        )
    _categories[category.name] = category


def categories() -> Mapping[str, Category]:
    """Every registered category by name, read-only, in the order they were registered."""
    return MappingProxyType(_categories)


for _builtin in (
    Category("sleep", "#c6dbef", "asleep on a timer", layer="band", edges=False),
    Category("waiting", "#f28e2b", "waiting: on a queue, lock, event, task or I/O", layer="band"),
    Category("alive", "#bab0ac", "alive (trio: asleep and waiting not told apart)", layer="band"),
    Category("span", "#4e79a7", "span"),
    Category("timer", "#3b3b3b", "timer callback"),
):
    register_category(_builtin)
del _builtin

from ._plot import NoSuchRows as NoSuchRows  # noqa: E402  (it needs the registry above)
from ._plot import plot_trace as plot_trace  # noqa: E402
