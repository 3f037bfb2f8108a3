"""``virtualtime run --trace`` and ``virtualtime plot``: what the trace keeps, what the plot draws.

The run's start goes into the trace (the axis starts there, at ``--start``); ``plot
--internal`` also draws virtualtime's own rows; the default picture of a trace is never the
trace itself; every option of ``plot`` is in docs/cli.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_cli import run, write

from virtualtime.cli import EXIT_OK, EXIT_USAGE, _args
from virtualtime.trace import Span, TraceRecorder, write_trace
from virtualtime.trace import _plot as plot_module

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def vans_and_their_stepping_tasks(path: Path) -> Path:
    """A trace with two rows of the program's and one of virtualtime's own (internal)."""
    recorder = TraceRecorder()
    key = object()
    recorder.add_run(key, "shift", start=0.0)
    recorder.add_span(Span("vehicle van-1", "a -> b", 135.0, 3600.0, "arrived"), key=key)
    recorder.add_span(Span("virtualtime.sim vehicle van-1", "step", 135.0, 200.0), key=key)
    recorder.add_span(Span("worker", "job", 600.0, 1200.0), key=key)
    write_trace(recorder.trace(), path)
    return path


# ------------------------------------------------------------------ plot --internal


def test_plot_internal_also_draws_virtualtimes_own_rows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    trace = vans_and_their_stepping_tasks(tmp_path / "t.json")
    status, _, err = run(capsys, "plot", trace, "-o", tmp_path / "a.png", "--size", "400x300")
    assert status == EXIT_OK, err
    assert "(2 rows)" in err
    status, _, err = run(
        capsys, "plot", trace, "-o", tmp_path / "b.png", "--size", "400x300", "--internal"
    )
    assert status == EXIT_OK, err
    assert "(3 rows)" in err
    status, _, err = run(
        capsys, "plot", trace, "-o", tmp_path / "c.png", "--internal", "--rows", "virtualtime.*"
    )
    assert status == EXIT_OK, err
    assert "(1 row)" in err


def test_plot_rows_of_internal_tasks_without_internal_say_how_to_draw_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    trace = vans_and_their_stepping_tasks(tmp_path / "t.json")
    status, _, err = run(capsys, "plot", trace, "-o", tmp_path / "c.png", "--rows", "virtual*")
    assert status == EXIT_USAGE
    assert "1 internal rows match: drawn with --internal" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.png").exists()


# ------------------------------------------------------------------ the default output


@pytest.mark.parametrize(
    ("trace_name", "picture"),
    [
        ("x.json", "x.png"),
        ("x", "x.png"),
        ("x.png", "x.timeline.png"),
        ("x.PNG", "x.timeline.png"),
        ("x.trace.png", "x.trace.timeline.png"),
    ],
)
def test_the_default_picture_is_never_the_trace_itself(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trace_name: str, picture: str
) -> None:
    pytest.importorskip("matplotlib")
    trace = vans_and_their_stepping_tasks(tmp_path / trace_name)
    before = trace.read_bytes()
    status, _, err = run(capsys, "plot", trace, "--size", "400x300")
    assert status == EXIT_OK, err
    assert f"wrote {tmp_path / picture} " in err
    assert (tmp_path / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert trace.read_bytes() == before


def test_a_default_picture_that_links_to_the_trace_is_not_used(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    trace = vans_and_their_stepping_tasks(tmp_path / "x.json")
    before = trace.read_bytes()
    (tmp_path / "x.png").symlink_to(trace)
    status, _, err = run(capsys, "plot", trace, "--size", "400x300")
    assert status == EXIT_OK, err
    assert f"wrote {tmp_path / 'x.timeline.png'} " in err
    assert trace.read_bytes() == before


def test_an_output_that_is_the_trace_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    trace = vans_and_their_stepping_tasks(tmp_path / "x.png")
    before = trace.read_bytes()
    status, _, err = run(capsys, "plot", trace, "-o", trace)
    assert status == EXIT_USAGE
    assert "is the trace file itself" in err
    assert len(err.strip().splitlines()) == 1
    assert trace.read_bytes() == before


# ------------------------------------------------------------------ the run's start


SLEEPY = """
    import asyncio
    import sys

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(35, print, "a timer")
        await asyncio.sleep(50)

    asyncio.run(main())
    if "trio" in sys.argv:
        import trio
        trio.run(trio.sleep, 50)
"""


@pytest.mark.parametrize("start", [None, "100", "1d"])
def test_the_trace_records_where_each_run_started(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, start: str | None
) -> None:
    pytest.importorskip("trio")
    trace_file = tmp_path / "t.json"
    options = ["--start", start] if start is not None else []
    status, _, err = run(
        capsys, "run", "-q", *options, "--trace", trace_file, write(tmp_path, SLEEPY), "trio"
    )
    assert status == EXIT_OK, err
    trace: dict[str, Any] = json.loads(trace_file.read_text(encoding="utf-8"))
    seconds = {None: 0.0, "100": 100.0, "1d": 86400.0}[start]
    assert [run["start"] for run in trace["otherData"]["runs"]] == [seconds, seconds]
    # The axis starts at the run's start, not at the first thing drawn (35 s later).
    first = seconds + 35.0
    assert plot_module._axis_range(trace, {1}, [first, seconds + 50]) == (seconds, seconds + 50)


# ------------------------------------------------------------------ docs/cli.md


def test_every_plot_option_is_in_the_docs_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Traces and timelines") :]
    plot = _args.build_parser().commands["plot"]
    missing = [
        "/".join(action.option_strings)
        for action in plot._actions
        if action.option_strings
        and "--help" not in action.option_strings
        and not any(
            re.search(rf"^\| `{re.escape(o)}\b", section, re.M) for o in action.option_strings
        )
    ]
    assert not missing, f"options of `virtualtime plot` missing from docs/cli.md: {missing}"
