"""The timeline picture of a trace: :func:`plot_trace`, drawn with matplotlib.

Use it through :func:`virtualtime.trace.plot_trace` (or ``virtualtime plot``).  This module
imports nothing from matplotlib until :func:`plot_trace` is called, so tracing costs no
matplotlib import, and a missing matplotlib is reported only to whoever asked for a picture.
Each span category is drawn as its :class:`~virtualtime.trace.Category` says: the trace's own
record of it (``otherData.categories``) first, then the categories registered in this process.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .._shared._errors import InvalidValueError
from . import MICROSECONDS, TIMERS_ROW, Category, categories, load_trace

__all__ = ["NoSuchRows", "plot_trace"]

WAKE_COLOUR: Final = "#2f6da3"
"""Colour of the tick drawn where a task woke up from a sleep."""

_LAYER_ORDER: Final = {"band": 0, "bar": 1, "front": 2}
"""Bands are drawn first, front bars last."""


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
            except (TypeError, ValueError):
                continue  # a style this version does not understand: draw it as unknown
    return styles


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
            raise InvalidValueError(f"malformed trace event #{index}: {event!r}") from None
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
            raise InvalidValueError(
                f"size: {label} must be an int from 200 to 20000 pixels, got {value!r}"
            )
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise InvalidValueError(f"max_rows must be an int >= 1, got {max_rows!r}")
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
    styles = _styles(trace)
    plain = styles.get("span") or categories()["span"]
    timer = styles.get("timer") or categories()["timer"]

    def style(category: str) -> Category:
        known = styles.get(category)
        if known is None:  # not described anywhere: a colour of its own, named as it is
            known = styles[category] = Category(category, next(extra, plain.colour), category)
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
            label=style(k).legend,
            hatch=style(k).hatch,
            edgecolor="white" if style(k).hatch else None,
        )
        for k, c in used.items()
    ]
    if "sleep" in used:
        handles.insert(1, Line2D([], [], color=WAKE_COLOUR, linewidth=1.2, label="woke up"))
    if instants:
        handles.append(Patch(facecolor=timer.colour, label=timer.legend))
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
