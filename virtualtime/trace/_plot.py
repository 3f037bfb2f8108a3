"""The timeline picture of a trace: :func:`plot_trace`, drawn with matplotlib.

Use it through :func:`virtualtime.trace.plot_trace` (or ``virtualtime plot``).  This module
imports nothing from matplotlib until :func:`plot_trace` is called, so tracing costs no
matplotlib import, and a missing matplotlib is reported only to whoever asked for a picture.
Each span category is drawn as its :class:`~virtualtime.trace.Category` says: the trace's own
record of it (``otherData.categories``) first, then the categories registered in this process.

A trace file is input like any other, and may come from anywhere: every event is checked as it
is read (an error names the event, the field and the rule), times must lie within virtual
time's horizon, the time axis gets about ten ticks however long the run, labels are drawn as
plain text (a ``$`` in a task name is not mathtext), and the picture is never written over the
trace it was drawn from.

Part of ``trace``: may import ``shared``, ``engine`` (see tests/layout.py).
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import NEVER, TICKS_PER_SECOND
from ._categories import Category, categories
from ._chrome import MICROSECONDS, TIMERS_ROW, load_trace
from ._text import _shown

__all__ = ["NoSuchRows", "plot_trace"]

WAKE_COLOUR: Final = "#2f6da3"
"""Colour of the tick drawn where a task woke up from a sleep."""

_LAYER_ORDER: Final = {"band": 0, "bar": 1, "front": 2}
"""Bands are drawn first, front bars last."""

_HORIZON: Final = NEVER / TICKS_PER_SECOND
"""Virtual time's horizon in seconds (about 4.3e28): no trace time may lie beyond it."""

INTERNAL_PREFIXES: Final = ("virtualtime.", "virtualtime ")
"""Rows whose name starts with one of these are virtualtime's own tasks (a vehicle's stepping
task, ``--until``): hidden unless ``plot_trace(internal=True)``."""

_MAX_ROWS: Final = 1000
_MAX_PIXELS: Final = 50_000_000
_TITLE_LIMIT: Final = 500
_PATTERN_LIMIT: Final = 200
_LEGEND_ENTRIES: Final = 12
_ID_LIMIT: Final = 1 << 63


def _styles(trace: Mapping[str, Any]) -> dict[str, Category]:
    """How to draw each category: as the trace recorded it, else as registered here."""
    styles = dict(categories())
    other = trace.get("otherData")
    kept = other.get("categories") if isinstance(other, Mapping) else None
    if isinstance(kept, Mapping):
        for name, style in kept.items():
            if not isinstance(style, Mapping):
                continue
            try:
                styles[str(name)] = Category(str(name), **style)
            except InvalidValueError as error:  # a field this version knows, with a bad value
                raise InvalidValueError(f"the trace's otherData.categories: {error}") from None
            except TypeError:
                continue  # fields this version does not know: draw the category as unknown
    return styles


class NoSuchRows(InvalidValueError):
    """``plot_trace(rows=...)`` matched no row; the message lists the rows there are.

    An :class:`~virtualtime.InvalidValueError` (so also a ``ValueError``).  ``listing`` is
    the message without its hint; ``internal_rows`` counts the rows of virtualtime's own that
    the patterns did match (drawn only when asked for: ``how`` says how, in the hint).
    """

    def __init__(self, listing: str, internal_rows: int = 0, how: str = "internal=True") -> None:
        self.listing = listing
        self.internal_rows = internal_rows
        hint = f" ({internal_rows} internal rows match: drawn with {how})" if internal_rows else ""
        super().__init__(listing + hint)


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
        if isinstance(event, dict):
            _read_event(_Event(event, index), row, processes, order)
    ordered = sorted(rows.values(), key=lambda r: (r.pid, order.get((r.pid, r.tid), r.tid)))
    return [r for r in ordered if not r.empty], processes


@dataclass
class _Event:
    """One trace event being read, and the checks that name it when a field is wrong."""

    fields: Mapping[str, Any]
    index: int

    def fail(self, key: str, rule: str, value: object) -> InvalidValueError:
        phase = self.fields.get("ph")
        kind = f" (ph {_shown(phase, 12)})" if isinstance(phase, str) else ""
        return InvalidValueError(
            f"malformed trace event #{self.index}{kind}: {key!r} {rule}, got {_shown(value)}"
        )

    def integer(self, key: str) -> int:
        value = self.fields.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= _ID_LIMIT:
            raise self.fail(key, "must be an integer below 2**63", value)
        return value

    def text(self, key: str, default: str, where: Mapping[str, Any] | None = None) -> str:
        value = (self.fields if where is None else where).get(key, default)
        if value is None:
            return default
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise self.fail(key, "must be a string", value)
        return str(value)

    def time(
        self, key: str, *, required: bool = True, where: Mapping[str, Any] | None = None
    ) -> float:
        """A time field in trace microseconds, as virtual seconds."""
        fields = self.fields if where is None else where
        if key not in fields:
            if required:
                raise self.fail(key, "is missing (a time in microseconds)", None)
            return 0.0
        value = fields[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, "must be a number (microseconds)", value)
        try:
            seconds = float(value) / MICROSECONDS
        except OverflowError:
            seconds = math.inf
        if not abs(seconds) <= _HORIZON:
            raise self.fail(
                key,
                f"must be a finite number of microseconds within virtual time's horizon "
                f"(±{_HORIZON * MICROSECONDS:.3g})",
                value,
            )
        return seconds


def _read_event(
    event: _Event,
    row: Callable[[int, int], _Row],
    processes: dict[int, str],
    order: dict[tuple[int, int], float],
) -> None:
    fields = event.fields
    phase = fields.get("ph")
    if phase not in ("M", "X", "i", "I"):
        return  # a kind of event the timeline does not draw (counters, flows, ...)
    pid, tid = event.integer("pid"), event.integer("tid")
    if phase == "M":
        args = fields.get("args") or {}
        if not isinstance(args, Mapping):
            raise event.fail("args", "must be an object", args)
        kind = fields.get("name")
        if kind == "thread_name":
            row(pid, tid).name = event.text("name", str(tid), args)
        elif kind == "thread_sort_index":
            if "sort_index" in args:
                order[(pid, tid)] = event.time("sort_index", where=args) * MICROSECONDS
        elif kind == "process_name":
            processes[pid] = event.text("name", str(pid), args)
    elif phase == "X":
        start = event.time("ts")
        duration = event.time("dur", required=False)
        if duration < 0:
            raise event.fail("dur", "must not be negative", fields["dur"])
        end = start + duration
        if not abs(end) <= _HORIZON:
            raise event.fail("dur", "takes the span beyond virtual time's horizon", fields["dur"])
        category = event.text("cat", "") or event.text("name", "") or "span"
        row(pid, tid).bars.setdefault(category, []).append((start, end))
    else:
        row(pid, tid).instants.append(event.time("ts"))


def _nice_step(span: float) -> float:
    """A round tick step (seconds) giving at most ten ticks over ``span`` seconds, any span."""
    step = next((s for s in _NICE_STEPS if span / s <= 10), None)
    if step is not None:
        return step
    days = span / 86400 / 10  # beyond four weeks: 1, 2 or 5 times a power of ten days
    power = 10.0 ** math.floor(math.log10(days))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= days) * 86400


def _time_axis(span: float) -> tuple[float, str, float]:
    """``(tick step, unit name, seconds per unit)`` for a time axis covering ``span`` s."""
    step = _nice_step(span)
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


def _number_label(value: float, step: float) -> str:
    """``value`` (in axis units) with as many digits as a tick ``step`` apart needs."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(value) < 1e7:
        text = f"{value:.{decimals}f}"
        text = text.rstrip("0").rstrip(".") if "." in text else text
        return "0" if text in ("-0", "") else text
    digits = min(16, max(0, math.floor(math.log10(abs(value))) - math.floor(math.log10(step))))
    return f"{value:.{digits}e}"


def _axis_range(
    trace: Mapping[str, Any], pids: set[int], times: list[float]
) -> tuple[float, float]:
    """The stretch of virtual time the axis shows: from the run's start to the last event.

    The start is the earliest start the trace records for the drawn runs; without one, 0,
    unless the first event is further from 0 than the events are from each other (a run
    started at ``--start 1e9``), then the first event.  The stretch is never so short that
    float rounding at its magnitude could merge its ticks.
    """
    first, last = (min(times), max(times)) if times else (0.0, 1.0)
    other = trace.get("otherData")
    runs = other.get("runs") if isinstance(other, Mapping) else None
    starts = [
        float(run["start"])
        for run in (runs if isinstance(runs, list) else ())
        if isinstance(run, Mapping)
        and run.get("pid") in pids
        and isinstance(run.get("start"), (int, float))
        and not isinstance(run.get("start"), bool)
        and abs(float(run["start"])) <= _HORIZON
    ]
    if starts:
        t0 = min(min(starts), first)
    elif 0.0 <= first <= last - first:
        t0 = 0.0
    else:
        t0 = first
    span = max(last - t0, 1e-6, 1e-9 * max(abs(t0), abs(last)))
    if last <= t0:
        span = max(span, 1.0)
    return t0, t0 + span


def _labelled(value: object, limit: int) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_arguments(
    source: object,
    output: object,
    size: object,
    title: object,
    max_rows: object,
    rows: object,
    internal: object,
) -> list[str] | None:
    """Check every argument of :func:`plot_trace` before anything is read or written."""
    if not isinstance(source, (str, os.PathLike, Mapping)):
        raise InvalidTypeError(
            f"source must be a trace file's path or a trace dict, got {_shown(source)}"
        )
    if not isinstance(output, (str, os.PathLike)):
        raise InvalidTypeError(f"output must be a path, got {_shown(output)}")
    if not isinstance(size, tuple) or len(size) != 2:
        raise InvalidTypeError(f"size must be a (width, height) tuple of ints, got {_shown(size)}")
    for label, value in zip(("width", "height"), size, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or not 200 <= value <= 20000:
            raise InvalidValueError(
                f"size: {label} must be an int from 200 to 20000 pixels, got {_shown(value)}"
            )
    if size[0] * size[1] > _MAX_PIXELS:
        raise InvalidValueError(
            f"size: {size[0]}x{size[1]} is {size[0] * size[1]:,} pixels; at most "
            f"{_MAX_PIXELS:,} are drawn (the picture is held in memory)"
        )
    if title is not None and (not isinstance(title, str) or len(title) > _TITLE_LIMIT):
        raise InvalidValueError(
            f"title must be None or a str of at most {_TITLE_LIMIT} characters, got {_shown(title)}"
        )
    if (
        isinstance(max_rows, bool)
        or not isinstance(max_rows, int)
        or not 1 <= max_rows <= _MAX_ROWS
    ):
        raise InvalidValueError(
            f"max_rows must be an int from 1 to {_MAX_ROWS}, got {_shown(max_rows)}"
        )
    if not isinstance(internal, bool):
        raise InvalidTypeError(f"internal must be True or False, got {_shown(internal)}")
    if rows is None:
        patterns = None
    else:
        if isinstance(rows, str):
            patterns = [rows]
        elif isinstance(rows, (list, tuple)):
            patterns = list(rows)
        else:
            raise InvalidTypeError(
                f"rows must be None, a pattern or a list of patterns (str), got {_shown(rows)}"
            )
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern or len(pattern) > _PATTERN_LIMIT:
                raise InvalidValueError(
                    f"rows: a pattern must be a non-empty str of at most {_PATTERN_LIMIT} "
                    f"characters, got {_shown(pattern)}"
                )
    if not isinstance(source, Mapping) and _same_file(source, output):
        raise InvalidValueError(
            f"output {_shown(os.fspath(output))} is the trace file itself; the picture would "
            "overwrite the trace it is drawn from (choose another output file)"
        )
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise InvalidValueError(
            f"output: folder {_shown(folder)} does not exist, for {_shown(os.fspath(output))}"
        )
    return patterns


def _same_file(source: str | os.PathLike[str], output: str | os.PathLike[str]) -> bool:
    if os.path.realpath(source) == os.path.realpath(output):
        return True
    try:
        return os.path.samefile(source, output)  # hard links, case-insensitive file systems
    except OSError:
        return False


def plot_trace(
    source: str | os.PathLike[str] | Mapping[str, Any],
    output: str | os.PathLike[str],
    *,
    size: tuple[int, int] = (1600, 900),
    title: str | None = None,
    max_rows: int = 40,
    rows: Sequence[str] | None = None,
    internal: bool = False,
) -> int:
    """Draw a trace as a Gantt-style timeline (one row per task or vehicle) into ``output``.

    ``source`` is a trace file written by ``virtualtime run --trace`` (or :func:`write_trace`)
    or a trace dict; ``output``'s suffix picks the format (``.png``, ``.svg``, ``.pdf``, or
    another that matplotlib writes) and it must not be the trace file itself; ``size`` is in
    pixels (200 to 20,000 a side, at most 50 million in all).  ``rows`` keeps only the rows
    whose name matches one of these shell-style patterns (``["vehicle *"]``); when none
    matches, :class:`NoSuchRows` (a ``ValueError``) lists the rows there are and nothing is
    written.  Rows past ``max_rows`` (at most 1,000) are left out and counted in the subtitle.
    virtualtime's own tasks (a vehicle's stepping task, whose journeys already have a row of
    their own) are hidden unless ``internal=True``.  The time axis starts where the run
    started (as the trace records it; else at 0).

    Returns the number of rows drawn.  Every argument, and every event of the trace, is
    checked before anything is written: a bad one is an
    :class:`~virtualtime.InvalidValueError` (or :class:`~virtualtime.InvalidTypeError`)
    naming it.  Needs matplotlib (``pip install 'async-virtualtime[plot]'``); raises
    ``ImportError`` saying so when it is missing.
    """
    patterns = _check_arguments(source, output, size, title, max_rows, rows, internal)
    width, height = size
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
    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(output).suffix.lower().removeprefix(".")
    if suffix not in formats:
        raise InvalidValueError(
            f"output must end in .png, .svg or .pdf (or another of {', '.join(sorted(formats))}),"
            f" got {_shown(os.fspath(output))}"
        )
    trace = load_trace(source)

    every, processes = _rows(trace)
    styles = _styles(trace)
    listed = [r for r in every if internal or not r.name.startswith(INTERNAL_PREFIXES)]
    if patterns is not None:
        every = [r for r in every if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]
    # virtualtime's own rows (that the patterns, if any, asked for) are counted, not drawn.
    kept = [r for r in every if internal or not r.name.startswith(INTERNAL_PREFIXES)]
    hidden_internal = len(every) - len(kept)
    every = kept
    if patterns is not None and not every:
        names = sorted({r.name for r in listed})
        shown = ", ".join(_shown(n) for n in names[:30]) + (", ..." if len(names) > 30 else "")
        raise NoSuchRows(
            f"rows: no row matches {', '.join(_shown(p) for p in patterns)}; the rows are "
            f"{shown or '(none: the trace is empty)'}",
            hidden_internal,
        )
    hidden = max(len(every) - max_rows, 0)
    chosen = every[:max_rows]
    several = len({r.pid for r in chosen}) > 1

    times = [t for r in chosen for bars in r.bars.values() for b in bars for t in b]
    times += [t for r in chosen for t in r.instants]
    t0, t1 = _axis_range(trace, {r.pid for r in chosen}, times)

    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    n = max(len(chosen), 1)
    label_size = max(6.0, min(10.0, 0.6 * height / dpi * 72 / (n + 4)))
    used: dict[str, str] = {}
    extra = iter(_OTHER_COLOURS * 10)
    plain = styles.get("span") or categories()["span"]
    timer = styles.get("timer") or categories()["timer"]

    def style(category: str) -> Category:
        known = styles.get(category)
        if known is None:  # not described anywhere: a colour of its own, named as it is
            label = _labelled(category, 60)
            known = styles[category] = Category(label, next(extra, plain.colour), label)
        return known

    def colour(category: str) -> str:
        if category not in used:
            used[category] = style(category).colour
        return used[category]

    def draw_order(category: str) -> tuple[int, str]:
        return _LAYER_ORDER[style(category).layer], category

    pixel = (t1 - t0) / width
    for y, r in enumerate(chosen):
        for category in sorted(r.bars, key=draw_order):
            look = style(category)
            band = look.layer == "band"
            front = look.layer == "front"
            half = 0.14 if band else 0.34
            # Zero-length spans stay visible; a front category (a halt, a vehicle standing)
            # is the event of the picture and never shrinks below a few pixels.
            minimum = pixel * (3.0 if front else 0.5)
            ax.broken_barh(
                [(s, max(e - s, minimum)) for s, e in r.bars[category]],
                (y - half, 2 * half),
                facecolors=colour(category),
                # Back-to-back journeys stay distinct; back-to-back sleeps blend into one band.
                edgecolors="none" if band or not look.edges else "white",
                linewidth=0.8,
                hatch=look.hatch,
                zorder=3 if front else 2,
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
                r.instants, y - 0.34, y + 0.34, colors=timer.colour, linewidth=0.7, alpha=alpha
            )
    if several:
        for y in range(1, len(chosen)):
            if chosen[y].pid != chosen[y - 1].pid:
                ax.axhline(y - 0.5, color="#999999", linewidth=0.8)

    labels = []
    for r in chosen:
        name = _labelled(r.name.removeprefix("__main__."), 32)
        labels.append(f"{r.pid} · {name}" if several else name)
    # Names come from the trace: plain text, never mathtext ("$" in a task name is a "$").
    ax.set_yticks(range(len(chosen)), labels, fontsize=label_size, parse_math=False)
    ax.set_ylim(max(len(chosen), 1) - 0.5, -0.5)
    if not chosen:
        ax.text(0.5, 0.5, "nothing to draw", transform=ax.transAxes, ha="center", color="#777777")
    margin = (t1 - t0) * 0.01
    ax.set_xlim(t0 - margin, t1 + margin)

    step, unit, per_unit = _time_axis(t1 - t0)
    ax.xaxis.set_major_locator(MultipleLocator(step))
    if unit in ("days", "hours") and 2 * 3600 <= t1 - t0 <= 60 * 86400 and abs(t0) < 1e12:

        def fmt(value: float, _pos: int) -> str:
            return _clock_label(value, step)

        ax.set_xlabel("virtual time (H:MM, d = day)" if t1 >= 86400 else "virtual time (H:MM)")
    else:

        def fmt(value: float, _pos: int) -> str:
            return _number_label(value / per_unit, step / per_unit)

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
        file_name = None if isinstance(source, Mapping) else _labelled(Path(source).name, 80)
        title = f"virtualtime timeline · {file_name}" if file_name else "virtualtime timeline"
    fig.suptitle(title, x=0.01, ha="left", fontsize=14, fontweight="bold", parse_math=False)
    instants = sum(len(r.instants) for r in chosen)
    drawn = sum(1 for r in chosen if r.tid != 0)
    subtitle = f"{drawn} row{'' if drawn == 1 else 's'} · "
    if instants:
        subtitle += f"{instants:,} timer callbacks · "
    subtitle += f"{_duration_text(t0)} → {_duration_text(t1)} of virtual time"
    if hidden:
        subtitle += f" · {hidden} more rows not shown"
    if hidden_internal:
        subtitle += f" · {hidden_internal} internal rows hidden"
    if several:
        pids = sorted(processes)
        subtitle += " · " + ", ".join(
            f"{pid}: {_labelled(processes.get(pid, pid), 40)}" for pid in pids[:8]
        )
        subtitle += ", …" if len(pids) > 8 else ""
    ax.set_title(subtitle, loc="left", fontsize=9, color="#555555", parse_math=False)
    handles: list[Any] = [
        Patch(
            facecolor=c,
            label=style(k).legend,
            hatch=style(k).hatch,
            edgecolor="white" if style(k).hatch else None,
        )
        for k, c in used.items()
    ]
    if "sleep" in used:  # the wake-up tick goes right after the sleep it ends
        woke = Line2D([], [], color=WAKE_COLOUR, linewidth=1.2, label="woke up")
        handles.insert(list(used).index("sleep") + 1, woke)
    if instants:
        handles.append(Patch(facecolor=timer.colour, label=timer.legend))
    if len(handles) > _LEGEND_ENTRIES:
        more = len(handles) - _LEGEND_ENTRIES + 1
        handles = handles[: _LEGEND_ENTRIES - 1]
        handles.append(Patch(facecolor="none", label=f"… and {more} more categories"))
    if handles:
        legend = fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=min(len(handles), 6),
            fontsize=9,
            frameon=False,
        )
        for text in legend.get_texts():
            text.set_parse_math(False)
    fig.savefig(output, dpi=dpi)
    return len(chosen)


def _duration_text(seconds: float) -> str:
    """A virtual instant for people: ``0 s``, ``90 s``, ``36 min``, ``5.5 h``, ``2.25 d``."""
    if abs(seconds) < 1e-6:
        return "0 s"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"
