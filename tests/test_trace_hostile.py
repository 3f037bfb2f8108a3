"""The timeline plot on traces from anywhere: hostile files, absurd values, what it hides.

A trace file is input: each bad event is an error naming the event, the field and the rule;
a huge span of time gets a handful of ticks, not millions; the picture never overwrites the
trace; labels are plain text.  And what the picture shows by default: no internal rows, an
axis from the run's start, journey names a person can read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import virtualtime.sim  # noqa: F401  (registers the journey categories)
from virtualtime import InvalidTypeError, InvalidValueError, VirtualTimeError
from virtualtime.trace import Category, Span, TraceRecorder, chrome_trace, plot_trace
from virtualtime.trace import _plot as plot_module
from virtualtime.trace._text import _short_repr

US = 1_000_000


def span(ts: object, dur: object = 1, **fields: object) -> dict[str, Any]:
    return {"ph": "X", "name": "a", "cat": "span", "pid": 1, "tid": 1, "ts": ts, "dur": dur} | (
        fields
    )


def write(path: Path, trace: object) -> Path:
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


# ----------------------------------------------------------------------- the time axis


@pytest.mark.parametrize("span_seconds", [1e-9, 1e-3, 1.0, 7e3, 40 * 86400, 1e8, 1e14, 8e28])
def test_any_span_of_time_gets_at_most_ten_ticks(span_seconds: float) -> None:
    step = plot_module._nice_step(span_seconds)
    assert step > 0
    assert span_seconds / step <= 10


def test_two_spans_1e20_microseconds_apart_are_drawn_with_a_few_ticks(tmp_path: Path) -> None:
    # Was: a step of four weeks, so matplotlib was asked for 42 million ticks (hung for ever).
    from matplotlib.ticker import MultipleLocator

    source = write(tmp_path / "far.json", {"traceEvents": [span(0), span(1e20)]})
    out = tmp_path / "far.svg"
    assert plot_trace(source, out, size=(800, 400)) == 1
    svg = out.read_text(encoding="utf-8")
    assert svg.count('id="xtick_') <= 12
    locator = MultipleLocator(plot_module._nice_step(1e14))
    assert len(locator.tick_values(0.0, 1e14)) <= 13


def test_tick_labels_keep_the_digits_their_step_needs() -> None:
    assert plot_module._number_label(1.5, 0.5) == "1.5"
    assert plot_module._number_label(2.0, 0.5) == "2"
    assert plot_module._number_label(-0.0, 1) == "0"
    assert plot_module._number_label(1.234e9, 1e8) == "1.2e+09"


# --------------------------------------------------------------- bad events, named


@pytest.mark.parametrize(
    ("event", "field", "rule"),
    [
        (span(int("1" * 401)), "ts", "finite number of microseconds"),
        (span(float("nan")), "ts", "finite number"),
        (span(float("inf")), "ts", "finite number"),
        (span(-1e40), "ts", "horizon"),
        (span("5"), "ts", "must be a number"),
        (span(True), "ts", "must be a number"),
        (span(0, -5), "dur", "must not be negative"),
        (span(0, [1]), "dur", "must be a number"),
        (span(4.2e34, 1e33), "dur", "horizon"),
        (span(0, pid=True), "pid", "integer"),
        (span(0, tid=2**70), "tid", "integer"),
        (span(0, cat={"a": 1}), "cat", "string"),
        ({"ph": "X", "pid": 1, "tid": 1, "name": "a"}, "ts", "missing"),
        ({"ph": "i", "pid": 1, "tid": 0, "ts": "later"}, "ts", "number"),
        ({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": [1]}, "args", "object"),
        (
            {
                "ph": "M",
                "pid": 1,
                "tid": 1,
                "name": "thread_sort_index",
                "args": {"sort_index": "x"},
            },
            "sort_index",
            "number",
        ),
    ],
)
def test_a_bad_event_is_named_with_its_field_and_rule(
    tmp_path: Path, event: dict[str, Any], field: str, rule: str
) -> None:
    source = tmp_path / "bad.json"
    source.write_text(json.dumps({"traceEvents": [span(0), event]}), encoding="utf-8")
    out = tmp_path / "bad.png"
    with pytest.raises(InvalidValueError) as caught:
        plot_trace(source, out)
    message = str(caught.value)
    assert message.startswith("malformed trace event #1")
    assert repr(field) in message
    assert rule in message
    assert len(message) < 400, "a hostile value is cut short in the message"
    assert not out.exists()


def test_json_nested_100000_deep_is_refused_clearly(tmp_path: Path) -> None:
    source = tmp_path / "deep.json"
    source.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InvalidValueError, match="nested too deeply"):
        plot_trace(source, tmp_path / "deep.png")


def test_a_file_that_is_not_utf8_is_refused_clearly(tmp_path: Path) -> None:
    source = tmp_path / "latin.json"
    source.write_bytes(b'{"traceEvents": ["\xff"]}')
    with pytest.raises(InvalidValueError, match="not UTF-8"):
        plot_trace(source, tmp_path / "latin.png")


def test_a_million_character_hatch_in_the_trace_is_refused(tmp_path: Path) -> None:
    # Was: accepted, then matplotlib's renderer overflowed ("Exceeded cell block limit").
    style = {"colour": "#123456", "legend": "x", "hatch": "/" * 1_000_000}
    trace = {"traceEvents": [span(0, 5)], "otherData": {"categories": {"span": style}}}
    source = write(tmp_path / "hatch.json", trace)
    with pytest.raises(InvalidValueError) as caught:
        plot_trace(source, tmp_path / "hatch.png")
    assert "otherData.categories" in str(caught.value)
    assert "hatch" in str(caught.value)
    assert len(str(caught.value)) < 400


def test_a_style_with_fields_this_version_does_not_know_is_drawn_as_unknown(
    tmp_path: Path,
) -> None:
    style = {"colour": "#123456", "legend": "x", "glow": 3}  # from a newer virtualtime
    trace = {"traceEvents": [span(0, 5)], "otherData": {"categories": {"span": style}}}
    assert plot_trace(trace, tmp_path / "newer.png", size=(400, 300)) == 1


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"hatch": "/" * 11}, "hatch"),
        ({"hatch": "ab"}, "hatch"),
        ({"legend": "x" * 201}, "legend"),
        ({"name": "n" * 201}, "name"),
    ],
)
def test_categories_refuse_absurd_labels_and_hatches(fields: dict[str, Any], match: str) -> None:
    given_fields = {"name": "c", "colour": "#123456", "legend": "c"} | fields
    with pytest.raises(InvalidValueError, match=match) as caught:
        Category(**given_fields)
    assert len(str(caught.value)) < 300


def test_a_dollar_in_a_name_is_plain_text(tmp_path: Path) -> None:
    # Was: mathtext, so an unknown command in a task's name raised from matplotlib.
    names = {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": r"$\nope$"}}
    trace = {"traceEvents": [names, span(0, 5, cat=r"$\bad{$")]}
    assert plot_trace(trace, tmp_path / "dollar.png", size=(400, 300), title=r"$\x$") == 1


keys = st.sampled_from(["ph", "pid", "tid", "ts", "dur", "cat", "name", "args"])
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["X", "i", "I", "M", "thread_name", "process_name", "thread_sort_index"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(keys, values, max_size=8), max_size=6))
def test_reading_any_events_either_works_or_names_what_is_wrong(events: list[Any]) -> None:
    message = ""
    try:
        rows, _processes = plot_module._rows({"traceEvents": events})
    except InvalidValueError as error:
        message, rows = str(error), []
    assert message == "" or message.startswith("malformed trace event #")
    for row in rows:
        for bars in row.bars.values():
            assert all(start <= end for start, end in bars)


# --------------------------------------------------------------- output and arguments


def test_a_trace_named_png_is_never_overwritten_by_its_picture(tmp_path: Path) -> None:
    source = write(tmp_path / "x.png", {"traceEvents": [span(0, 5)]})
    before = source.read_bytes()
    for output in (source, str(source), tmp_path / "." / "x.png"):
        with pytest.raises(InvalidValueError, match="is the trace file itself"):
            plot_trace(source, output)
    link = tmp_path / "link.png"
    os.link(source, link)
    with pytest.raises(InvalidValueError, match="is the trace file itself"):
        plot_trace(source, link)
    alias = tmp_path / "alias.png"
    alias.symlink_to(source)
    with pytest.raises(InvalidValueError, match="is the trace file itself"):
        plot_trace(alias, source)
    assert source.read_bytes() == before


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"output": "x.json"}, InvalidValueError, "output must end in"),
        ({"output": "x"}, InvalidValueError, "output must end in"),
        ({"output": 5}, InvalidTypeError, "output"),
        ({"output": "no/such/folder/x.png"}, InvalidValueError, "does not exist"),
        ({"source": 5}, InvalidTypeError, "source"),
        ({"size": (20000, 20000)}, InvalidValueError, "pixels"),
        ({"size": [400, 300]}, InvalidTypeError, "size"),
        ({"size": (400, 300, 1)}, InvalidTypeError, "size"),
        ({"title": "t" * 501}, InvalidValueError, "title"),
        ({"title": 5}, InvalidValueError, "title"),
        ({"max_rows": 10**6}, InvalidValueError, "max_rows"),
        ({"rows": 5}, InvalidTypeError, "rows"),
        ({"rows": [""]}, InvalidValueError, "rows"),
        ({"rows": ["*" * 201]}, InvalidValueError, "rows"),
        ({"rows": [5]}, InvalidValueError, "rows"),
        ({"internal": "yes"}, InvalidTypeError, "internal"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_read_or_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kwargs: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    source = write(tmp_path / "t.json", {"traceEvents": [span(0, 5)]})
    read: list[object] = []
    monkeypatch.setattr(plot_module, "load_trace", read.append)
    arguments: dict[str, Any] = {"source": source, "output": tmp_path / "t.png"} | kwargs
    with pytest.raises(error, match=match) as caught:
        plot_trace(arguments.pop("source"), arguments.pop("output"), **arguments)
    assert isinstance(caught.value, VirtualTimeError)
    assert read == [], "the trace was not even read"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


# --------------------------------------------------------------- what is drawn by default


def vans_and_their_stepping_tasks() -> dict[str, Any]:
    recorder = TraceRecorder()
    key = object()
    recorder.add_run(key, "shift", start=0.0)
    recorder.add_span(Span("vehicle van-1", "a -> b", 135.0, 3600.0, "arrived"), key=key)
    recorder.add_span(Span("virtualtime.sim vehicle van-1", "step", 135.0, 200.0), key=key)
    recorder.add_span(Span("worker", "job", 600.0, 1200.0), key=key)
    return recorder.trace()


def test_internal_rows_are_hidden_unless_asked_for(tmp_path: Path) -> None:
    trace = vans_and_their_stepping_tasks()
    assert plot_trace(trace, tmp_path / "a.png", size=(400, 300)) == 2
    assert plot_trace(trace, tmp_path / "b.png", size=(400, 300), internal=True) == 3
    with pytest.raises(ValueError, match=r"\(1 internal rows match: drawn with internal=True\)"):
        plot_trace(trace, tmp_path / "c.png", rows=["virtualtime.*"])
    assert (
        plot_trace(
            trace, tmp_path / "d.png", size=(400, 300), rows=["virtualtime.*"], internal=True
        )
        == 1
    )


def test_no_such_rows_belongs_to_the_error_family() -> None:
    assert issubclass(plot_module.NoSuchRows, InvalidValueError)


def test_the_axis_starts_at_the_runs_start_not_at_the_first_span() -> None:
    trace = vans_and_their_stepping_tasks()
    assert trace["otherData"]["runs"][0]["start"] == 0.0
    assert plot_module._axis_range(trace, {1}, [135.0, 3600.0]) == (0.0, 3600.0)
    # A run that started at 100 s and first did something at 135 s.
    later = chrome_trace((), [Span("w", "x", 135.0, 3600.0)], start=100.0)
    assert plot_module._axis_range(later, {1}, [135.0, 3600.0]) == (100.0, 3600.0)
    # No recorded start: 0, unless the events are far from 0 (a run at --start 1e9).
    bare: dict[str, Any] = {"traceEvents": []}
    assert plot_module._axis_range(bare, {1}, [135.0, 3600.0]) == (0.0, 3600.0)
    assert plot_module._axis_range(bare, {1}, [1e9, 1e9 + 100]) == (1e9, 1e9 + 100)


def test_a_bad_run_start_is_refused() -> None:
    with pytest.raises(InvalidValueError, match="start"):
        TraceRecorder().add_run(object(), "r", start=float("nan"))
    with pytest.raises(InvalidTypeError, match="start"):
        chrome_trace((), start="0")  # type: ignore[arg-type]


def test_journey_names_round_their_coordinates_for_display() -> None:
    assert _short_repr((3.3333333333333335, 2.3333333333333335)) == "(3.333, 2.333)"
    assert _short_repr((1e-05, 0.00012345678)) == "(1e-05, 0.000123)"
    assert _short_repr((2, 2)) == "(2, 2)"
    assert _short_repr("v1.2.3456789") == "'v1.2.3456789'"  # not a number: left alone
