"""Chrome traces from a virtual loop's history, the record_span hook, and the timeline plot."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple, cast

import pytest

import virtualtime
import virtualtime.sim  # registers the journey categories (arrived, halted, stopped, ...)
from virtualtime.trace import (
    Category,
    NoSuchRows,
    RecordKind,
    Span,
    TraceRecorder,
    categories,
    chrome_trace,
    load_trace,
    plot_trace,
    record_span,
    recording,
    register_category,
    write_trace,
)
from virtualtime.trace import _categories as category_registry

PHASES = {"M", "X", "i"}


def check_trace(trace: dict[str, Any]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Assert the structure Perfetto and chrome://tracing need; return events per row."""
    assert isinstance(trace["traceEvents"], list)
    json.dumps(trace)  # serialisable as it is
    named: set[tuple[int, int]] = set()
    rows: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in trace["traceEvents"]:
        assert event["ph"] in PHASES, event
        assert isinstance(event["pid"], int), event
        assert isinstance(event["tid"], int), event
        assert isinstance(event["name"], str), event
        assert event["name"], event
        if event["ph"] == "M":
            assert isinstance(event["args"], dict)
            if event["name"] == "thread_name":
                named.add((event["pid"], event["tid"]))
            continue
        assert isinstance(event["ts"], float | int), event
        assert event["ts"] >= 0, event
        if event["ph"] == "X":
            assert isinstance(event["dur"], float | int), event
            assert event["dur"] >= 0, event
        else:
            assert event["s"] in ("t", "p", "g"), event
        rows[(event["pid"], event["tid"])].append(event)
    for key, events in rows.items():
        assert key in named, f"row {key} has a thread_name"
        stamps = [event["ts"] for event in events]
        assert stamps == sorted(stamps), f"timestamps of row {key} are monotonic"
        spans = [event for event in events if event["ph"] == "X"]
        for before, after in itertools.pairwise(spans):
            assert before["ts"] + before["dur"] <= after["ts"] + 1e-6, f"spans overlap on {key}"
    return rows


def row_names(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def spans_of(trace: dict[str, Any], row: str) -> list[tuple[str, float, float]]:
    names = row_names(trace)
    return [
        (e["name"], e["ts"], e["dur"])
        for e in trace["traceEvents"]
        if e["ph"] == "X" and names[(e["pid"], e["tid"])] == row
    ]


async def scenario() -> None:
    """sleeper: sleeps 1 and 2 s, waits for an event set at t=5, sleeps 1 s more."""
    loop = asyncio.get_running_loop()
    event = asyncio.Event()

    async def sleeper() -> None:
        await asyncio.sleep(1)
        await asyncio.sleep(2)
        await event.wait()
        await asyncio.sleep(1)

    async def setter() -> None:
        await asyncio.sleep(5)
        event.set()

    def ping() -> None:
        pass

    loop.call_later(2.5, ping)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.25):
            await asyncio.sleep(10)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(sleeper(), name="sleeper")
        tg.create_task(setter(), name="setter")


@pytest.fixture
def traced() -> dict[str, Any]:
    loop = virtualtime.new_event_loop(history=1000)
    try:
        loop.run_until_complete(scenario())
        return chrome_trace(loop.history, label="scenario")
    finally:
        loop.close()


def test_the_trace_has_the_structure_viewers_need(traced: dict[str, Any]) -> None:
    rows = check_trace(traced)
    assert len(rows) >= 3
    assert "virtual" in traced["otherData"]["time"]


def test_a_task_row_has_a_span_for_each_stretch_asleep_or_waiting(
    traced: dict[str, Any],
) -> None:
    # Started at t=0.25 (after the timeout), the sleeper sleeps [0.25, 1.25] and [1.25, 3.25],
    # waits on the event (not a timer, so not asleep, and not running) until t=5.25, then
    # sleeps [5.25, 6.25].
    us = 1_000_000
    assert spans_of(traced, "sleeper") == [
        ("sleep", 0.25 * us, 1 * us),
        ("sleep", 1.25 * us, 2 * us),
        ("waiting", 3.25 * us, 2 * us),
        ("sleep", 5.25 * us, 1 * us),
    ]
    assert spans_of(traced, "setter") == [("sleep", 0.25 * us, 5 * us)]


def test_plain_callbacks_are_instants_on_the_timers_row(traced: dict[str, Any]) -> None:
    names = row_names(traced)
    instants = [e for e in traced["traceEvents"] if e["ph"] == "i"]
    assert {names[(e["pid"], e["tid"])] for e in instants} == {"timers"}
    by_name = {e["name"]: e for e in instants}
    ping = next(e for name, e in by_name.items() if name.endswith("ping"))
    assert ping["ts"] == 2.5 * 1_000_000
    assert ping["args"]["delay"] == 2.5
    # The 0.25 s timeout that fired is an instant too (asyncio's Timeout callback).
    assert any(e["ts"] == 0.25 * 1_000_000 for name, e in by_name.items() if name != ping["name"])


def test_a_sleep_cut_short_never_fired_and_is_no_span(traced: dict[str, Any]) -> None:
    # The main task's sleep(10) was cancelled by the 0.25 s timeout: no timer fired for it.
    assert "Task-1" not in row_names(traced).values()
    assert all(e["dur"] < 10e6 for e in traced["traceEvents"] if e["ph"] == "X")


def test_rows_are_ordered_by_first_activity_and_timers_last(traced: dict[str, Any]) -> None:
    meta = [e for e in traced["traceEvents"] if e["ph"] == "M"]
    sort = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    ordered = [names[tid] for tid in sorted(sort, key=sort.__getitem__)]
    assert ordered[-1] == "timers"
    assert ordered.index("setter") < ordered.index("sleeper")  # same start: by name


def test_virtual_seconds_become_trace_microseconds_exactly() -> None:
    loop = virtualtime.new_event_loop(history=100)

    async def tick() -> None:
        for _ in range(10):
            await asyncio.sleep(0.1)

    try:
        loop.run_until_complete(tick())
        trace = chrome_trace(loop.history)
    finally:
        loop.close()
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["ts"] for e in spans] == [i * 100_000.0 for i in range(10)]
    assert spans[-1]["ts"] + spans[-1]["dur"] == 1_000_000.0


def test_tasks_sharing_a_name_get_lanes_that_never_overlap() -> None:
    loop = virtualtime.new_event_loop(history=100)

    async def main() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(asyncio.sleep(3), name="worker")
            tg.create_task(asyncio.sleep(1), name="worker")

    try:
        loop.run_until_complete(main())
        trace = chrome_trace(loop.history)
    finally:
        loop.close()
    check_trace(trace)
    assert {"worker", "worker (2)"} <= set(row_names(trace).values())


class RecordWithTask(NamedTuple):
    """A history record as a loop that tells tasks apart would give it."""

    time: float
    priority: int
    seq: int
    what: str
    scheduled: float
    task_id: int | None
    kind: RecordKind = RecordKind.TASK

    @property
    def task_name(self) -> str:
        return self.what.removeprefix("task ")


@pytest.mark.parametrize(("first", "second", "waiting"), [(1, 2, False), (1, 1, True)])
def test_a_gap_between_two_tasks_sharing_a_name_is_not_waiting(
    first: int, second: int, waiting: bool
) -> None:
    records = [
        RecordWithTask(10.0, 0, 0, "task driver", 0.0, first),
        RecordWithTask(30.0, 0, 1, "task driver", 20.0, second),
    ]
    trace = chrome_trace(cast("list[virtualtime.HistoryRecord]", records))
    check_trace(trace)
    expected = [("sleep", 0.0, 10e6), ("sleep", 20e6, 10e6)]
    if waiting:
        expected.insert(1, ("waiting", 10e6, 10e6))
    assert spans_of(trace, "driver") == expected


def test_record_span_is_a_no_op_when_nothing_records() -> None:
    assert not recording()
    record_span("vehicle van", "depot -> dock", 0.0, 5.0)  # nothing to see, nothing raised


@pytest.mark.parametrize(("start", "end"), [(5.0, 1.0), (0.0, float("inf")), (float("nan"), 1)])
def test_record_span_rejects_bad_times(start: float, end: float) -> None:
    with pytest.raises(ValueError, match="record_span"):
        record_span("vehicle van", "x", start, end)


def test_spans_reported_during_a_run_land_in_that_run() -> None:
    loop = virtualtime.new_event_loop(history=100)

    async def journey() -> None:
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(90)
        record_span(
            "vehicle van-1",
            "depot -> dock 3",
            start,
            start + 90,
            category="arrived",
            distance=1200.0,
        )

    try:
        with TraceRecorder() as recorder:
            assert recording()
            loop.run_until_complete(journey())
        assert not recording()
        recorder.add_run(loop, "fleet", loop.history)
        trace = recorder.trace()
    finally:
        loop.close()
    check_trace(trace)
    [event] = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "arrived"]
    assert row_names(trace)[(event["pid"], event["tid"])] == "vehicle van-1"
    assert (event["name"], event["ts"], event["dur"]) == ("depot -> dock 3", 0.0, 90e6)
    assert event["args"] == {"distance": 1200.0}


def test_each_run_is_a_trace_process() -> None:
    loops = [virtualtime.new_event_loop(history=10, start=s) for s in (0.0, 100.0)]
    try:
        for loop in loops:
            loop.run_until_complete(asyncio.sleep(1))
        recorder = TraceRecorder()
        for i, loop in enumerate(loops):
            recorder.add_run(loop, f"run {i}", loop.history)
        trace = recorder.trace()
    finally:
        for loop in loops:
            loop.close()
    check_trace(trace)
    processes = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert processes == {1: "run 0", 2: "run 1"}
    starts = sorted((e["pid"], e["ts"]) for e in trace["traceEvents"] if e["ph"] == "X")
    assert starts == [(1, 0.0), (2, 100e6)]


def test_write_trace_round_trips_through_json(traced: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    count = write_trace(traced, path)
    loaded = json.loads(path.read_text(encoding="utf-8"))
    assert loaded == traced
    assert count == len(traced["traceEvents"])


def test_load_trace_rejects_files_that_are_not_traces(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"events": []}', encoding="utf-8")
    with pytest.raises(ValueError, match="traceEvents"):
        load_trace(bad)
    bad.write_text("not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not JSON"):
        load_trace(bad)


# ------------------------------------------------------------------------------- plotting


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "a PNG file"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plot_writes_a_png_of_the_requested_size(traced: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    source = tmp_path / "scenario.json"
    write_trace(traced, source)
    out = tmp_path / "timeline.png"
    rows = plot_trace(source, out, size=(900, 400))
    assert rows == 3  # setter, sleeper, timers (the main task never completed a sleep)
    assert png_size(out) == (900, 400)
    assert out.stat().st_size > 5000


def test_plot_draws_journeys_and_several_runs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    recorder = TraceRecorder()
    first, second = object(), object()
    recorder.add_run(first, "morning")
    recorder.add_run(second, "evening")
    for i, outcome in enumerate(("arrived", "halted", "redirected")):
        span = (i * 600.0, i * 600.0 + 500.0)
        recorder.add_span(Span(f"vehicle van-{i}", "depot -> dock", *span, outcome), key=first)
    recorder.add_span(Span("vehicle van-9", "dock -> depot", 0.0, 7200.0, "arrived"), second)
    trace = recorder.trace()
    check_trace(trace)
    out = tmp_path / "fleet.png"
    assert plot_trace(trace, out, size=(640, 360), title="fleet") == 4
    assert png_size(out) == (640, 360)


def test_plot_limits_rows(traced: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "two.png"
    assert plot_trace(traced, out, size=(400, 300), max_rows=2) == 2


def test_plot_can_pick_rows_by_pattern(traced: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert plot_trace(traced, tmp_path / "s.png", size=(400, 300), rows=["s*"]) == 2


def test_rows_that_match_nothing_are_an_error_that_writes_nothing(
    traced: dict[str, Any], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "n.png"
    out.write_bytes(b"the picture from before")
    with pytest.raises(NoSuchRows) as caught:
        plot_trace(traced, out, size=(400, 300), rows=["nothing*"])
    assert str(caught.value) == (
        "rows: no row matches 'nothing*'; the rows are 'setter', 'sleeper', 'timers'"
    )
    assert isinstance(caught.value, ValueError)
    assert out.read_bytes() == b"the picture from before"


def fleet_with_a_breakdown() -> dict[str, Any]:
    """An 8-hour shift: van-1 drives, breaks down at 03:10 for 45 minutes, drives on."""
    recorder = TraceRecorder()
    key = object()
    recorder.add_run(key, "shift")
    journeys = [
        ("arrived", 0.0, 3 * 3600.0),
        ("halted", 3 * 3600.0, 3 * 3600.0 + 600.0),  # a 10-minute drive, then the breakdown
        ("arrived", 3 * 3600.0 + 600.0 + 2700.0, 8 * 3600.0),  # resumed 45 minutes later
    ]
    for outcome, start, end in journeys:
        recorder.add_span(Span("vehicle van-1", "a -> b", start, end, outcome), key=key)
    recorder.add_span(Span("vehicle van-2", "a -> b", 0.0, 60.0, "halted"), key=key)
    recorder.add_span(Span("vehicle van-3", "a -> b", 0.0, 8 * 3600.0, "arrived"), key=key)
    return recorder.trace()


def categories_of(trace: dict[str, Any], row: str) -> list[tuple[str, float, float]]:
    names = row_names(trace)
    return [
        (e["cat"], e["ts"], e["dur"])
        for e in trace["traceEvents"]
        if e["ph"] == "X" and names[(e["pid"], e["tid"])] == row
    ]


def test_a_halted_vehicle_stands_in_a_span_of_its_own() -> None:
    trace = fleet_with_a_breakdown()
    check_trace(trace)
    us = 1_000_000
    assert categories_of(trace, "vehicle van-1") == [
        ("arrived", 0.0, 3 * 3600 * us),
        ("halted", 3 * 3600 * us, 600 * us),
        ("stopped", (3 * 3600 + 600) * us, 2700 * us),  # the 45 minutes it stood broken down
        ("arrived", (3 * 3600 + 3300) * us, (8 * 3600 - 3 * 3600 - 3300) * us),
    ]
    assert [name for name, _, _ in spans_of(trace, "vehicle van-1")][2] == "halted, standing"
    # Never moved again: it stands until the run's last event.
    assert categories_of(trace, "vehicle van-2") == [
        ("halted", 0.0, 60 * us),
        ("stopped", 60 * us, (8 * 3600 - 60) * us),
    ]


def test_the_breakdown_is_visible_at_the_default_size(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    out = tmp_path / "fleet.png"
    plot_trace(fleet_with_a_breakdown(), out)  # the default size, 1600x900
    pixels = imread(out)

    def columns_of(colour: str) -> int:
        rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        near = (abs(pixels[:, :, :3] - rgb) < 0.02).all(axis=2)
        return int(near.any(axis=0).sum())

    # The 10-minute halted drive, and the 45 minutes standing, are bands of their own colour
    # (the legend adds a few swatch pixels of each).
    assert columns_of(categories()["halted"].colour) >= 20
    assert columns_of(categories()["stopped"].colour) >= 100


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": (100, 400)}, "width"),
        ({"size": (400, 30000)}, "height"),
        ({"max_rows": 0}, "max_rows"),
    ],
)
def test_plot_rejects_bad_arguments(
    traced: dict[str, Any], tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        plot_trace(traced, tmp_path / "x.png", **kwargs)
    assert not (tmp_path / "x.png").exists()


def test_plot_without_matplotlib_says_how_to_get_it(
    traced: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"async-virtualtime\[plot\]"):
        plot_trace(traced, tmp_path / "x.png")


# ------------------------------------------------------------------- record kinds, recorder


def test_history_records_say_what_they_woke_by_kind(traced: dict[str, Any]) -> None:
    loop = virtualtime.new_event_loop(history=10)

    async def main() -> None:
        asyncio.get_running_loop().call_later(1, print)
        # A task whose name looks like a history record's text is still a task.
        await asyncio.create_task(asyncio.sleep(2), name="task timers")

    try:
        loop.run_until_complete(main())
        records = loop.history
        trace = chrome_trace(records)
    finally:
        loop.close()
    assert [(r.kind, r.task_name) for r in records] == [
        (RecordKind.CALLBACK, None),
        (RecordKind.TASK, "task timers"),
    ]
    assert spans_of(trace, "task timers") == [("sleep", 0.0, 2e6)]


def test_a_callback_whose_name_looks_like_a_task_is_an_instant() -> None:
    record = virtualtime.HistoryRecord(1.0, 0, 0, "task impostor", 0.0)
    assert record.kind is RecordKind.CALLBACK
    trace = chrome_trace([record])
    check_trace(trace)
    [instant] = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert instant["name"] == "task impostor"
    assert [e for e in trace["traceEvents"] if e["ph"] == "X"] == []


def test_the_recorder_is_per_context() -> None:
    import contextvars

    outside = contextvars.copy_context()
    with TraceRecorder() as recorder:
        assert recording()
        # A context copied before the recorder was entered does not see it.
        assert outside.run(recording) is False
        outside.run(record_span, "row", "unseen", 0.0, 1.0)
        # A context copied inside it (what tasks and to_thread do) does.
        contextvars.copy_context().run(record_span, "row", "seen", 0.0, 1.0)
        with TraceRecorder() as inner:  # nested: the innermost records
            record_span("row", "inner", 0.0, 1.0)
        assert recording()
    assert not recording()
    assert [s.name for spans in recorder._spans.values() for s in spans] == ["seen"]
    assert [s.name for spans in inner._spans.values() for s in spans] == ["inner"]


def test_spans_from_tasks_reach_the_recorder_of_the_context_that_started_them() -> None:
    async def report(name: str) -> None:
        await asyncio.sleep(1)
        record_span("vehicle v", name, 0.0, 1.0)

    async def main() -> None:
        with TraceRecorder() as mine:
            first = asyncio.create_task(report("mine"))
        second = asyncio.create_task(report("nobody's"))  # started after the recorder left
        await asyncio.gather(first, second)
        assert [s.name for spans in mine._spans.values() for s in spans] == ["mine"]

    virtualtime.run(main())


# ------------------------------------------------------------------------------ categories


def test_sim_contributes_its_journey_categories() -> None:
    known = categories()
    assert {"arrived", "halted", "stopped", "redirected", "reset"} <= set(known)
    assert known["halted"].until_next == ("stopped", "halted, standing")
    assert known["stopped"].hatch == "////"
    with pytest.raises(TypeError):
        known["x"] = known["span"]  # type: ignore[index]


def test_a_registered_category_styles_its_spans_and_travels_in_the_trace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(category_registry, "_categories", dict(category_registry._categories))
    register_category(
        Category("repair", "#123456", "in the workshop", layer="front", until_next=("idle", "idle"))
    )
    register_category(Category("repair", "#123456", "in the workshop", layer="front",
                               until_next=("idle", "idle")))  # fmt: skip
    recorder = TraceRecorder()
    key = object()
    recorder.add_run(key, "shop")
    recorder.add_span(Span("crane", "fix", 0.0, 10.0, "repair"), key=key)
    recorder.add_span(Span("crane", "lift", 30.0, 40.0), key=key)
    trace = recorder.trace()
    check_trace(trace)
    assert categories_of(trace, "crane") == [
        ("repair", 0.0, 10e6),
        ("idle", 10e6, 20e6),
        ("span", 30e6, 10e6),
    ]
    kept = trace["otherData"]["categories"]
    assert sorted(kept) == ["repair", "span"]  # "idle" is not described: drawn as unknown
    assert kept["repair"] == {
        "colour": "#123456",
        "legend": "in the workshop",
        "layer": "front",
        "hatch": None,
        "edges": True,
    }
    # The file draws the same in a process that never registered "repair".
    path = tmp_path / "shop.json"
    write_trace(trace, path)
    monkeypatch.setattr(category_registry, "_categories", {})
    from virtualtime.trace._plot import _styles

    assert _styles(load_trace(path))["repair"].colour == "#123456"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"colour": "red"}, "colour must be '#rrggbb'"),
        ({"layer": "top"}, "layer must be one of"),
        ({"legend": ""}, "legend must be a non-empty str"),
        ({"until_next": ("stopped",)}, "until_next must be None or"),
        ({"hatch": ""}, "hatch must be None"),
    ],
)
def test_bad_categories_are_refused(fields: dict[str, Any], match: str) -> None:
    base: dict[str, Any] = {"name": "c", "colour": "#000000", "legend": "c"}
    with pytest.raises(ValueError, match=match):
        Category(**(base | fields))


def test_a_taken_category_name_is_refused_unless_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(category_registry, "_categories", dict(category_registry._categories))
    before = dict(categories())
    recoloured = Category("halted", "#000000", "journey: halted")
    with pytest.raises(ValueError, match="'halted' is already registered"):
        register_category(recoloured)
    assert dict(categories()) == before
    register_category(recoloured, replace=True)
    assert categories()["halted"] == recoloured
    with pytest.raises(TypeError, match="needs a Category"):
        register_category("halted")  # type: ignore[arg-type]


def test_plotting_does_not_import_matplotlib_until_asked() -> None:
    import subprocess

    code = (
        "import sys, virtualtime.trace, virtualtime.sim\n"
        "print(any(m == 'matplotlib' or m.startswith('matplotlib.') for m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
