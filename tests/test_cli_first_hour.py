"""``virtualtime run`` as a new user meets it in the first hour (issue 34).

A server run as a program, Ctrl-C on trio, tracebacks as python prints them, the progress bar
with the script's output, misspelt options, and every bad input of ``plot``.  The tests run
the real command in a child process wherever a terminal, a signal or a socket is involved; a
child is waited for by a line it prints, always with a bounded timeout.
"""

from __future__ import annotations

import io
import os
import pty
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from test_cli import run, write

from virtualtime.cli import EXIT_DEADLOCK, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, _progress
from virtualtime.cli._session import Clock, Options, Session

COMMAND = (sys.executable, "-m", "virtualtime", "run")
TIMEOUT = 30.0
"""Real seconds a child may take to say what the test waits for (it takes well under one)."""


class Child:
    """A child process whose stdout lines are read as they come, with a bounded wait."""

    def __init__(self, *argv: str | Path, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            [str(a) for a in argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            # A child that hangs is sent SIGABRT (see finish): faulthandler then prints where
            # every thread of it was, for the failure report.
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put("")  # end of output

    def line(self) -> str:
        """The next line the child prints (waits up to TIMEOUT real seconds for it)."""
        try:
            return self.lines.get(timeout=TIMEOUT)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"the child printed nothing for {TIMEOUT} s") from None

    def finish(self) -> tuple[int, str, str]:
        """Wait for the end; its status, the rest of its stdout, and its stderr."""
        assert self.proc.stderr is not None
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)
            try:
                self.proc.wait(timeout=TIMEOUT)
            finally:
                self.proc.kill()
            stacks = self.proc.stderr.read()
            raise AssertionError(
                f"the child did not end within {TIMEOUT} s; its stderr, with where each of "
                f"its threads was when it was aborted:\n{stacks}"
            ) from None
        self._reader.join(TIMEOUT)
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get())
        return self.proc.returncode, "".join(rest), self.proc.stderr.read()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


# ------------------------------------------------------------------ a server, run as a program

SERVER = """
import asyncio

async def handle(reader, writer):
    line = await reader.readline()
    await asyncio.sleep(3600)              # an hour of work, in virtual time
    now = asyncio.get_running_loop().time()
    writer.write(b"echo " + line.strip() + f" at t={now:g}\\n".encode())
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print("listening on", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def test_a_server_serves_real_clients_until_ctrl_c(tmp_path: Path) -> None:
    # A program that listens waits for clients from outside; it is not a deadlock.  With
    # --deadlock-timeout 0 a loop that counted its listener for nothing would be reported
    # the moment it is idle -- before the first client, between clients -- so the test need
    # not wait to see that it is not.
    with Child(*COMMAND, "--deadlock-timeout", "0", write(tmp_path, SERVER)) as child:
        port = int(child.line().split()[-1])
        for word, hours in (("hello", 1), ("again", 2)):
            with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as client:
                client.sendall(word.encode() + b"\n")
                with client.makefile() as replies:
                    answer = replies.readline()
            assert answer == f"echo {word} at t={3600 * hours}\n"
        child.proc.send_signal(signal.SIGINT)
        status, out, err = child.finish()
    assert status == EXIT_INTERRUPTED, err
    assert out == ""
    assert err.splitlines()[0] == "virtualtime: interrupted at virtual time 2 h"
    assert err.splitlines()[1].startswith("virtualtime: 2 h of virtual time in ")
    assert "deadlock" not in err
    assert "Traceback" not in err


def test_deadlock_timeout_is_how_long_a_quiet_program_may_wait(tmp_path: Path) -> None:
    # A thread that existed before the run wakes the loop after 0.75 real seconds: too late
    # for the default 0.25 s (with room for a loaded machine), in time for 20.
    script = write(
        tmp_path,
        """
        import asyncio, threading, time

        ready = threading.Event()
        loop = future = None

        def helper():
            ready.wait()
            time.sleep(0.75)  # real-time: the quiet spell --deadlock-timeout measures
            loop.call_soon_threadsafe(future.set_result, "woken")

        threading.Thread(target=helper, daemon=True).start()

        async def main():
            global loop, future
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            ready.set()
            print(await future, "at", loop.time())

        asyncio.run(main())
        """,
    )
    waited = subprocess.run(
        [*COMMAND, "--deadlock-timeout", "20", script],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert waited.returncode == EXIT_OK, waited.stderr
    assert waited.stdout == "woken at 0.0\n"
    reported = subprocess.run([*COMMAND, script], capture_output=True, text=True, timeout=TIMEOUT)
    assert reported.returncode == EXIT_DEADLOCK, reported.stderr
    assert "virtualtime: deadlock at virtual time t=0.0" in reported.stderr


def test_deadlock_timeout_reaches_trio_and_takes_inf(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(
        tmp_path,
        """
        import trio

        async def main():
            print(trio.lowlevel.current_clock().deadlock_timeout)

        trio.run(main)
        """,
    )
    for given, shown in (("1.5", "1.5"), ("250ms", "0.25"), ("inf", "inf")):
        status, out, err = run(capsys, "run", "-q", "--deadlock-timeout", given, script)
        assert (status, out) == (EXIT_OK, f"{shown}\n"), err


@pytest.mark.parametrize("value", ["-1", "soon", "nan", ""])
def test_a_bad_deadlock_timeout_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str
) -> None:
    status, out, err = run(
        capsys, "run", "--deadlock-timeout", value, write(tmp_path, "print('ran')\n")
    )
    assert status == EXIT_USAGE
    assert out == ""
    assert "argument --deadlock-timeout: expected real seconds (0.25), a duration " in err
    assert f"got {value!r}" in err
    assert "Traceback" not in err


def test_run_help_documents_deadlock_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "run", "--help")
    assert status == EXIT_OK
    assert "--deadlock-timeout S" in out
    assert "clients from outside" in out


# ------------------------------------------------------------------ Ctrl-C on trio


def test_ctrl_c_on_a_trio_nursery_exits_130(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        """
        import trio

        async def worker():
            while True:
                await trio.sleep(3600)

        async def main():
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(worker)
                await trio.sleep(1)
                print("started", flush=True)
                await trio.sleep_forever()

        trio.run(main)
        """,
    )
    with Child(*COMMAND, script) as child:
        assert child.line() == "started\n"
        child.proc.send_signal(signal.SIGINT)
        status, _, err = child.finish()
    assert status == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert "ExceptionGroup" not in err
    # One human format for the same time in both lines (not 2.11146e+07 s).
    first, second = err.splitlines()[:2]
    match = re.fullmatch(r"virtualtime: interrupted at virtual time ((\d+ (d|h|min|s) ?)+)", first)
    assert match is not None, first
    assert second.startswith(f"virtualtime: {match[1]} of virtual time in ")


# ------------------------------------------------------------------ tracebacks as python's

RAISES_IN_ASYNCIO = """
import asyncio

async def inner():
    await asyncio.sleep(0.01)  # python really waits: keep it short
    raise ValueError("boom")

async def main():
    await inner()

asyncio.run(main())
"""

RAISES_IN_TRIO = """
import trio

async def child():
    await trio.sleep(0.01)  # python really waits: keep it short
    raise ValueError("boom")

async def main():
    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)

trio.run(main)
"""

RAISES_WITH_THE_CLASSIC_LOOP = """
import asyncio

async def main():
    await asyncio.sleep(0.01)  # python really waits: keep it short
    raise KeyError("boom")

loop = asyncio.new_event_loop()
loop.run_until_complete(main())
"""

RAISES_AT_IMPORT = """
import no_such_module_for_virtualtime
"""


@pytest.mark.parametrize(
    "code",
    [RAISES_IN_ASYNCIO, RAISES_IN_TRIO, RAISES_WITH_THE_CLASSIC_LOOP, RAISES_AT_IMPORT],
    ids=["asyncio", "trio", "new_event_loop", "import"],
)
def test_a_failing_script_prints_what_python_prints(tmp_path: Path, code: str) -> None:
    # Same traceback, frame for frame, and nothing after it.
    script = write(tmp_path, code)
    plain = subprocess.run(
        [sys.executable, script.name], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    virtual = subprocess.run(
        [*COMMAND, script.name], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert plain.returncode == virtual.returncode == 1
    assert plain.stderr.startswith("Traceback") or "Exception Group" in plain.stderr
    assert virtual.stderr == plain.stderr


@pytest.mark.parametrize("code", ["import sys\nsys.exit(2)\n", "import sys\nsys.exit('usage')\n"])
def test_a_script_that_exits_early_is_not_told_it_started_no_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, code: str
) -> None:
    status, _, err = run(capsys, "run", write(tmp_path, code))
    assert status != EXIT_OK
    assert "never started an event loop" not in err


# ------------------------------------------------------------------ the progress bar


def screen(raw: str) -> list[str]:
    """The lines a terminal shows after ``raw``: text, \\r, \\n, and the cursor-up and
    erase-line sequences progress bars use (colours and cursor visibility are ignored)."""
    lines: list[list[str]] = [[]]
    row = col = 0
    for match in re.finditer(r"\x1b\[([?\d;]*)([A-Za-z])|\r|\n|[^\x1b\r\n]", raw):
        token = match[0]
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append([])
        elif token.startswith("\x1b"):
            code, final = match[1], match[2]
            count = int(code) if code.isdigit() else 0
            line = lines[row]
            if final == "A":
                row = max(row - max(count, 1), 0)
            elif final == "K" and count == 2:
                line.clear()
            elif final == "K" and count == 0:
                del line[col:]
            elif final == "K" and count == 1:
                line[:col] = [" "] * min(col, len(line))
        else:
            line = lines[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = token
            else:
                line.append(token)
            col += 1
    text = ["".join(line).rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    return text


def run_in_a_terminal(*argv: str | Path) -> str:
    """Run the command with a pseudo-terminal as stdin, stdout and stderr; all it wrote."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTY_", "FORCE_COLOR"))}
    env.update(COLUMNS="100", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [str(a) for a in argv], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # the child is gone (EIO on Linux)
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_the_scripts_output_goes_above_a_live_rich_bar(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        """
        import asyncio, logging, sys

        logging.basicConfig(format="%(levelname)s %(message)s")  # holds sys.stderr from now

        async def main():
            for n in range(1, 13):
                await asyncio.sleep(1)
                print(f"row {n}", flush=True)
                if n % 4 == 0:
                    logging.warning("note %d", n)
            print("no newline yet", end="", flush=True)
            await asyncio.sleep(1)
            print(" ... now")

        asyncio.run(main())
        """,
    )
    # --rate 20: the 13 virtual seconds take 0.65 real ones; the bar shows after 0.3.
    raw = run_in_a_terminal(*COMMAND, "--rate", "20", "--until", "60", script)
    assert "virtual time" in raw  # rich drew its bar ...
    lines = screen(raw)
    expected = []
    for n in range(1, 13):
        expected.append(f"row {n}")
        if n % 4 == 0:
            expected.append(f"WARNING note {n}")
    expected.append("no newline yet ... now")
    # ... and what stays on the terminal is the script's output, whole lines, in order,
    # then the summary: no bar glued to a line, no stale bar left in the scrollback.
    assert lines[:-1] == expected, raw
    assert lines[-1].startswith("virtualtime: 13 s of virtual time in ")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def shown(bar: _progress.Progress) -> bool:
    return bar.shown


def test_a_line_the_script_has_not_finished_waits_below_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In process: the bar's terminal is also the script's stdout.
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    session = Session(Options(until=3600.0), io.StringIO())
    session.latest = Clock("fake", "fake", 0.0, lambda: 1800.0)
    bar = _progress.Progress(session, 3600.0, terminal, show_after=0.0, use_rich=True)
    with bar:
        print("half a line", end="")
        bar.tick()  # not shown over a half-written line
        assert not shown(bar)
        print(" finished")
        bar.tick()
        assert shown(bar)
        print("row 1")
        print("row 2 ", end="")
        print("in two writes")
        print("the end, unfinished", end="")
    assert sys.stdout is terminal
    assert screen(terminal.getvalue()) == [
        "half a line finished",
        "row 1",
        "row 2 in two writes",
        "the end, unfinished",
    ]


# ------------------------------------------------------------------ misspelt options


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "--untill", "6h", "SCRIPT"],
            "run: unknown option --untill (did you mean --until?)",
        ),
        (
            ["run", "--until=6h", "--sed=3", "SCRIPT"],
            "run: unknown option --sed (did you mean --seed?)",
        ),
        (
            ["run", "--deadlock-timout", "1", "SCRIPT"],
            "run: unknown option --deadlock-timout (did you mean --deadlock-timeout?)",
        ),
        (["run", "-x", "SCRIPT"], "run: unknown option -x"),
        (
            ["plot", "--sise", "300x200", "t.json"],
            "plot: unknown option --sise (did you mean --size?)",
        ),
        (["--verison"], "unknown option --verison (did you mean --version?)"),
    ],
)
def test_a_misspelt_option_gets_did_you_mean(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    script = write(tmp_path, "print('ran')\n")
    status, out, err = run(capsys, *[str(script) if a == "SCRIPT" else a for a in argv])
    assert status == EXIT_USAGE
    assert out == ""
    command = " ".join(["virtualtime", *argv[:1]]) if argv[0] in ("run", "plot") else "virtualtime"
    assert err == f"virtualtime: error: {message}; see {command} --help\n"


def test_the_scripts_own_options_are_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = write(tmp_path, "import sys\nprint(sys.argv[1:])\n")
    status, out, _ = run(capsys, "run", "-q", script, "--untill", "-x", "--", "-5")
    assert status == EXIT_OK
    assert out == "['--untill', '-x', '--', '-5']\n"


# ------------------------------------------------------------------ plot: bad input is status 2


def test_every_bad_input_of_plot_is_status_2_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = tmp_path / "good.json"
    good.write_text('{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}')
    cases: dict[str, list[str | Path]] = {}
    for name, content in {
        "not_json": "[1, 2",
        "not_a_trace": '{"events": []}',
        "malformed_event": '{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "name": "a"}]}',
        "wrong_types": '{"traceEvents": [{"ph": "X", "pid": null, "tid": 1, "ts": 0}]}',
    }.items():
        path = tmp_path / f"{name}.json"
        path.write_text(content)
        cases[name] = [path]
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    cases["binary"] = [binary]
    cases["missing"] = [tmp_path / "missing.json"]
    cases["no_rows"] = [good, "--rows", "vehicle *"]
    cases["no_folder"] = [good, "-o", tmp_path / "nowhere" / "t.png"]
    cases["bad_size"] = [good, "--size", "big"]
    cases["bad_max_rows"] = [good, "--max-rows", "0"]
    for name, argv in cases.items():
        status, _, err = run(capsys, "plot", *argv)
        assert status == EXIT_USAGE, (name, err)
        assert "Traceback" not in err, name
        lines = err.splitlines()
        assert lines[-1].startswith(("virtualtime: error: plot:", "virtualtime plot: error:")), (
            name,
            err,
        )
        assert len([line for line in lines if "error" in line]) == 1, (name, err)
