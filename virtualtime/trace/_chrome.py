"""The Chrome trace format: building a trace from a loop's history, writing and reading it.

:func:`chrome_trace` turns one loop's history (its timers and tasks) plus the spans other
layers reported into the JSON-ready dict Perfetto and ``chrome://tracing`` read: rows split
into lanes, a task's sleeps and waits, timer instants, and the stretches categories ask for
after their spans (``until_next``).  :func:`write_trace` writes such a dict one event per
line, and :func:`load_trace` reads a file back with its shape checked.  A
:class:`~virtualtime.trace.TraceRecorder` builds its traces with the same pieces.

Part of ``trace``: may import ``shared``, ``engine`` (see tests/layout.py).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final

from .._engine._history import RecordKind, TaskRecord
from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import check_finite
from .._version import __version__
from ._categories import Category, categories
from ._text import _shown

if TYPE_CHECKING:
    from .._engine._history import HistoryRecord

MICROSECONDS: Final = 1_000_000
"""Trace microseconds per virtual second."""

TIMERS_ROW: Final = "timers"
"""Name of the row (``tid`` 0) that holds instants for timers that are plain callbacks."""


def _ts(seconds: float) -> float:
    """Virtual seconds to trace microseconds, to the nanosecond."""
    return round(seconds * MICROSECONDS, 3)


@dataclass(frozen=True, slots=True)
class Span:
    """One stretch of virtual time on a named row, reported by :func:`record_span`."""

    row: str
    name: str
    start: float
    end: float
    category: str = "span"
    args: Mapping[str, object] = field(default_factory=dict)


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
    styles = {name: _style(c) for name, c in categories().items() if name in used}
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
    following = {n: c for n, c in categories().items() if c.until_next is not None}
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
