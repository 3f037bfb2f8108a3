"""Conformance runner: CPython's own asyncio test suite, on stock asyncio and on the virtual loop.

uvloop earns trust by running CPython's ``test.test_asyncio`` against itself; this script does
the same for :class:`virtualtime.VirtualEventLoop`.  It is run by hand -- never by CI or pytest
-- with the interpreter whose test suite you want to measure::

    .venv/bin/python bench/conformance.py                                 # everything, 2 jobs
    .venv/bin/python bench/conformance.py --modules test_streams,test_ssl*
    .venv/bin/python bench/conformance.py --virtual-options autojump_threshold=0.02
    .venv/bin/python bench/conformance.py --output report.md --json results.json

It runs every ``test.test_asyncio`` module twice, once on stock asyncio and once with every
selector event loop being a virtual loop, each module in its own subprocess (this script
re-run with ``--child``), compares the two passes test by test and prints how many of the
tests that pass on stock asyncio still pass on the virtual loop ("kept"), which do not
("lost", each with a one-line reason) and which pass only on the virtual loop ("gained").
The interpreter must ship the ``test`` package with ``test_asyncio`` (pyenv and python.org
builds do; Debian's ``python3.x`` does not, it lives in ``libpython3.x-testsuite``).  The
virtualtime measured is always the one in this checkout (the child puts the project root
first on ``sys.path``).

When to use it: after any change to ``virtualtime/_engine/_loop.py``, to see what asyncio behaviour
it kept or broke.  Save ``--json`` and diff it against the baseline kept under ``/work/notes``.

Hooks patched in the virtual pass
---------------------------------
The child imports virtualtime first (so ``VirtualEventLoop`` subclasses the real
``SelectorEventLoop``), then, before importing any test module, rebinds:

* ``asyncio.SelectorEventLoop`` and ``asyncio.unix_events.SelectorEventLoop`` -- the tests that
  build a loop directly (``asyncio.SelectorEventLoop()``, ``SelectorEventLoop(EpollSelector())``);
* ``asyncio.EventLoop`` and ``asyncio.unix_events.EventLoop`` where they exist (3.13+:
  ``asyncio.run(..., loop_factory=asyncio.EventLoop)``);
* ``_loop_factory`` of the Unix default policy class (``_UnixDefaultEventLoopPolicy`` up to
  3.13, ``_DefaultEventLoopPolicy`` from 3.14) -- a class attribute, so it reaches
  ``asyncio.new_event_loop()``, ``asyncio.run``/``Runner`` without a factory,
  ``asyncio.DefaultEventLoopPolicy()`` instances the tests create, their subclasses, and the
  ``test.test_asyncio`` helpers (``functional.py``'s ``new_loop``), which all go through it.

Each is bound to ``ConformanceLoop``, a ``VirtualEventLoop`` subclass that takes the stock
signature ``(selector=None)`` and is built with the ``--virtual-options``.  Nothing else is
patched: no sitecustomize, no private loop attribute.  ``test_utils.TestLoop`` (the suite's own
generator-driven fake clock) and ``BaseEventLoop``/``BaseSelectorEventLoop`` subclasses built
on mock selectors are not selector event loops in the sense above, so they stay stock: those
unit tests pass on both sides and are counted as kept, but the report says how many kept tests
never built a virtual loop at all.

Selectors.  A virtual loop always polls through its own selector (the platform default,
epoll on Linux), which it instruments.  So:

* a *stock* selector passed in (``SelectSelector()``, ``PollSelector()``, ``EpollSelector()``,
  ...) is closed and ignored: the ``Select``/``Poll``/``EPoll`` variants of ``test_events``,
  ``test_sock_lowlevel`` and ``test_sendfile`` all run the virtual loop on epoll;
* any *other* selector (a ``mock.Mock()``, a test's own subclass) cannot stand in for ours,
  so ``ConformanceLoop(selector=that)`` returns a *stock* loop instead.  Those tests are
  **structurally excluded**: they are reported in their own list and left out of the kept
  figure (numerator and denominator); the figure including them is printed too.  On 3.11 and
  3.13 no ``test_asyncio`` module does this through ``asyncio.SelectorEventLoop`` (their mock
  selectors go to ``BaseSelectorEventLoop`` subclasses), so the list is expected to be empty.

Timeouts.  The parent reads each child's per-test events from a pipe.  A test with no result
after ``--timeout`` real seconds gets its process group killed and is recorded as lost with
reason ``timeout``; the child is restarted on the rest of its module.  A module still running
after ``--module-cap`` real seconds is killed and every unfinished test in it is recorded as
``timeout``.  A child that dies mid-test (a crash) is recorded the same way, with reason
``crash``, and restarted.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import datetime
import fnmatch
import importlib
import json
import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

MODES = ("stock", "virtual")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Slow modules first, so the parallel jobs finish at about the same time.
_SLOW_FIRST = (
    "test_events",
    "test_subprocess",
    "test_ssl",
    "test_sslproto",
    "test_tasks",
    "test_base_events",
    "test_streams",
    "test_sendfile",
    "test_sock_lowlevel",
    "test_unix_events",
)
_ErrInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


# ---------------------------------------------------------------------------------- child side


@dataclasses.dataclass
class _Counters:
    """How many loops the patched hooks built, since the last reset."""

    virtual: int = 0
    fallback: int = 0


def install_virtual_hooks(options: dict[str, Any]) -> _Counters:
    """Make every selector event loop asyncio builds a VirtualEventLoop (see the docstring)."""
    import asyncio
    import asyncio.unix_events as unix_events

    import virtualtime

    counters = _Counters()
    stock_loop: Any = unix_events.SelectorEventLoop
    stock_selectors = tuple(
        cls
        for name in (
            "SelectSelector",
            "PollSelector",
            "EpollSelector",
            "DevpollSelector",
            "KqueueSelector",
        )
        if (cls := getattr(selectors, name, None)) is not None
    )

    class ConformanceLoop(virtualtime.VirtualEventLoop):
        """A VirtualEventLoop with the stock ``SelectorEventLoop(selector=None)`` signature."""

        def __new__(cls, selector: Any = None) -> Any:
            if selector is not None and type(selector) not in stock_selectors:
                counters.fallback += 1
                return stock_loop(selector)
            return super().__new__(cls)

        def __init__(self, selector: Any = None) -> None:
            if selector is not None:
                selector.close()
            counters.virtual += 1
            super().__init__(**options)

    ConformanceLoop.__qualname__ = ConformanceLoop.__name__
    for module in (asyncio, unix_events):
        for name in ("SelectorEventLoop", "EventLoop"):
            if name in vars(module):
                setattr(module, name, ConformanceLoop)
    for name in ("_UnixDefaultEventLoopPolicy", "_DefaultEventLoopPolicy"):
        policy = vars(unix_events).get(name)
        if policy is not None:
            policy._loop_factory = ConformanceLoop
    return counters


def _reason(err: _ErrInfo) -> str:
    etype, value, _ = err
    if etype is None:
        return "unknown error"
    text = str(value).strip()
    first = text.splitlines()[0] if text else ""
    line = f"{etype.__name__}: {first}" if first else etype.__name__
    return line if len(line) <= 240 else line[:237] + "..."


class _Recorder(unittest.TestResult):
    """Sends one event per test (and per fixture error) to the parent."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], counters: _Counters) -> None:
        super().__init__()
        self._emit = emit
        self._counters = counters
        self._outcome: tuple[str, str] | None = None
        self._started = 0.0

    def _set(self, outcome: str, reason: str) -> None:
        if self._outcome is None or self._outcome[0] == "passed":
            self._outcome = (outcome, reason)

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self._outcome = None
        self._counters.virtual = self._counters.fallback = 0
        self._started = time.monotonic()
        self._emit({"event": "start", "id": test.id()})

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        outcome, reason = self._outcome or ("error", "no outcome reported")
        if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            # A real alarm the test set and did not wait for would kill the *next* test
            # (SIGALRM's default action): cancel it, and say so on the test that left it.
            signal.setitimer(signal.ITIMER_REAL, 0)
            reason = (reason + "; " if reason else "") + "left a real alarm pending (cancelled)"
        self._emit(
            {
                "event": "end",
                "id": test.id(),
                "outcome": outcome,
                "reason": reason,
                "seconds": round(time.monotonic() - self._started, 3),
                "virtual_loops": self._counters.virtual,
                "fallback_loops": self._counters.fallback,
            }
        )

    def _fixture(self, test: object, err: _ErrInfo) -> bool:
        if isinstance(test, unittest.TestCase):
            return False
        # setUpModule/setUpClass/tearDown* failures arrive on an _ErrorHolder.
        self._emit({"event": "fixture_error", "id": str(test), "reason": _reason(err)})
        return True

    def addError(self, test: unittest.TestCase, err: _ErrInfo) -> None:
        if not self._fixture(test, err):
            self._set("error", _reason(err))

    def addFailure(self, test: unittest.TestCase, err: _ErrInfo) -> None:
        if not self._fixture(test, err):
            self._set("failed", _reason(err))

    def addSubTest(
        self, test: unittest.TestCase, subtest: unittest.TestCase, err: _ErrInfo | None
    ) -> None:
        if err is not None:
            failed = err[0] is not None and issubclass(err[0], AssertionError)
            self._set("failed" if failed else "error", _reason(err))

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._set("passed", "")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        if not self._fixture(test, (None, None, None)):
            self._set("skipped", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: _ErrInfo) -> None:
        self._set("xfail", _reason(err))

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self._set("xpass", "unexpected success")


def _flatten(suite: unittest.TestSuite | unittest.TestCase) -> Iterator[unittest.TestCase]:
    if isinstance(suite, unittest.TestSuite):
        for item in suite:
            yield from _flatten(item)
    else:
        yield suite


def child_main(module: str, mode: str, event_fd: int, options: dict[str, Any]) -> int:
    """Run one test_asyncio module, minus the ids read from stdin, reporting to event_fd."""
    sys.path.insert(0, str(PROJECT_ROOT))
    skip = set(json.load(sys.stdin))
    events = os.fdopen(event_fd, "w", buffering=1, encoding="utf-8")
    lock = threading.Lock()

    def emit(event: dict[str, Any]) -> None:
        with lock:
            events.write(json.dumps(event) + "\n")

    counters = install_virtual_hooks(options) if mode == "virtual" else _Counters()
    name = f"test.test_asyncio.{module}"
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(name)
    except unittest.SkipTest as skip_module:  # e.g. test_windows_events on Linux
        emit({"event": "tests", "ids": [name]})
        emit({"event": "start", "id": name})
        emit({"event": "end", "id": name, "outcome": "skipped", "reason": str(skip_module)})
        emit({"event": "done"})
        return 0
    tests = list(_flatten(suite))
    emit({"event": "tests", "ids": [test.id() for test in tests]})
    todo = unittest.TestSuite([test for test in tests if test.id() not in skip])
    todo.run(_Recorder(emit, counters))
    emit({"event": "done"})
    events.close()
    return 0


# --------------------------------------------------------------------------------- parent side


@dataclasses.dataclass
class Record:
    """One test's result in one pass."""

    module: str
    outcome: str  # passed failed error skipped xfail xpass timeout crash not-run
    reason: str
    seconds: float = 0.0
    virtual_loops: int = 0
    fallback_loops: int = 0


class _Lines:
    """Line reader over a pipe with a deadline (select-based)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self.eof = False

    def read(self, deadline: float) -> str | None:
        """The next line, or None on EOF or when the deadline passed (check ``eof``)."""
        while b"\n" not in self._buffer:
            if self.eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready = selectors.DefaultSelector()
            ready.register(self._fd, selectors.EVENT_READ)
            try:
                if not ready.select(remaining):
                    return None
            finally:
                ready.close()
            chunk = os.read(self._fd, 65536)
            if not chunk:
                self.eof = True
                if self._buffer:
                    self._buffer += b"\n"
                    break
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace")


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""


def _exit_reason(code: int, log_path: Path) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}: {_last_line(log_path)}"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_module(
    python: str, module: str, mode: str, timeout: float, cap: float, options: Sequence[str]
) -> dict[str, Record]:
    """Run one module in one mode; restart the child after a per-test timeout or a crash."""
    results: dict[str, Record] = {}
    all_ids: list[str] | None = None
    fixture_errors: list[str] = []
    module_deadline = time.monotonic() + cap
    with tempfile.TemporaryDirectory(prefix=f"conf-{mode}-{module}-") as workdir:
        log_path = Path(workdir) / "child.log"
        while True:
            before = len(results)
            read_fd, write_fd = os.pipe()
            command = [python, str(Path(__file__).resolve()), "--child", module, "--mode", mode]
            command += ["--event-fd", str(write_fd)]
            for option in options:
                command += ["--virtual-options", option]
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(write_fd,),
                    start_new_session=True,
                    cwd=workdir,
                )
            os.close(write_fd)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(sorted(results)).encode())
            proc.stdin.close()
            lines = _Lines(read_fd)
            current: str | None = None
            current_deadline = module_deadline
            done = False
            killed_for = ""
            while True:
                deadline = min(module_deadline, current_deadline)
                line = lines.read(deadline)
                if line is None:
                    if lines.eof:
                        break
                    killed_for = "module cap" if time.monotonic() >= module_deadline else "test"
                    _kill(proc)
                    break
                event = json.loads(line)
                kind = event["event"]
                if kind == "tests":
                    all_ids = all_ids if all_ids is not None else list(event["ids"])
                elif kind == "start":
                    current = event["id"]
                    current_deadline = time.monotonic() + timeout
                elif kind == "end":
                    results[event["id"]] = Record(
                        module,
                        event["outcome"],
                        event["reason"],
                        event.get("seconds", 0.0),
                        event.get("virtual_loops", 0),
                        event.get("fallback_loops", 0),
                    )
                    current, current_deadline = None, module_deadline
                elif kind == "fixture_error":
                    fixture_errors.append(f"{event['id']}: {event['reason']}")
                elif kind == "done":
                    done = True
            os.close(read_fd)
            code = proc.wait()
            if done:
                break
            if killed_for == "module cap":
                for test_id in all_ids or [current or f"test.test_asyncio.{module}"]:
                    results.setdefault(
                        test_id, Record(module, "timeout", f"module cap of {cap:g} s reached")
                    )
                break
            if killed_for == "test":
                assert current is not None
                results[current] = Record(module, "timeout", f"no result in {timeout:g} s")
            elif current is not None:
                results[current] = Record(module, "crash", _exit_reason(code, log_path))
            if len(results) == before:
                # No progress (the child died outside any test, e.g. at import): give up on
                # whatever is left rather than loop.
                reason = _exit_reason(code, log_path)
                for test_id in all_ids or [f"test.test_asyncio.{module}"]:
                    results.setdefault(test_id, Record(module, "crash", reason))
                break
    reason = fixture_errors[0] if fixture_errors else "no result reported"
    for test_id in all_ids or []:
        results.setdefault(test_id, Record(module, "not-run", reason[:240]))
    return results


def discover_modules(patterns: Sequence[str]) -> list[str]:
    """The test_asyncio modules of this interpreter that match any pattern (all if none)."""
    try:
        package = importlib.import_module("test.test_asyncio")
    except ImportError:
        sys.exit(
            f"{sys.executable} has no test.test_asyncio (Debian ships it separately, in "
            "libpython3.x-testsuite): run this script with an interpreter that has it"
        )
    folder = Path(str(package.__file__)).parent
    names = sorted(path.stem for path in folder.glob("test_*.py"))
    if patterns:
        names = [name for name in names if any(fnmatch.fnmatch(name, p) for p in patterns)]
        if not names:
            sys.exit(f"--modules {','.join(patterns)} matches no module in {folder}")
    slow = {name: rank for rank, name in enumerate(_SLOW_FIRST)}
    return sorted(names, key=lambda name: (slow.get(name, len(slow)), name))


def parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` strings to loop options; values are Python literals, else strings."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--virtual-options expects key=value, got {item!r}")
        try:
            value: Any = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        options[key.strip()] = value
    return options


# ------------------------------------------------------------------------------------ report


@dataclasses.dataclass
class Comparison:
    """The two passes compared test by test."""

    stock_passed: list[str]
    kept: list[str]
    lost: list[str]
    gained: list[str]
    excluded: list[str]
    no_virtual_loop: list[str]


def compare(stock: dict[str, Record], virtual: dict[str, Record]) -> Comparison:
    """Kept, lost, gained; structurally excluded tests are listed apart (see the docstring)."""
    missing = Record("?", "not-run", "missing from the virtual pass")
    excluded = sorted(i for i, r in virtual.items() if r.fallback_loops > 0)
    excluded_set = set(excluded)
    stock_passed = sorted(i for i, r in stock.items() if r.outcome == "passed")
    counted = [i for i in stock_passed if i not in excluded_set]
    kept = [i for i in counted if virtual.get(i, missing).outcome == "passed"]
    lost = [i for i in counted if virtual.get(i, missing).outcome != "passed"]
    gained = sorted(
        i
        for i, r in virtual.items()
        if r.outcome == "passed"
        and i not in excluded_set
        and (i not in stock or stock[i].outcome != "passed")
    )
    no_virtual = [i for i in kept if virtual[i].virtual_loops == 0]
    return Comparison(stock_passed, kept, lost, gained, excluded, no_virtual)


def _kind(record: Record) -> str:
    if record.outcome in ("failed", "error"):
        return f"{record.outcome}: {record.reason.split(':')[0]}"
    return record.outcome


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "n/a"


def render(
    results: dict[str, dict[str, Record]],
    comparison: Comparison,
    header: dict[str, Any],
) -> str:
    """The Markdown report."""
    stock, virtual = results["stock"], results["virtual"]
    c = comparison
    counted = len(c.stock_passed) - len(set(c.stock_passed) & set(c.excluded))
    all_kept = sum(1 for i in c.stock_passed if virtual.get(i) and virtual[i].outcome == "passed")
    out: list[str] = ["# test_asyncio conformance of the virtual loop", ""]
    for key, value in header.items():
        out.append(f"- {key}: {value}")
    out += [
        "",
        "| | tests |",
        "|---|---:|",
        f"| tests in the stock pass | {len(stock)} |",
        f"| passed on stock asyncio | {len(c.stock_passed)} |",
        f"| structurally excluded (ran on a stock loop: custom selector) | {len(c.excluded)} |",
        f"| **kept** (passed on both) | **{len(c.kept)} of {counted} = "
        f"{_percent(len(c.kept), counted)}** |",
        f"| kept, counting excluded tests too | {all_kept} of {len(c.stock_passed)} = "
        f"{_percent(all_kept, len(c.stock_passed))} |",
        f"| kept tests that never built a virtual loop (TestLoop / mocks) | "
        f"{len(c.no_virtual_loop)} |",
        f"| **lost** (passed on stock, not on virtual) | **{len(c.lost)}** |",
        f"| gained (passed only on virtual) | {len(c.gained)} |",
        "",
        "## Per module",
        "",
        "| module | stock passed | kept | lost | gained |",
        "|---|---:|---:|---:|---:|",
    ]
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for i in c.stock_passed:
        by_module[stock[i].module]["stock"] += 1
    for name, ids in (("kept", c.kept), ("lost", c.lost), ("gained", c.gained)):
        for i in ids:
            by_module[(stock.get(i) or virtual[i]).module][name] += 1
    for module in sorted(by_module):
        n = by_module[module]
        out.append(f"| {module} | {n['stock']} | {n['kept']} | {n['lost']} | {n['gained']} |")
    out += ["", f"## Lost ({len(c.lost)})", ""]
    missing = Record("?", "not-run", "missing from the virtual pass")
    current = ""
    for i in c.lost:
        record = virtual.get(i, missing)
        module = stock[i].module
        if module != current:
            out += ["", f"### {module}", ""] if current else [f"### {module}", ""]
            current = module
        short = i.removeprefix(f"test.test_asyncio.{module}.")
        out.append(f"- `{short}` -- {record.outcome}: {record.reason}")
    reasons = Counter(_kind(virtual.get(i, missing)) for i in c.lost)
    if reasons:
        out += ["", "Lost by outcome and exception type:", ""]
        out += [f"- {name or '(none)'}: {n}" for name, n in reasons.most_common()]
    out += ["", f"## Gained ({len(c.gained)})", ""]
    for i in c.gained:
        reason = stock[i].outcome + ": " + stock[i].reason if i in stock else "not in stock pass"
        out.append(f"- `{i.removeprefix('test.test_asyncio.')}` (stock: {reason})")
    out += ["", f"## Structurally excluded ({len(c.excluded)})", ""]
    out += [f"- `{i.removeprefix('test.test_asyncio.')}`" for i in c.excluded]
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------------------------- main


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run CPython's test_asyncio on stock asyncio and on virtualtime's loop, "
        "and compare test by test."
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel module processes (2)")
    parser.add_argument(
        "--modules",
        default="",
        help="comma-separated module names or fnmatch patterns (test_events,test_s*); all if empty",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="real seconds one test may take (60)"
    )
    parser.add_argument(
        "--module-cap",
        type=float,
        default=900.0,
        help="real seconds one module may take in one pass (900)",
    )
    parser.add_argument("--output", type=Path, help="also write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write per-test results here (for diffing)")
    parser.add_argument(
        "--virtual-options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a VirtualEventLoop option for the virtual pass (repeatable), e.g. "
        "autojump_threshold=0.02",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--event-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.timeout <= 0 or args.module_cap <= 0:
        parser.error("--timeout and --module-cap must be > 0")
    return args


def _progress(text: str, stream: TextIO = sys.stderr) -> None:
    print(text, file=stream, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    options = parse_options(args.virtual_options)
    if args.child:
        assert args.mode is not None
        assert args.event_fd is not None
        return child_main(args.child, args.mode, args.event_fd, options)

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started with SIGINT ignored (`cmd &` in a script): every child would inherit that,
        # and test_runners' Ctrl-C tests would time out on both loops.  Python's handler
        # here gives each child the default a terminal gives.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, str(PROJECT_ROOT))
    import virtualtime

    try:  # a bad option fails here, once, not in every child
        virtualtime.VirtualEventLoop(**options).close()
    except (TypeError, ValueError) as error:
        raise SystemExit(f"--virtual-options: {error}") from None
    patterns = [p.strip() for p in args.modules.split(",") if p.strip()]
    modules = discover_modules(patterns)
    jobs = [(mode, module) for module in modules for mode in MODES]
    results: dict[str, dict[str, Record]] = {mode: {} for mode in MODES}
    started = time.monotonic()
    finished = 0
    lock = threading.Lock()

    def one(job: tuple[str, str]) -> None:
        nonlocal finished
        mode, module = job
        t0 = time.monotonic()
        records = run_module(
            sys.executable, module, mode, args.timeout, args.module_cap, args.virtual_options
        )
        outcomes = Counter(r.outcome for r in records.values())
        with lock:
            results[mode].update(records)
            finished += 1
            summary = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
            _progress(
                f"[{finished}/{len(jobs)}] {mode:7} {module}: {summary} "
                f"({time.monotonic() - t0:.1f} s)"
            )

    _progress(f"{len(modules)} modules x {len(MODES)} passes, {args.jobs} jobs, {sys.version}")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in [pool.submit(one, job) for job in jobs]:
            future.result()
    elapsed = time.monotonic() - started
    comparison = compare(results["stock"], results["virtual"])
    header: dict[str, Any] = {
        "python": f"{platform.python_implementation()} {platform.python_version()} "
        f"({sys.executable})",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "virtual options": ", ".join(args.virtual_options) or "defaults",
        "modules": ", ".join(patterns) or f"all {len(modules)}",
        "per-test timeout": f"{args.timeout:g} s, module cap {args.module_cap:g} s",
        "jobs": args.jobs,
        "wall time": f"{elapsed:.0f} s",
    }
    report = render(results, comparison, header)
    print(report)
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    if args.json:
        payload = {
            "header": header,
            "summary": {
                "stock_passed": len(comparison.stock_passed),
                "kept": len(comparison.kept),
                "lost": len(comparison.lost),
                "gained": len(comparison.gained),
                "excluded": len(comparison.excluded),
            },
            "results": {
                mode: {i: dataclasses.asdict(r) for i, r in sorted(records.items())}
                for mode, records in results.items()
            },
        }
        args.json.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
