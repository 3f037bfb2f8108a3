"""What happened when: a virtual loop's history as a Chrome trace, and a timeline picture.

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
instant it was scheduled, the instant it fired and what it woke.  A timer that woke a task
(``"task <name>"``: an ``asyncio.sleep``, anyio's ``sleep``, a ``virtualtime.sleep``) is a
stretch that task spent **asleep**, drawn as a ``sleep`` span on the task's row from
``scheduled`` to ``time``.  Running takes no virtual time (the clock only moves from timer to
timer), so a stretch of virtual time between a task waking up and its next timed sleep is time
it spent **waiting** on something that is not a timer -- a queue, a lock, an event, another
task, real I/O: that stretch is a ``waiting`` span.  The moment a task runs is the tick drawn
where a sleep ends.  A timer whose callback is not a task wake-up (a
``call_later`` callback, the expiry of ``asyncio.timeout``) is an instant event on the
``timers`` row.  Sleeps that were cancelled before they fired never reach the history, so a
task whose sleep was cut short by a timeout shows that stretch as waiting.

Other layers add their own spans through :func:`record_span`: the simulation toolkit reports
each vehicle journey there, with its outcome.  A journey that ended ``halted`` leaves its
vehicle standing until its next journey begins (a resume, or a new destination), or until the
run ends: that stretch is added as a span of its own, category ``stopped``, so a breakdown
shows as long as it lasted.  Spans that share a row never overlap: a row
whose spans would overlap (two tasks with the same name) is split into lanes
(``"worker (2)"``).  When history records carry a ``task_id``, a gap between the spans of two
different tasks that share a name is left empty rather than drawn as waiting; without it, tasks
that share a name one after another (anyio names tasks after their function) look like one
task that waited in between.

Units and layout
----------------
Trace time is virtual time: one virtual second is 1,000,000 trace microseconds, so Perfetto's
time axis reads in virtual seconds.  Each loop (each ``asyncio.run``) is a trace *process*
(``pid``) and each row a *thread* (``tid``), numbered in order of the row's first span;
``tid`` 0 of every process is the ``timers`` row, sorted last.  Events are sorted by row and
then by time.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._loop import HistoryRecord

__all__ = [
    "COLOURS",
    "LEGEND",
    "MICROSECONDS",
    "NoSuchRows",
    "Span",
    "TraceRecorder",
    "chrome_trace",
    "load_trace",
    "plot_trace",
    "record_span",
    "recording",
    "write_trace",
]

MICROSECONDS: Final = 1_000_000
"""Trace microseconds per virtual second."""

TIMERS_ROW: Final = "timers"
"""Name of the row (``tid`` 0) that holds instants for timers that are plain callbacks."""

_TASK_PREFIX: Final = "task "


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
        self._runs: list[tuple[object, str, Sequence[HistoryRecord], int]] = []
        self._keys: dict[int, int] = {}
        self._spans: dict[int, list[Span]] = {}
        self._previous: TraceRecorder | None = None

    def __enter__(self) -> TraceRecorder:
        global _active
        self._previous, _active = _active, self
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _active
        _active, self._previous = self._previous, None

    def add_run(
        self,
        key: object,
        label: str,
        history: Sequence[HistoryRecord] = (),
        dropped: int = 0,
    ) -> None:
        """Register one run: ``key`` is its loop or clock, ``history`` what it dispatched.

        ``dropped`` is how many timers fired that the (bounded) history no longer holds; it
        is noted in the trace.  Registering a key again replaces its label and history.
        """
        index = self._index(key)
        self._runs[index] = (key, label, tuple(history), dropped)

    def forget(self, key: object) -> None:
        """Stop filing spans under ``key``'s run, and let go of ``key``; its run stays.

        Call it when the loop or clock is done (closed), so the recorder does not keep it
        alive and a new loop that happens to get the same ``id`` starts a run of its own.
        """
        index = self._keys.pop(id(key), None)
        if index is not None:
            _key, label, history, dropped = self._runs[index]
            self._runs[index] = (None, label, history, dropped)

    def add_span(self, span: Span, key: object | None = None) -> None:
        """File ``span`` under the run of ``key`` (default: the run that is executing now)."""
        if key is None:
            key = _current_run_key()
        self._spans.setdefault(self._index(key), []).append(span)

    def _index(self, key: object) -> int:
        index = self._keys.get(id(key))
        if index is None:
            index = self._keys[id(key)] = len(self._runs)
            self._runs.append((key, f"run {index + 1}", (), 0))
        return index

    def trace(self, **metadata: object) -> dict[str, Any]:
        """The Chrome trace of every registered run, one trace process per run."""
        events: list[dict[str, Any]] = []
        runs = []
        for index, (_key, label, history, dropped) in enumerate(self._runs):
            pid = index + 1
            events.extend(_run_events(history, self._spans.get(index, ()), pid=pid, label=label))
            runs.append({"pid": pid, "label": label, "timers": len(history), "dropped": dropped})
        return _document(events, runs=runs, **metadata)

    def write(self, path: str | os.PathLike[str], **metadata: object) -> int:
        """Write :meth:`trace` to ``path``; return the number of events written."""
        return write_trace(self.trace(**metadata), path)


_active: TraceRecorder | None = None


def recording() -> bool:
    """Whether a trace is being recorded now (so :func:`record_span` is not a no-op).

    Check it before building expensive span arguments.
    """
    return _active is not None


def record_span(
    row: str, name: str, start: float, end: float, *, category: str = "span", **args: object
) -> None:
    """Report that ``row`` spent virtual time ``start``..``end`` doing ``name``.

    This is the hook other layers call to appear in traces and timelines; when nothing is
    recording it only checks the times.  ``row`` names the timeline row (``"vehicle van-1"``),
    ``name`` labels the span (``"depot -> dock 3"``), ``category`` groups spans for colour
    (the timeline knows ``arrived``, ``halted``, ``redirected`` and ``reset``; after a
    ``halted`` span the trace adds a ``stopped`` one until the row's next span), and ``args``
    are shown when the span is selected in Perfetto.  Times are virtual seconds of the clock
    the caller runs on; ``end`` must not be before ``start``.
    """
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"record_span: start and end must be finite, got {start!r}, {end!r}")
    if end < start:
        raise ValueError(f"record_span: end ({end!r}) must not be before start ({start!r})")
    recorder = _active
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
) -> dict[str, Any]:
    """The Chrome trace (a JSON-ready dict) of one loop's ``history`` plus extra ``spans``.

    Use it to trace a loop you run yourself::

        loop = virtualtime.new_event_loop(history=100_000)
        loop.run_until_complete(main())
        write_trace(chrome_trace(loop.history), "out.json")
    """
    records = tuple(history)
    events = _run_events(records, tuple(spans), pid=1, label=label)
    return _document(events, runs=[{"pid": 1, "label": label, "timers": len(records)}])


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
    from . import __version__

    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": f"virtualtime {__version__}",
            "time": "virtual: 1 virtual second = 1,000,000 trace microseconds",
            **metadata,
        },
    }


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


def _run_events(
    history: Sequence[HistoryRecord], spans: Iterable[Span], *, pid: int, label: str
) -> list[dict[str, Any]]:
    lanes = _Lanes(pid)
    body: list[dict[str, Any]] = []
    for record in history:
        if record.what.startswith(_TASK_PREFIX):
            start, end = record.scheduled, record.time
            # Tasks may share a name (anyio names them after their function); when the loop
            # tells tasks apart, a gap between two different tasks is not drawn as waiting.
            owner = getattr(record, "task_id", None)
            tid, previous = lanes.place(record.what[len(_TASK_PREFIX) :], start, end, owner)
            if previous is not None and previous < start:
                body.append(_span(pid, tid, "waiting", "waiting", previous, start, {}))
            args = {"slept": end - start, "priority": record.priority, "seq": record.seq}
            body.append(_span(pid, tid, "sleep", "sleep", start, end, args))
        else:
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
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    ordered = sorted(ordered + _standing(ordered, _run_end(history, ordered)), key=_span_order)
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


def _run_end(history: Sequence[HistoryRecord], spans: Sequence[Span]) -> float:
    """The last instant anything in this run is known to have happened."""
    ends = [record.time for record in history] + [span.end for span in spans]
    return max(ends, default=0.0)


def _standing(spans: Sequence[Span], end: float) -> list[Span]:
    """A ``stopped`` span after each ``halted`` one, until its row's next span (or ``end``)."""
    by_row: dict[str, list[Span]] = {}
    for span in spans:
        by_row.setdefault(span.row, []).append(span)
    added = []
    for row, row_spans in by_row.items():
        for index, span in enumerate(row_spans):
            if span.category != "halted":
                continue
            later = [s.start for s in row_spans[index + 1 :] if s.start >= span.end]
            until = min(later, default=end)
            if until > span.end:
                args = {"position": span.args.get("position"), "after": span.name}
                added.append(Span(row, "halted, standing", span.end, until, "stopped", args))
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


# --------------------------------------------------------------------------- the picture


COLOURS: Final[Mapping[str, str]] = {
    "sleep": "#c6dbef",
    "waiting": "#f28e2b",
    "arrived": "#59a14f",
    "halted": "#e15759",
    "stopped": "#f4a6a7",
    "redirected": "#edc948",
    "reset": "#9c9c9c",
    "span": "#4e79a7",
    "timer": "#3b3b3b",
}
"""Fill colour of each span category (and of timer instants) in :func:`plot_trace`."""

WAKE_COLOUR: Final = "#2f6da3"
"""Colour of the tick drawn where a task woke up from a sleep."""

LEGEND: Final[Mapping[str, str]] = {
    "sleep": "asleep on a timer",
    "waiting": "waiting: on a queue, lock, event, task or I/O",
    "timer": "timer callback",
    "arrived": "journey: arrived",
    "halted": "journey: halted",
    "stopped": "halted: standing until it moves again",
    "redirected": "journey: redirected",
    "reset": "journey: reset",
}
"""Legend text of each span category in :func:`plot_trace`."""

_BANDS: Final = frozenset({"sleep", "waiting"})
"""Categories drawn as a thin band: a task that is not running (asleep, or waiting)."""

_EMPHASISED: Final = frozenset({"halted", "stopped"})
"""Categories drawn at least a few pixels wide, above the rest."""


def _draw_order(category: str) -> tuple[int, str]:
    return (0 if category in _BANDS else 2 if category in _EMPHASISED else 1), category


class NoSuchRows(ValueError):
    """``plot_trace(rows=...)`` matched no row; the message lists the rows there are."""


_OTHER_COLOURS: Final = ("#76b7b2", "#b07aa1", "#ff9da7", "#9c755f", "#af7aa1")

_NICE_STEPS: Final = (
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05,
    0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600,
    3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400,
)  # fmt: skip


@dataclass
class _Row:
    pid: int
    tid: int
    name: str
    bars: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    instants: list[float] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.bars and not self.instants


def load_trace(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Read a Chrome trace file (or pass a trace dict through), checking its basic shape."""
    if isinstance(source, Mapping):
        trace = dict(source)
    else:
        with open(source, encoding="utf-8") as file:
            try:
                loaded = json.load(file)
            except json.JSONDecodeError as error:
                raise ValueError(f"{os.fspath(source)!r} is not JSON: {error}") from None
        trace = {"traceEvents": loaded} if isinstance(loaded, list) else loaded
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(
            "not a Chrome trace: expected a JSON object with a 'traceEvents' list "
            "(as written by virtualtime run --trace)"
        )
    return trace


def _rows(trace: Mapping[str, Any]) -> tuple[list[_Row], dict[int, str]]:
    rows: dict[tuple[int, int], _Row] = {}
    processes: dict[int, str] = {}
    order: dict[tuple[int, int], float] = {}

    def row(pid: int, tid: int) -> _Row:
        key = (pid, tid)
        found = rows.get(key)
        if found is None:
            name = TIMERS_ROW if tid == 0 else f"thread {tid}"
            found = rows[key] = _Row(pid, tid, name)
        return found

    for index, event in enumerate(trace["traceEvents"]):
        if not isinstance(event, dict):
            continue
        try:
            _read_event(event, row, processes, order)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"malformed trace event #{index}: {event!r}") from None
    ordered = sorted(rows.values(), key=lambda r: (r.pid, order.get((r.pid, r.tid), r.tid)))
    return [r for r in ordered if not r.empty], processes


def _read_event(
    event: Mapping[str, Any],
    row: Callable[[int, int], _Row],
    processes: dict[int, str],
    order: dict[tuple[int, int], float],
) -> None:
    phase = event.get("ph")
    pid, tid = int(event.get("pid", 0)), int(event.get("tid", 0))
    if phase == "M":
        args = event.get("args") or {}
        if event.get("name") == "thread_name":
            row(pid, tid).name = str(args.get("name", tid))
        elif event.get("name") == "thread_sort_index":
            order[(pid, tid)] = float(args.get("sort_index", tid))
        elif event.get("name") == "process_name":
            processes[pid] = str(args.get("name", pid))
    elif phase == "X":
        start = float(event["ts"]) / MICROSECONDS
        end = start + float(event.get("dur", 0.0)) / MICROSECONDS
        category = str(event.get("cat") or event.get("name") or "span")
        row(pid, tid).bars.setdefault(category, []).append((start, end))
    elif phase in ("i", "I"):
        row(pid, tid).instants.append(float(event["ts"]) / MICROSECONDS)


def _time_axis(span: float) -> tuple[float, str, float]:
    """``(tick step, unit name, seconds per unit)`` for a time axis covering ``span`` s."""
    step = next((s for s in _NICE_STEPS if span / s <= 10), _NICE_STEPS[-1])
    if step >= 86400:
        return step, "days", 86400.0
    if step >= 3600 or span >= 2 * 3600:
        return step, "hours", 3600.0
    if step >= 60 or span >= 4 * 60:
        return step, "minutes", 60.0
    if step >= 1:
        return step, "seconds", 1.0
    if step >= 1e-3:
        return step, "ms", 1e-3
    return step, "µs", 1e-6


def _clock_label(seconds: float, step: float) -> str:
    """``d1 06:30`` / ``06:30`` / ``06:30:15`` style label for a time-of-day axis."""
    days, rest = divmod(round(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if step % 60 else "")
    return f"d{days} {text}" if days else text


def plot_trace(
    source: str | os.PathLike[str] | Mapping[str, Any],
    output: str | os.PathLike[str],
    *,
    size: tuple[int, int] = (1600, 900),
    title: str | None = None,
    max_rows: int = 40,
    rows: Sequence[str] | None = None,
) -> int:
    """Draw a trace as a Gantt-style timeline (one row per task or vehicle) into ``output``.

    ``source`` is a trace file written by ``virtualtime run --trace`` (or :func:`write_trace`)
    or a trace dict; ``output``'s suffix picks the format (``.png``, ``.svg``, ``.pdf``);
    ``size`` is in pixels.  ``rows`` keeps only the rows whose name matches one of these
    shell-style patterns (``["vehicle *"]``); when none matches, :class:`NoSuchRows` (a
    ``ValueError``) lists the rows there are and nothing is written.  Rows past ``max_rows``
    are left out (and counted in the subtitle).
    Returns the number of rows drawn.  Needs matplotlib (``pip install
    'async-virtualtime[plot]'``); raises ``ImportError`` saying so when it is missing.
    """
    width, height = size
    for label, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, int) or not 200 <= value <= 20000:
            raise ValueError(
                f"size: {label} must be an int from 200 to 20000 pixels, got {value!r}"
            )
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ValueError(f"max_rows must be an int >= 1, got {max_rows!r}")
    trace = load_trace(source)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter, MultipleLocator
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib: pip install 'async-virtualtime[plot]'"
        ) from None

    every, processes = _rows(trace)
    if rows is not None:
        patterns = [rows] if isinstance(rows, str) else list(rows)
        matching = [r for r in every if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]
        if not matching:
            names = sorted({r.name for r in every})
            shown = ", ".join(repr(n) for n in names[:30]) + (", ..." if len(names) > 30 else "")
            raise NoSuchRows(
                f"rows: no row matches {', '.join(repr(p) for p in patterns)}; the rows are "
                f"{shown or '(none: the trace is empty)'}"
            )
        every = matching
    hidden = max(len(every) - max_rows, 0)
    chosen = every[:max_rows]
    several = len({r.pid for r in chosen}) > 1

    times = [t for r in chosen for bars in r.bars.values() for b in bars for t in b]
    times += [t for r in chosen for t in r.instants]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    if t1 <= t0:
        t1 = t0 + 1.0

    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    n = max(len(chosen), 1)
    label_size = max(6.0, min(10.0, 0.6 * height / dpi * 72 / (n + 4)))
    used: dict[str, str] = {}
    extra = iter(_OTHER_COLOURS * 10)

    def colour(category: str) -> str:
        if category not in used:
            used[category] = COLOURS.get(category) or next(extra, COLOURS["span"])
        return used[category]

    pixel = (t1 - t0) / width
    for y, r in enumerate(chosen):
        for category in sorted(r.bars, key=_draw_order):
            band = category in _BANDS
            half = 0.14 if band else 0.34
            # Zero-length spans stay visible; a halt (its journey, then the vehicle standing)
            # is the event of the picture and never shrinks below a few pixels.
            minimum = pixel * (3.0 if category in _EMPHASISED else 0.5)
            ax.broken_barh(
                [(s, max(e - s, minimum)) for s, e in r.bars[category]],
                (y - half, 2 * half),
                facecolors=colour(category),
                # Back-to-back journeys stay distinct; back-to-back sleeps blend into one band.
                edgecolors="none" if band or category == "halted" else "white",
                linewidth=0.8,
                hatch="////" if category == "stopped" else None,
                zorder=3 if category in _EMPHASISED else 2,
            )
        wakeups = [e for _s, e in r.bars.get("sleep", ())]
        if wakeups:
            # Each sleep ends with the task waking up: a tick per wake-up shows when it ran.
            # Dense ticks fade, so that how often a task woke reads as a shade.
            alpha = min(1.0, max(0.12, width / (4 * len(wakeups))))
            ax.vlines(wakeups, y - 0.2, y + 0.2, colors=WAKE_COLOUR, linewidth=0.6, alpha=alpha)
        if r.instants:
            alpha = min(1.0, max(0.2, width / (4 * len(r.instants))))
            ax.vlines(
                r.instants, y - 0.34, y + 0.34, colors=COLOURS["timer"], linewidth=0.7, alpha=alpha
            )
    if several:
        for y in range(1, len(chosen)):
            if chosen[y].pid != chosen[y - 1].pid:
                ax.axhline(y - 0.5, color="#999999", linewidth=0.8)

    labels = []
    for r in chosen:
        name = r.name.removeprefix("__main__.")
        name = name if len(name) <= 32 else name[:31] + "…"
        labels.append(f"{r.pid} · {name}" if several else name)
    ax.set_yticks(range(len(chosen)), labels, fontsize=label_size)
    ax.set_ylim(max(len(chosen), 1) - 0.5, -0.5)
    if not chosen:
        ax.text(0.5, 0.5, "nothing to draw", transform=ax.transAxes, ha="center", color="#777777")
    margin = (t1 - t0) * 0.01
    ax.set_xlim(t0 - margin, t1 + margin)

    step, unit, per_unit = _time_axis(t1 - t0)
    ax.xaxis.set_major_locator(MultipleLocator(step))
    if unit in ("days", "hours") and t1 - t0 >= 2 * 3600:

        def fmt(value: float, _pos: int) -> str:
            return _clock_label(value, step)

        ax.set_xlabel("virtual time (H:MM, d = day)" if t1 >= 86400 else "virtual time (H:MM)")
    else:

        def fmt(value: float, _pos: int) -> str:
            return f"{value / per_unit:g}"

        ax.set_xlabel(f"virtual time ({unit})")
    ax.xaxis.set_major_formatter(FuncFormatter(fmt))
    ax.tick_params(axis="x", labelsize=9, colors="#444444")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.spines["bottom"].set_color("#999999")

    if title is None:
        file_name = None if isinstance(source, Mapping) else Path(source).name
        title = f"virtualtime timeline · {file_name}" if file_name else "virtualtime timeline"
    fig.suptitle(title, x=0.01, ha="left", fontsize=14, fontweight="bold")
    instants = sum(len(r.instants) for r in chosen)
    subtitle = f"{sum(1 for r in chosen if r.tid != 0)} rows · "
    if instants:
        subtitle += f"{instants:,} timer callbacks · "
    subtitle += f"{_duration_text(t0)} → {_duration_text(t1)} of virtual time"
    if hidden:
        subtitle += f" · {hidden} more rows not shown"
    if several:
        subtitle += " · " + ", ".join(
            f"{pid}: {processes.get(pid, pid)}" for pid in sorted(processes)
        )
    ax.set_title(subtitle, loc="left", fontsize=9, color="#555555")
    handles: list[Any] = [
        Patch(
            facecolor=c,
            label=LEGEND.get(k, k),
            hatch="////" if k == "stopped" else None,
            edgecolor="white" if k == "stopped" else None,
        )
        for k, c in used.items()
    ]
    if "sleep" in used:
        handles.insert(1, Line2D([], [], color=WAKE_COLOUR, linewidth=1.2, label="woke up"))
    if instants:
        handles.append(Patch(facecolor=COLOURS["timer"], label=LEGEND["timer"]))
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=min(len(handles), 6),
            fontsize=9,
            frameon=False,
        )
    fig.savefig(output, dpi=dpi)
    return len(chosen)


def _duration_text(seconds: float) -> str:
    """A virtual instant for people: ``0 s``, ``90 s``, ``36 min``, ``5.5 h``, ``2.25 d``."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"
