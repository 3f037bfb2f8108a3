"""The ``virtualtime`` command: run, plot, options, errors and exit statuses.

Most tests call ``main(argv)`` in-process on small scripts written to ``tmp_path``; one
subprocess smoke test per command checks the installed entry points.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import virtualtime
from virtualtime._shared._units import format_duration, parse_time
from virtualtime.cli import (
    EXIT_DEADLOCK,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNTIL,
    EXIT_USAGE,
    _progress,
    _session,
    main,
)
from virtualtime.cli._progress import render_bar


def write(tmp_path: Path, code: str, name: str = "script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


SLEEP_A_DAY = textwrap.dedent(
    """
    import asyncio

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(86400)
        print(type(loop).__name__, loop.time())

    asyncio.run(main())
    """
)


# ------------------------------------------------------------------ the command itself


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--version")
    assert status == 0
    assert out.startswith(f"virtualtime {virtualtime.__version__} ")


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--help")
    assert status == 0
    assert "virtualtime run examples/retry.py" in out
    status, out, _ = run(capsys, "run", "--help")
    assert status == 0
    assert "--until" in out
    assert "examples:" in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys)
    assert status == EXIT_USAGE
    assert "usage: virtualtime" in err


def test_a_script_instead_of_a_command_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "sim.py")
    assert status == EXIT_USAGE
    assert "did you mean: virtualtime run sim.py" in err


# ------------------------------------------------------------------ running scripts


def test_asyncio_run_in_the_script_is_virtual(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "run", write(tmp_path, SLEEP_A_DAY))
    assert status == 0
    assert out == "VirtualEventLoop 86400.0\n"
    assert "virtualtime: 1 d of virtual time in " in err
    assert "1 timer fired" in err


def test_the_script_runs_as_main_with_its_argv_and_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(tmp_path, "VALUE = 'helper imported'\n", name="helper.py")
    script = write(
        tmp_path,
        """
        import sys
        import helper
        print(__name__, sys.argv[1:], helper.VALUE)
        print(sys.path[0])
        """,
    )
    argv_before, path_before = list(sys.argv), list(sys.path)
    status, out, _ = run(capsys, "run", script, "--until", "5", "x")
    assert status == 0
    assert out.splitlines() == [
        "__main__ ['--until', '5', 'x'] helper imported",
        str(tmp_path),
    ]
    assert sys.argv == argv_before
    assert sys.path == path_before


def test_entry_points_are_restored_afterwards(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = (
        asyncio.Runner.__init__,
        asyncio.Runner.run,
        asyncio.new_event_loop,
        asyncio.events.new_event_loop,
        list(sys.meta_path),
    )
    run(capsys, "run", write(tmp_path, SLEEP_A_DAY))
    run(capsys, "run", write(tmp_path, "raise RuntimeError('boom')\n", name="bad.py"))
    after = (
        asyncio.Runner.__init__,
        asyncio.Runner.run,
        asyncio.new_event_loop,
        asyncio.events.new_event_loop,
        list(sys.meta_path),
    )
    assert after == before
    loop = asyncio.new_event_loop()
    try:
        assert not isinstance(loop, virtualtime.VirtualEventLoop)
    finally:
        loop.close()


def test_runner_new_event_loop_and_imported_run_are_all_virtual(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio
        from asyncio import run

        async def nap(seconds):
            await asyncio.sleep(seconds)
            return asyncio.get_running_loop().time()

        with asyncio.Runner() as runner:
            print("runner", runner.run(nap(60)))
        loop = asyncio.new_event_loop()
        print("new_event_loop", loop.run_until_complete(nap(120)))
        loop.close()
        print("run", run(nap(180)))
        """,
    )
    status, out, err = run(capsys, "run", script)
    assert status == 0
    assert out.splitlines() == ["runner 60.0", "new_event_loop 120.0", "run 180.0"]
    assert "6 min of virtual time" in err
    assert "3 runs" in err


def test_a_virtual_factory_is_kept_and_a_real_one_replaced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio
        import virtualtime

        async def now():
            await asyncio.sleep(1)
            loop = asyncio.get_running_loop()
            return type(loop).__name__, loop.time()

        print(*virtualtime.run(now(), start=50.0))
        with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
            print(*runner.run(now()))
        """,
    )
    status, out, err = run(capsys, "run", script)
    assert status == 0
    assert out.splitlines() == ["VirtualEventLoop 51.0", "VirtualEventLoop 1.0"]
    assert "replaced the loop from loop_factory=" in err


def test_command_line_options_reach_loops_and_clocks_the_script_makes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio
        import virtualtime
        import virtualtime.trio

        async def nap():
            await asyncio.sleep(10)
            return asyncio.get_running_loop().time()

        async def trio_nap():
            import trio
            await trio.sleep(10)
            return trio.current_time()

        print("run", virtualtime.run(nap(), start=5.0))
        loop = virtualtime.new_event_loop()
        print("new_event_loop", loop.run_until_complete(nap()))
        loop.close()
        print("trio", virtualtime.trio.run(trio_nap, start=5.0))
        """,
    )
    trace_file = tmp_path / "t.json"
    status, out, err = run(capsys, "run", "--start", "1000", "--trace", trace_file, script)
    assert status == 0, err
    assert out.splitlines() == ["run 1010.0", "new_event_loop 1010.0", "trio 1010.0"]
    assert "3 runs" in err
    trace = json.loads(trace_file.read_text(encoding="utf-8"))
    spans = [
        (e["pid"], e["cat"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"
    ]
    assert spans == [
        (1, "sleep", 1000e6, 10e6),  # history was on for both loops
        (2, "sleep", 1000e6, 10e6),
        (3, "alive", 1000e6, 10e6),  # the trio run's main task
    ]
    assert [run["start"] for run in trace["otherData"]["runs"]] == [1000.0] * 3


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_anyio_run_is_virtual_on_both_backends(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, backend: str
) -> None:
    script = write(
        tmp_path,
        """
        import sys
        import anyio

        async def main():
            with anyio.fail_after(7201):
                await anyio.sleep(7200)
            print(anyio.current_time())

        anyio.run(main, backend=sys.argv[1])
        """,
    )
    status, out, err = run(capsys, "run", script, backend)
    assert status == 0, err
    assert out == "7200.0\n"


def test_trio_run_gets_a_virtual_clock(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = write(
        tmp_path,
        """
        import trio
        from trio import run

        async def main(hours):
            await trio.sleep(hours * 3600)
            clock = trio.lowlevel.current_clock()
            print(type(clock).__name__, trio.current_time())

        run(main, 5)
        """,
    )
    status, out, err = run(capsys, "run", "--start", "100", script)
    assert status == 0, err
    assert out == "VirtualClock 18100.0\n"
    assert "5 h of virtual time" in err
    assert "1 trio clock jump" in err


def test_a_script_that_starts_no_loop_is_told_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "run", write(tmp_path, "print('plain')\n"))
    assert status == 0
    assert out == "plain\n"
    assert "never started an event loop" in err


def test_module_mode_runs_like_python_dash_m(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "svc"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    write(package, SLEEP_A_DAY + "import sys; print(__name__, sys.argv[1:])\n", "main.py")
    monkeypatch.chdir(tmp_path)
    status, out, _ = run(capsys, "run", "-m", "svc.main", "--flag")
    assert status == 0
    assert out.splitlines() == ["VirtualEventLoop 86400.0", "__main__ ['--flag']"]


# ------------------------------------------------------------------ options


UNTIL_SCRIPT = """
    import asyncio

    async def ticker():
        loop = asyncio.get_running_loop()
        try:
            while True:
                await asyncio.sleep(1800)
                print("tick", loop.time())
        finally:
            print("cleanup at", loop.time())

    asyncio.run(ticker())
    print("after asyncio.run: must not be reached")
"""


def test_until_stops_cleanly_with_status_3(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "run", "--until", "1h", write(tmp_path, UNTIL_SCRIPT))
    assert status == EXIT_UNTIL
    # The timer due exactly at --until still fires; then every task is cancelled.
    assert out.splitlines() == ["tick 1800.0", "tick 3600.0", "cleanup at 3600.0"]
    assert "stopped at virtual time 1 h (--until); cancelled 1 task" in err
    assert "1 h of virtual time" in err
    assert "2 timers fired" in err  # the --until timer is not counted


def test_until_notices_when_nothing_else_was_scheduled(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio

        async def main():
            await asyncio.Event().wait()

        asyncio.run(main())
        """,
    )
    status, _, err = run(capsys, "run", "--until", "10", script)
    assert status == EXIT_UNTIL
    assert "not a timer" in err


def test_until_stops_trio_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = write(
        tmp_path,
        """
        import trio

        async def main():
            while True:
                await trio.sleep(600)

        trio.run(main)
        print("must not be reached")
        """,
    )
    status, out, err = run(capsys, "run", "--until", "2h", script)
    assert status == EXIT_UNTIL
    assert out == ""
    assert "stopped at virtual time 2 h (--until)" in err


def test_start_sets_the_initial_virtual_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, _ = run(capsys, "run", "--start", "1d", write(tmp_path, SLEEP_A_DAY))
    assert status == 0
    assert out == "VirtualEventLoop 172800.0\n"


def test_rate_paces_the_loop(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = write(
        tmp_path,
        """
        import asyncio

        async def main():
            loop = asyncio.get_running_loop()
            await asyncio.sleep(0.02)  # 20 us of real time at rate 1000
            print(loop.rate, loop.time())

        asyncio.run(main())
        """,
    )
    status, out, _ = run(capsys, "run", "--rate", "1000", script)
    assert status == 0
    assert out == "1000.0 0.02\n"


def test_seed_makes_random_repeat_and_is_undone_afterwards(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(tmp_path, "import random\nprint(random.random())\n")
    state = random.getstate()
    outs = [run(capsys, "run", "--seed", "7", script)[1] for _ in range(2)]
    assert outs[0] == outs[1] == f"{random.Random(7).random()}\n"
    assert random.getstate() == state


def test_patch_time_is_passed_to_the_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio
        import time

        async def main():
            before = time.monotonic()
            await asyncio.sleep(86400)
            print(round(time.monotonic() - before))

        asyncio.run(main())
        """,
    )
    status, out, _ = run(capsys, "run", "--patch-time", script)
    assert (status, out) == (0, "86400\n")  # the stdlib clock followed the virtual one
    status, out, _ = run(capsys, "run", script)
    assert (status, out) == (0, "0\n")


def test_trace_writes_the_history_as_a_chrome_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio

        async def worker(period):
            for _ in range(3):
                await asyncio.sleep(period)

        async def main():
            async with asyncio.TaskGroup() as tg:
                tg.create_task(worker(60), name="fast")
                tg.create_task(worker(3600), name="slow")

        asyncio.run(main())
        """,
    )
    trace_file = tmp_path / "out.json"
    status, _, err = run(capsys, "run", "--trace", trace_file, script)
    assert status == 0
    assert f"written to {trace_file}" in err
    trace = json.loads(trace_file.read_text(encoding="utf-8"))
    names = {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    sleeps = {
        name: [e["dur"] for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid]
        for tid, name in names.items()
    }
    assert sleeps["fast"] == [60e6] * 3
    assert sleeps["slow"] == [3600e6] * 3
    assert str(script.name) in trace["otherData"]["command"]


def test_quiet_prints_nothing_of_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "run", "--quiet", write(tmp_path, SLEEP_A_DAY))
    assert status == 0
    assert out == "VirtualEventLoop 86400.0\n"
    assert err == ""


def test_no_progress_bar_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, _, err = run(capsys, "run", "--until", "1h", write(tmp_path, UNTIL_SCRIPT))
    assert "\r" not in err
    assert "%" not in err


@pytest.mark.parametrize(
    ("options", "mentions"),
    [
        (["--until", "soon"], "--until"),
        (["--until", "-5"], "--until"),
        (["--start", "1h30"], "--start"),
        (["--rate", "-1"], "--rate"),
        (["--rate", "fast"], "--rate"),
        (["--seed", "x"], "--seed"),
        (["--trace-limit", "0"], "--trace-limit"),
        (["--until", "5", "--start", "10"], "--until"),
        (["--trace", "/no/such/folder/out.json"], "--trace"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_options_are_named_with_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, options: list[str], mentions: str
) -> None:
    script = write(tmp_path, "print('ran')\n")
    status, out, err = run(capsys, "run", *options, script)
    assert status == EXIT_USAGE
    assert mentions in err
    assert out == ""
    assert "Traceback" not in err


# ------------------------------------------------------------------ errors


def test_a_missing_script_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "run", "no_such_script.py")
    assert status == EXIT_USAGE
    assert "can't open file" in err
    assert "Traceback" not in err
    status, _, err = run(capsys, "run")
    assert status == EXIT_USAGE
    assert "missing SCRIPT" in err


def test_a_script_that_raises_shows_its_own_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio

        async def main():
            await asyncio.sleep(5)
            raise ValueError("boom")

        asyncio.run(main())
        """,
    )
    status, _, err = run(capsys, "run", script)
    assert status == EXIT_ERROR
    assert err.startswith("Traceback (most recent call last):")
    assert f'File "{script}", line 8, in <module>' in err
    assert "ValueError: boom" in err
    assert f"virtualtime{os.sep}cli{os.sep}" not in err
    assert "runpy" not in err


def test_a_syntax_error_is_reported_like_python(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, _, err = run(capsys, "run", write(tmp_path, "def broken(:\n"))
    assert status == EXIT_ERROR
    assert "SyntaxError" in err
    assert f"virtualtime{os.sep}cli{os.sep}" not in err


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [("sys.exit(7)", 7, None), ("sys.exit('bye')", 1, "bye"), ("sys.exit()", 0, None)],
)
def test_sys_exit_sets_the_status(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    code: str,
    status: int,
    message: str | None,
) -> None:
    got, _, err = run(capsys, "run", "-q", write(tmp_path, f"import sys\n{code}\n"))
    assert got == status
    assert err == (f"{message}\n" if message else "")


def test_a_deadlock_prints_the_blocked_tasks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import asyncio

        async def consumer(queue):
            await queue.get()

        async def main():
            queue = asyncio.Queue()
            await asyncio.sleep(30)
            await asyncio.create_task(consumer(queue), name="consumer")

        asyncio.run(main())
        """,
    )
    status, _, err = run(capsys, "run", script)
    assert status == EXIT_DEADLOCK
    assert "deadlock at virtual time t=30.0" in err
    assert "Blocked tasks:" in err
    assert "consumer: consumer() at" in err
    assert "Traceback" not in err


def test_ctrl_c_in_the_script_exits_130(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "run", write(tmp_path, "raise KeyboardInterrupt\n"))
    assert status == 130
    assert "interrupted" in err


# ------------------------------------------------------------------ helpers and progress


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        ("90s", 90.0),
        ("250ms", 0.25),
        ("15m", 900.0),
        ("15min", 900.0),
        ("36h", 129600.0),
        ("1.5h", 5400.0),
        ("2d", 172800.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        (" 1d 12h ", 129600.0),
    ],
)
def test_parse_time(text: str, seconds: float) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "5x", "-5", "1h30", "inf", "nan", "h"])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_time(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1.5, "1.5 s"), (750, "12 min 30 s"), (3600, "1 h"), (5400, "1 h 30 min"), (93600, "1 d 2 h")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_render_bar() -> None:
    assert render_bar(0.5, 1800, 3600, width=10) == "[#####.....]  50%  t=30 min of 1 h"
    assert render_bar(2.0, 7200, 3600, width=4).startswith("[####] 100%")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def progress_session(now: float) -> _session.Session:
    session = _session.Session(_session.Options(until=3600.0), io.StringIO())
    session.latest = _session.Clock("fake", "fake", 0.0, lambda: now)
    return session


def test_text_progress_bar_draws_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Terminal()
    monkeypatch.setattr(sys, "stdout", stream)  # the script writes to the bar's terminal
    bar = _progress.Progress(
        progress_session(900.0), 3600.0, stream, show_after=0.0, use_rich=False
    )
    bar.wrap_streams()  # what entering it does, without the ticking thread
    bar.tick()
    assert stream.getvalue() == "\r" + render_bar(0.25, 900.0, 3600.0) + "\x1b[K"
    assert " 25%  t=15 min of 1 h" in stream.getvalue()
    print("half a line", end="")  # the wrapper erases the bar first ...
    assert stream.getvalue().endswith("\x1b[K\r\x1b[Khalf a line")
    drawn = stream.getvalue()
    bar.tick()  # ... and the bar never draws over a half-written line
    assert stream.getvalue() == drawn
    print()
    bar.tick()
    assert stream.getvalue().count("25%") == 2
    bar.__exit__(None, None, None)
    assert sys.stdout is stream
    assert stream.getvalue().endswith("\x1b[K\r\x1b[K")


def test_text_progress_bar_leaves_output_to_a_file_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = _Terminal()
    with _progress.Progress(
        progress_session(900.0), 3600.0, stream, show_after=0.0, use_rich=False
    ) as bar:
        bar.tick()
        print("half a line", end="")  # stdout is not the bar's terminal
        bar.tick()
    assert capsys.readouterr().out == "half a line"
    assert "half a line" not in stream.getvalue()
    assert stream.getvalue().count("25%") >= 2  # drawn on regardless


def test_progress_bar_stays_hidden_for_quick_runs() -> None:
    stream = io.StringIO()
    bar = _progress.Progress(
        progress_session(900.0), 3600.0, stream, show_after=60.0, use_rich=False
    )
    bar.tick()
    bar.__exit__(None, None, None)
    assert stream.getvalue() == ""


def test_rich_progress_bar_when_rich_is_installed() -> None:
    stream = io.StringIO()
    with _progress.Progress(
        progress_session(1800.0), 3600.0, stream, show_after=0.0, use_rich=True
    ) as bar:
        bar.tick()
        assert bar.shown
    assert bar.fraction() == (0.5, 1800.0)


def test_rich_progress_bar_leaves_the_scripts_output_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # rich's progress display captures stdout by default when its stream is a terminal:
    # `virtualtime run --until 1d sim.py > results.csv` would then leave the file empty.
    stream = _Terminal()
    with _progress.Progress(
        progress_session(1800.0), 3600.0, stream, show_after=0.0, use_rich=True
    ) as bar:
        bar.tick()
        assert bar.shown
        print("row 1 [bold]x[/bold]")
    assert capsys.readouterr().out == "row 1 [bold]x[/bold]\n"
    assert "row 1" not in stream.getvalue()


# ------------------------------------------------------------------ plot


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture
def trace_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    status, _, _ = run(capsys, "run", "-q", "--trace", path, write(tmp_path, UNTIL_SCRIPT))
    assert status == 0 or status == EXIT_UNTIL
    return path


def test_plot_writes_the_requested_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "run.json"
    run(capsys, "run", "-q", "--until", "2h", "--trace", path, write(tmp_path, UNTIL_SCRIPT))
    status, _, err = run(capsys, "plot", path, "-o", tmp_path / "t.png", "--size", "800x450")
    assert status == 0, err
    assert png_size(tmp_path / "t.png") == (800, 450)
    status, _, _ = run(capsys, "plot", path)
    assert status == 0
    assert png_size(path.with_suffix(".png")) == (1600, 900)


def test_plot_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "plot", tmp_path / "missing.json")
    assert status == EXIT_USAGE
    assert "no trace file" in err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2", encoding="utf-8")
    status, _, err = run(capsys, "plot", bad)
    assert status == EXIT_USAGE
    assert "not JSON" in err
    status, _, err = run(capsys, "plot", bad, "--size", "big")
    assert status == EXIT_USAGE
    assert "--size" in err


def test_plot_without_matplotlib(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": []}', encoding="utf-8")
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status, _, err = run(capsys, "plot", path)
    assert status == EXIT_ERROR
    assert "pip install 'async-virtualtime[plot]'" in err


# ------------------------------------------------------------------ entry points (subprocess)

BIN = Path(sys.executable).parent
CONSOLE_SCRIPT = BIN / ("virtualtime.exe" if os.name == "nt" else "virtualtime")
needs_console_script = pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="the virtualtime console script is not installed here"
)


def spawn(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, cwd=cwd
    )


@needs_console_script
def test_smoke_virtualtime_run(tmp_path: Path) -> None:
    # trio is not imported on the script's behalf, yet patched the moment the script imports it.
    script = write(
        tmp_path,
        SLEEP_A_DAY
        + textwrap.dedent(
            """
            import sys
            print("trio imported:", "trio" in sys.modules)
            import trio

            async def nap():
                await trio.sleep(3600)
                print(type(trio.lowlevel.current_clock()).__name__, trio.current_time())

            trio.run(nap)
            """
        ),
    )
    result = spawn(CONSOLE_SCRIPT, "run", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "VirtualEventLoop 86400.0",
        "trio imported: False",
        "VirtualClock 3600.0",
    ]
    assert "1 d 1 h of virtual time" in result.stderr


def test_smoke_python_dash_m_virtualtime_run(tmp_path: Path) -> None:
    result = spawn(
        sys.executable, "-m", "virtualtime", "run", "--until", "1h", write(tmp_path, UNTIL_SCRIPT)
    )
    assert result.returncode == EXIT_UNTIL, result.stderr
    assert result.stdout.splitlines()[-1] == "cleanup at 3600.0"
    assert "stopped at virtual time 1 h (--until)" in result.stderr


@needs_console_script
def test_smoke_virtualtime_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    trace = {
        "traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}},
            {"ph": "X", "name": "sleep", "cat": "sleep", "pid": 1, "tid": 1, "ts": 0, "dur": 5e6},
        ]
    }
    (tmp_path / "t.json").write_text(json.dumps(trace), encoding="utf-8")
    result = spawn(
        CONSOLE_SCRIPT, "plot", "t.json", "-o", "t.png", "--size", "300x200", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert png_size(tmp_path / "t.png") == (300, 200)


@needs_console_script
def test_smoke_virtualtime_version() -> None:
    result = spawn(CONSOLE_SCRIPT, "--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"virtualtime {virtualtime.__version__}")


# ------------------------------------------------------------------ review fixes


@pytest.mark.parametrize(
    "events",
    [
        [{"ph": "X", "pid": 1, "tid": 1, "name": "a"}],  # no timestamp
        [{"ph": "X", "pid": None, "tid": 1, "ts": 0, "name": "a"}],
        [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": [1]}],
    ],
)
def test_plot_reports_a_malformed_trace_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    status, _, err = run(capsys, "plot", path, "-o", tmp_path / "out.png")
    assert status == EXIT_USAGE
    assert "malformed trace event #0" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["", "/"])
def test_plot_of_a_path_that_is_not_a_file_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    status, _, err = run(capsys, "plot", name)
    assert status == EXIT_USAGE
    assert "no trace file" in err


def test_trace_lands_where_asked_even_if_the_script_changes_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    script = write(
        tmp_path,
        "import asyncio, os\nos.chdir('sub')\nasyncio.run(asyncio.sleep(5))\n",
        "chdir.py",
    )
    status, _, _ = run(capsys, "run", "-q", "--trace", "tr.json", script)
    assert status == EXIT_OK
    assert (tmp_path / "tr.json").is_file()
    assert not (tmp_path / "sub" / "tr.json").exists()


def test_running_a_missing_module_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "run", "-m", "no_such_module_for_virtualtime")
    assert status == EXIT_USAGE
    assert "no module named 'no_such_module_for_virtualtime'" in err


# ------------------------------------------------------------------ issue 12: command line

GET_EVENT_LOOP = """
import asyncio

async def main():
    await asyncio.sleep(0.05)
    return asyncio.get_running_loop()

loop = {how}
running = loop.run_until_complete(main())
print(type(running).__name__, running.time(), running is loop)
loop.close()
"""


@pytest.mark.parametrize(
    "how", ["asyncio.get_event_loop()", "asyncio.get_event_loop_policy().get_event_loop()"]
)
def test_the_classic_get_event_loop_pattern_runs_virtual(tmp_path: Path, how: str) -> None:
    script = write(tmp_path, GET_EVENT_LOOP.format(how=how))
    ours = spawn(sys.executable, "-W", "default", "-m", "virtualtime", "run", script)
    stock = spawn(sys.executable, "-W", "default", script)

    def warnings_of(stderr: str) -> list[str]:
        return [line.split(": ", 1)[1] for line in stderr.splitlines() if "Warning: " in line]

    # Whatever stock asyncio warns about on this Python, the command warns about too.
    assert warnings_of(ours.stderr) == warnings_of(stock.stderr)
    if sys.version_info >= (3, 14):
        # 3.14 made both an error when no loop is set: the same error under the command.
        assert stock.returncode == ours.returncode == EXIT_ERROR
        expected = "RuntimeError: There is no current event loop in thread 'MainThread'."
        assert expected in stock.stderr
        assert expected in ours.stderr
        return
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == "VirtualEventLoop 0.05 True\n"
    assert "virtualtime: 0.05 s of virtual time in " in ours.stderr
    assert "never started an event loop" not in ours.stderr
    assert stock.stdout.startswith(f"{STOCK_LOOP} ")


STOCK_LOOP = "ProactorEventLoop" if os.name == "nt" else "_UnixSelectorEventLoop"

THREADS = """
import asyncio
import threading
import virtualtime

seen = {}

async def probe(name):
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.001)
    virtual = isinstance(loop, virtualtime.VirtualEventLoop)
    seen[name] = (type(loop).__name__, loop.time() if virtual else "-")

def in_a_thread():
    asyncio.run(probe("asyncio.run"))
    loop = asyncio.new_event_loop()
    loop.run_until_complete(probe("new_event_loop"))
    loop.close()
    virtualtime.run(probe("virtualtime.run"))  # asked for explicitly: virtual anyway

thread = threading.Thread(target=in_a_thread)
thread.start()
thread.join()
asyncio.run(probe("main"))
for name, (kind, now) in seen.items():
    print(name, kind, now)
"""


def test_only_the_main_threads_loops_are_virtual_by_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(tmp_path, THREADS)
    status, out, err = run(capsys, "run", "--start", "100", script)
    assert status == 0, err
    assert out.splitlines() == [
        f"asyncio.run {STOCK_LOOP} -",
        f"new_event_loop {STOCK_LOOP} -",
        "virtualtime.run VirtualEventLoop 0.001",  # the thread's own, without --start
        "main VirtualEventLoop 100.001",
    ]
    assert "1 timer fired" in err  # only the main thread's loop is counted
    status, out, err = run(capsys, "run", "--start", "100", "--all-threads", script)
    assert status == 0, err
    assert out.splitlines() == [
        "asyncio.run VirtualEventLoop 100.001",
        "new_event_loop VirtualEventLoop 100.001",
        "virtualtime.run VirtualEventLoop 100.001",
        "main VirtualEventLoop 100.001",
    ]
    assert "4 timers fired, 4 runs" in err


MANY_RUNS = """
import asyncio
import gc
import weakref

loops = []

async def main():
    loops.append(weakref.ref(asyncio.get_running_loop()))
    await asyncio.sleep(1)

for _ in range(300):
    asyncio.run(main())
gc.collect()
print("alive:", sum(ref() is not None for ref in loops))
"""


@pytest.mark.parametrize("traced", [False, True])
def test_nothing_is_kept_per_closed_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, traced: bool
) -> None:
    script = write(tmp_path, MANY_RUNS)
    trace = tmp_path / "many.json"
    extra: list[str | Path] = ["--trace", trace] if traced else []
    status, out, err = run(capsys, "run", *extra, script)
    assert status == 0, err
    assert out == "alive: 0\n"
    # ... and the summary still counts every run.
    assert "5 min of virtual time in " in err
    assert "300 timers fired, 300 runs" in err
    if traced:
        runs = json.loads(trace.read_text())["otherData"]["runs"]
        assert [r["label"] for r in runs] == [f"asyncio loop {n}" for n in range(1, 301)]
        assert {r["timers"] for r in runs} == {1}


def test_plot_rows_that_match_nothing_list_the_rows_and_write_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "run.json"
    run(capsys, "run", "-q", "--until", "2h", "--trace", path, write(tmp_path, UNTIL_SCRIPT))
    picture = tmp_path / "keep.png"
    picture.write_bytes(b"an earlier picture")
    status, _, err = run(capsys, "plot", path, "-o", picture, "--rows", "nothing*")
    assert status == EXIT_USAGE
    assert err.startswith("virtualtime: error: plot: --rows: no row matches 'nothing*'; the rows ")
    names = {
        e["args"]["name"]
        for e in json.loads(path.read_text())["traceEvents"]
        if e.get("name") == "thread_name"
    }
    assert any(f"'{name}'" in err for name in names)
    assert picture.read_bytes() == b"an earlier picture"


def test_the_engine_is_not_patched_during_a_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The command reaches the script's own loops and clocks through virtualtime.configure();
    # the engine's constructors and close() stay the engine's own during the run.
    script = write(
        tmp_path,
        """
        import virtualtime
        import virtualtime.trio

        for cls, name in [
            (virtualtime.VirtualEventLoop, "__init__"),
            (virtualtime.VirtualEventLoop, "close"),
            (virtualtime.trio.VirtualClock, "__init__"),
        ]:
            func = vars(cls)[name]
            print(func.__module__, func.__qualname__)
        """,
    )
    status, out, _ = run(capsys, "run", "--start", "5", script)
    assert status == 0
    assert out.splitlines() == [
        "virtualtime._engine._loop VirtualEventLoop.__init__",
        "virtualtime._engine._loop VirtualEventLoop.close",
        "virtualtime.trio._clock VirtualClock.__init__",
    ]


def test_further_subcommands_plug_into_the_parser(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from virtualtime.cli import _args

    def add(commands: Any) -> None:
        sub = commands.add_parser("hello", help="say hello")
        sub.add_argument("--name", default="world")

    monkeypatch.setitem(_args.SUBCOMMANDS, "hello", add)
    monkeypatch.setitem(_args.HANDLERS, "hello", lambda args: print("hello", args.name) or 7)
    assert run(capsys, "hello", "--name", "you") == (7, "hello you\n", "")
    status, _, err = run(capsys, "nope")
    assert status == EXIT_USAGE
    assert "commands are run, plot, experiment, explore, hello" in err
