"""anyio conformance: anyio's own test suite, stock and on virtualtime's loop or trio clock.

Run by hand (never by CI or pytest), from the project root, with the venv whose anyio and
virtualtime you want to measure::

    .venv/bin/python bench/anyio_conformance.py
    .venv/bin/python bench/anyio_conformance.py --backend trio
    .venv/bin/python bench/anyio_conformance.py -k "from_thread or to_process"
    .venv/bin/python bench/anyio_conformance.py --output anyio.md --json anyio.json

What it does
------------
1. **Gets the tests.**  anyio's wheel has no tests, its sdist does: the sdist of exactly the
   installed anyio version is fetched with ``pip download --no-deps --no-binary :all:`` into
   ``--cache-dir`` (default ``/tmp/virtualtime-anyio-conformance``) and unpacked there once.
   Nothing of anyio's is copied into this project.
2. **Installs what the tests need** into the running interpreter's environment: the
   ``test`` dependency group of anyio's ``pyproject.toml`` (blockbuster, pytest-mock,
   pytest-timeout, trustme, ...), less ``coverage``, which only measures.  Every package it
   installs is printed; ``--no-install`` only reports what is missing.
3. **Runs the suite twice**, each in pytest subprocesses started in the unpacked sdist, so
   anyio's own ``pyproject.toml`` settings (``-p anyio -p timeout``, ``filterwarnings =
   error``, ``xfail_strict``) and its ``tests/conftest.py`` — including the autouse
   ``blockbuster`` fixture that fails a test when anyio's code blocks the loop thread — stay
   in force.  As anyio's own tox does, plugin autoloading is off
   (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``), so virtualtime's pytest plugin is not loaded in
   either run.  Tracebacks are ``--tb=native``: pytest's own formatter re-parses source with
   ``ast``, and on CPython 3.11 that raised ``SystemError: AST constructor recursion depth
   mismatch`` while reporting some failures, an INTERNALERROR that ended the session.
   ``--timeout`` (pytest-timeout, default 30 s per test) keeps a hang cheap; a
   pytest process that dies or exceeds ``--run-timeout`` is restarted after the test it was
   running, which is recorded as ``crashed``.

   ``--backend`` chooses which of anyio's backends is measured (one per invocation):

   * ``asyncio`` (the default): **stock** is asyncio's own loop; **virtual** runs the same
     tests with the asyncio backend's loop built by :func:`virtualtime.new_event_loop`.
   * ``trio``: **stock** is trio with its own clock; **virtual** runs the same tests with a
     fresh :class:`virtualtime.trio.VirtualClock` (defaults) per test as trio's clock.

4. **Compares test by test** and prints: how many passed in the stock run, how many of those
   still pass (kept), each lost one with a one-line reason, and any gained.
5. **Runs each lost and gained test alone** (``--confirm N``, default 3 runs per mode, each in
   a fresh pytest process) and says whether the difference reproduces.  In one long process a
   test can fail for a neighbour's sins -- a socket or child an earlier test leaked is
   garbage-collected during it and pytest turns the ``ResourceWarning`` into a failure -- and
   some of anyio's tests race real threads; the figure is the full run's, the verdicts say
   which losses are the loop's own.

``--output`` writes the Markdown report to a file, ``--json`` the full results (every test's
outcome in both runs, and for each lost test the end of its traceback).  ``--virtual-plugin
MODULE`` loads one more pytest plugin in the virtual run only: a way to measure an experimental
change of the loop (a plugin that patches it at import) against the whole suite before making
it.

The hook
--------
Both runs load ``bench/_anyio_conformance_plugin.py`` (``-p _anyio_conformance_plugin``,
with ``bench/`` on ``PYTHONPATH``).  It keeps only the plain parameter of the measured
backend in anyio's ``anyio_backend`` fixture, so both runs hold the same items: for asyncio,
``asyncio`` (trio and anyio's own uvloop / eager-task loop factories are deselected); for trio,
``trio`` (every asyncio parameter is deselected).  In the virtual run it rewrites the
fixture's value with one of anyio's documented backend options: ``("asyncio", options)``
becomes ``("asyncio", {**options, "loop_factory": virtualtime.new_event_loop})``, passed on to
``asyncio.Runner``; ``("trio", options)`` becomes ``("trio", {**options, "clock":
virtualtime.trio.VirtualClock()})``, a fresh clock each time the fixture is set up (per test),
passed on to trio's run.  A plugin fixture cannot override the one in anyio's conftest (the
closer conftest wins), so the value is rewritten in a ``pytest_fixture_setup`` wrapper; that
also catches modules that parametrize ``anyio_backend`` directly.  anyio's own options (its
``debug=True`` on asyncio) stay, so the two runs differ only in the loop or the clock.  The
plugin also counts each test's virtual runs -- virtual loops created, or trio runs started on
a virtual clock (counted when trio starts the clock, not when it is made): tests that never
use the ``anyio_backend`` fixture (pure synchronous tests, tests that start their own loop or
``trio.run``) run stock in both runs, and the report says how many compared tests really ran
on virtual time.  The JSON names that count ``virtual_runs`` per test and ``on_virtual`` in
all.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from packaging.requirements import Requirement

HERE: Final = Path(__file__).resolve().parent
PLUGIN: Final = "_anyio_conformance_plugin"
DEFAULT_CACHE: Final = Path("/tmp/virtualtime-anyio-conformance")
NOT_NEEDED: Final = frozenset({"coverage"})
"""Packages of anyio's test group that running the tests does not need."""
MAX_RESTARTS: Final = 25
MODES: Final = ("stock", "virtual")


@dataclass(frozen=True)
class Backend:
    """One anyio backend this runner measures, and the words its report uses for it."""

    name: str
    stock: str
    """What the stock run runs on: ``stock asyncio``."""
    virtual: str
    """What the virtual run adds, in the report's title: ``virtualtime's loop``."""
    thing: str
    """What differs between the runs, in a phrase: ``loop`` (``the virtual loop``)."""
    made: str
    """What a test counted as on virtual time did: ``created a virtual loop``."""
    not_made: str
    """And what one that was not did not: ``made no virtual loop``."""
    own: str
    """What a test that does not use ``anyio_backend`` starts by itself: ``loop``."""


BACKENDS: Final = {
    "asyncio": Backend(
        "asyncio", "stock asyncio", "virtualtime's loop", "loop",
        "created a virtual loop", "made no virtual loop", "loop",
    ),
    "trio": Backend(
        "trio", "stock trio", "virtualtime's VirtualClock", "clock",
        "ran on a virtual clock", "ran on no virtual clock", "trio run",
    ),
}  # fmt: skip


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the test suite


def fetch_sdist(version: str, cache: Path) -> Path:
    """The unpacked sdist of anyio ``version`` (downloaded and unpacked once per cache)."""
    root = cache / f"anyio-{version}"
    if (root / "tests" / "conftest.py").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"anyio-{version}.tar.gz"
    if not archive.exists():
        progress(f"downloading the anyio {version} sdist into {cache}")
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary"]
        done = subprocess.run([*pip, ":all:", f"anyio=={version}", "-d", str(cache)])
        if done.returncode != 0:
            raise SystemExit(
                f"pip could not download the sdist of anyio {version} (the installed version; "
                "a development install has none on the index): see pip's message above"
            )
    if not archive.exists():
        raise SystemExit(f"pip download left no {archive.name} in {cache}")
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # 3.11.4+: refuse links and paths out of cache
            tar.extractall(cache, filter="data")
        else:  # pragma: no cover - older 3.11 patch releases
            tar.extractall(cache)  # an sdist pip just fetched from the index
    if not (root / "tests" / "conftest.py").exists():
        raise SystemExit(f"the anyio {version} sdist has no tests/conftest.py under {root}")
    return root


def requirement_parser() -> type[Requirement]:
    """``packaging``'s Requirement (pytest depends on packaging; a bare venv gets it first)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        progress(f"installing into {sys.prefix}: packaging (to read anyio's requirements)")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "packaging"], check=True)
        from packaging.requirements import Requirement
    return Requirement


def missing_test_requirements(sdist: Path) -> list[str]:
    """anyio's ``test`` dependency group entries this environment does not satisfy."""
    parse = requirement_parser()
    project = tomllib.loads((sdist / "pyproject.toml").read_text(encoding="utf-8"))
    group = project.get("dependency-groups", {}).get("test", [])
    missing: list[str] = []
    for entry in group:
        if not isinstance(entry, str):  # an {include-group = ...} table: not used by anyio
            continue
        requirement = parse(" ".join(entry.split()))
        if requirement.name in NOT_NEEDED:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        # The marker holds here, so the requirement without it is the same one.
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        wanted = f"{requirement.name}{extras}{requirement.specifier}"
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(wanted)
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            missing.append(wanted)
    return missing


def install_test_requirements(sdist: Path, install: bool) -> list[str]:
    missing = missing_test_requirements(sdist)
    if not missing:
        progress("anyio's test requirements are all installed")
        return []
    if not install:
        progress("missing (not installed, --no-install): " + ", ".join(missing))
        return missing
    progress(f"installing into {sys.prefix}: " + ", ".join(missing))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
    return missing


# --------------------------------------------------------------------------- one run


@dataclass
class Result:
    outcome: str
    reason: str = ""
    detail: str = ""
    virtual_runs: int = 0


@dataclass
class Run:
    mode: str
    results: dict[str, Result] = field(default_factory=dict)
    seconds: float = 0.0
    processes: int = 0
    log: Path | None = None

    def passed(self) -> set[str]:
        return {nodeid for nodeid, r in self.results.items() if r.outcome == "passed"}

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for result in self.results.values():
            counts[result.outcome] += 1
        return dict(sorted(counts.items()))


def read_records(path: Path) -> tuple[dict[str, Result], list[str], bool]:
    """(results, started node ids in order, whether the session finished) from a records file."""
    results: dict[str, Result] = {}
    started: list[str] = []
    finished = False
    if not path.exists():
        return results, started, finished
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a kill
            continue
        if record["kind"] == "start":
            started.append(record["nodeid"])
        elif record["kind"] == "result":
            results[record["nodeid"]] = Result(
                record["outcome"], record["reason"], record["detail"], record["virtual_runs"]
            )
        elif record["kind"] == "finished":
            finished = True
    return results, started, finished


def suite_env(mode: str, backend: str, records: Path, skip_file: Path | None) -> dict[str, str]:
    """The environment of a pytest process: anyio's tox settings plus the plugin's inputs."""
    env = dict(os.environ)
    env.update(
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        VT_ANYIO_MODE=mode,
        VT_ANYIO_BACKEND=backend,
        VT_ANYIO_RECORDS=str(records),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("VT_ANYIO_SKIP_FILE", None)
    if skip_file is not None:
        env["VT_ANYIO_SKIP_FILE"] = str(skip_file)
    return env


def pytest_command(args: argparse.Namespace, mode: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider"]
    if mode == "virtual":
        for plugin in args.virtual_plugin:
            command += ["-p", plugin]
    return [*command, "-q", "-rN", "--tb=native", "--timeout", f"{args.timeout:g}"]


def last_error_line(log: Path, offset: int) -> str:
    """The last line of an INTERNALERROR (or else the last line) pytest wrote after ``offset``."""
    with open(log, encoding="utf-8", errors="replace") as stream:
        stream.seek(offset)
        lines = [line.strip() for line in stream if line.strip()]
    internal = [line for line in lines if line.startswith("INTERNALERROR>")]
    if internal:
        return internal[-1].removeprefix("INTERNALERROR>").strip()
    return lines[-1] if lines else ""


def run_suite(mode: str, sdist: Path, work: Path, args: argparse.Namespace) -> Run:
    """Run anyio's tests in ``mode`` until every selected test has a result.

    Each pytest process writes its own records file.  A test that started and has no result
    is where the process died (or hit an INTERNALERROR, or ran out of ``--run-timeout``): it
    is recorded as ``crashed`` and a new process runs the tests not yet done.
    """
    skip_file = work / f"{mode}-skip.json"
    log = work / f"{mode}.log"
    for stale in [skip_file, log, *work.glob(f"{mode}-*.jsonl")]:
        stale.unlink(missing_ok=True)
    command = pytest_command(args, mode)
    if args.k:
        command += ["-k", args.k]
    command.append("tests")
    run = Run(mode, log=log)
    results: dict[str, Result] = {}
    begin = time.monotonic()
    while True:
        run.processes += 1
        records = work / f"{mode}-{run.processes}.jsonl"
        env = suite_env(mode, args.backend, records, skip_file)
        remaining = args.run_timeout - (time.monotonic() - begin)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n$ {' '.join(command)}  (process {run.processes})\n")
            out.flush()
            offset = out.tell()
            process = subprocess.Popen(
                command, cwd=sdist, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            killed = False
            try:
                process.wait(timeout=max(remaining, 1.0))
            except subprocess.TimeoutExpired:
                killed = True
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        got, started, finished = read_records(records)
        results.update(got)
        unfinished = [nodeid for nodeid in started if nodeid not in got]
        if not unfinished:
            if not finished or not got:
                progress(f"  {mode}: pytest exited {process.returncode}; see {log}")
            break
        culprit = unfinished[-1]
        if killed:
            why = f"run killed after --run-timeout {args.run_timeout:g} s"
        else:
            what = "INTERNALERROR" if finished else "process died"
            why = f"pytest {what} (exit {process.returncode}): {last_error_line(log, offset)}"
        results[culprit] = Result("crashed", one_line(why, 300))
        progress(f"  {mode}: {one_line(why)} in {culprit}")
        if killed or run.processes > MAX_RESTARTS:
            break
        progress(f"  {mode}: restarting after it")
        skip_file.write_text(json.dumps(sorted(results)), encoding="utf-8")
    run.results = results
    run.seconds = time.monotonic() - begin
    return run


def run_alone(mode: str, nodeid: str, sdist: Path, work: Path, args: argparse.Namespace) -> Result:
    """One test by itself in a fresh pytest process in ``mode``."""
    records = work / f"alone-{mode}.jsonl"
    records.unlink(missing_ok=True)
    env = suite_env(mode, args.backend, records, None)
    command = [*pytest_command(args, mode), nodeid]
    log = work / f"alone-{mode}.log"
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        offset = out.tell()
        try:
            subprocess.run(
                command, cwd=sdist, env=env, stdout=out, stderr=subprocess.STDOUT,
                timeout=args.timeout * 3 + 60,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return Result("crashed", "pytest did not finish")
    results, started, _ = read_records(records)
    if nodeid in results:
        return results[nodeid]
    if nodeid in started:
        return Result("crashed", one_line(f"pytest: {last_error_line(log, offset)}", 300))
    return Result("not run", "pytest reported nothing for this test")


def confirm(
    nodeids: Sequence[str], sdist: Path, work: Path, args: argparse.Namespace
) -> dict[str, dict[str, list[str]]]:
    """Outcomes of each test run alone ``args.confirm`` times in each mode."""
    for mode in MODES:
        (work / f"alone-{mode}.log").unlink(missing_ok=True)
    alone: dict[str, dict[str, list[str]]] = {}
    for index, nodeid in enumerate(nodeids, 1):
        progress(f"  alone {index}/{len(nodeids)}: {nodeid}")
        alone[nodeid] = {
            mode: [run_alone(mode, nodeid, sdist, work, args).outcome for _ in range(args.confirm)]
            for mode in MODES
        }
    return alone


def verdict(lost: bool, outcomes: dict[str, list[str]] | None, reason: str) -> str:
    """What the runs alone say about a lost (or gained) test; ``reason``: the full run's."""
    if not outcomes:
        return ""
    n = len(outcomes["stock"])
    stock = outcomes["stock"].count("passed")
    virtual = outcomes["virtual"].count("passed")
    counts = f"alone: stock {stock}/{n}, virtual {virtual}/{n} passed"
    if (lost and stock == n and virtual == 0) or (not lost and stock == 0 and virtual == n):
        return f"reproduces {counts}"
    if stock == n and virtual == n:
        if "unraisable" in reason.lower():
            return f"{counts}: collateral, an object an earlier test leaked was collected here"
        return f"{counts}: a race, or damage from an earlier test"
    return f"flaky {counts}"


# --------------------------------------------------------------------------- comparison


@dataclass
class Comparison:
    stock: Run
    virtual: Run
    kept: list[str]
    lost: list[str]
    gained: list[str]
    on_virtual: int
    backend: Backend
    alone: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def collateral(self) -> list[str]:
        """Lost tests that pass alone in both runs and failed on a leaked object's warning."""
        return [nodeid for nodeid in self.lost if "collateral" in self.verdict(nodeid)]

    def verdict(self, nodeid: str) -> str:
        lost = nodeid in self.lost
        failed = (self.virtual if lost else self.stock).results.get(nodeid, Result("not run"))
        said = verdict(lost, self.alone.get(nodeid), failed.reason)
        virtual = self.virtual.results.get(nodeid)
        if said and virtual is not None and virtual.virtual_runs == 0:
            said += f"; it {self.backend.not_made}, so this is noise"
        return said


def compare(stock: Run, virtual: Run, backend: Backend) -> Comparison:
    stock_passed, virtual_passed = stock.passed(), virtual.passed()
    kept = sorted(stock_passed & virtual_passed)
    lost = sorted(stock_passed - virtual_passed)
    gained = sorted(virtual_passed - stock_passed)
    on_virtual = sum(
        1
        for nodeid in stock_passed
        if nodeid in virtual.results and virtual.results[nodeid].virtual_runs > 0
    )
    return Comparison(stock, virtual, kept, lost, gained, on_virtual, backend)


def one_line(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def short_name(nodeid: str) -> str:
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def virtualtime_source() -> str:
    """Where the measured virtualtime comes from, with its git commit when it has one."""
    spec = importlib.util.find_spec("virtualtime")
    if spec is None or spec.origin is None:
        return "virtualtime not importable"
    package = Path(spec.origin).resolve().parent
    try:
        git = ["git", "-C", str(package), "log", "-1", "--format=%h %s"]
        commit = subprocess.run(
            [*git, "--", "."], capture_output=True, text=True, check=True
        ).stdout.strip()
        head = subprocess.run(
            [*git[:-1], "--format=%h"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(package), "status", "--porcelain", "--", "."],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return str(package)
    where = f"{package}, last changed in {commit} (HEAD {head})"
    return where + (" (with uncommitted changes)" if dirty else "")


def markdown(comparison: Comparison, meta: dict[str, Any]) -> str:
    stock, virtual, backend = comparison.stock, comparison.virtual, comparison.backend
    thing = backend.thing
    n_stock = len(stock.passed())
    share = f"{100 * len(comparison.kept) / n_stock:.1f} %" if n_stock else "n/a"
    lines = [
        f"# anyio {meta['anyio']} test suite: {backend.stock} vs {backend.virtual}",
        "",
        f"- Python {meta['python']}, pytest-timeout {meta['timeout']:g} s per test"
        + (f", `-k {meta['k']}`" if meta["k"] else ""),
        f"- virtualtime: {meta['virtualtime']}"
        + "".join(f", plus `-p {name}` in the virtual run" for name in meta["virtual_plugins"]),
        f"- run {meta['date']}; stock {stock.seconds:.0f} s, virtual {virtual.seconds:.0f} s",
        "",
        f"| | {backend.stock} | virtualtime {thing} |",
        "|---|---|---|",
    ]
    outcomes = sorted({*stock.counts(), *virtual.counts()})
    for outcome in outcomes:
        lines.append(
            f"| {outcome} | {stock.counts().get(outcome, 0)} | {virtual.counts().get(outcome, 0)} |"
        )
    lines += [
        "",
        f"**Kept {len(comparison.kept)} of the {n_stock} tests that pass on {backend.stock} "
        f"({share})**; lost {len(comparison.lost)}, gained {len(comparison.gained)}.  "
        f"{comparison.on_virtual} of the {n_stock} {backend.made} in the virtual run (the "
        f"rest use no `anyio_backend` {thing}: synchronous tests, or tests that start their "
        f"own {backend.own}).",
        "",
    ]
    if comparison.alone:
        n = len(next(iter(comparison.alone.values()))["stock"])
        verdicts = [comparison.verdict(nodeid) for nodeid in comparison.lost]
        again = sum(v.startswith("reproduces") for v in verdicts)
        flaky = sum(v.startswith("flaky") for v in verdicts)
        collateral = len(comparison.collateral())
        lines += [
            f"Each lost and gained test was then run alone, {n} time(s) per {thing}, each in a "
            f"fresh pytest process (verdicts in brackets): of the {len(comparison.lost)} lost, "
            f"**{again} reproduce alone**, {flaky} are flaky alone, and "
            f"{len(verdicts) - again - flaky} pass alone on both {thing}s — {collateral} of "
            "those failed in the full run on a `ResourceWarning` for an object an earlier test "
            "leaked (collateral), the rest are races with real threads or processes.",
            "",
        ]
        if collateral and n_stock:
            fair = len(comparison.kept) + collateral
            lines += [
                f"Not counting the collateral, the virtual {thing} keeps **{fair} of {n_stock} "
                f"({100 * fair / n_stock:.1f} %)**.",
                "",
            ]
    if comparison.lost:
        lines += [f"## Lost (pass on {backend.stock}, not on the virtual {thing})", ""]
        by_module: dict[str, list[str]] = defaultdict(list)
        for nodeid in comparison.lost:
            by_module[module_of(nodeid)].append(nodeid)
        for module, nodeids in sorted(by_module.items()):
            lines.append(f"### {module} ({len(nodeids)})")
            lines.append("")
            for nodeid in nodeids:
                result = virtual.results.get(nodeid, Result("not run"))
                reason = one_line(result.reason) or "(no message)"
                alone = comparison.verdict(nodeid)
                lines.append(
                    f"- `{short_name(nodeid)}` — {result.outcome}: {reason}"
                    + (f" [{alone}]" if alone else "")
                )
            lines.append("")
    if comparison.gained:
        lines += [f"## Gained (fail on {backend.stock}, pass on the virtual {thing})", ""]
        for nodeid in comparison.gained:
            result = stock.results.get(nodeid, Result("not run"))
            alone = comparison.verdict(nodeid)
            lines.append(
                f"- `{nodeid}` — stock {result.outcome}: {one_line(result.reason)}"
                + (f" [{alone}]" if alone else "")
            )
        lines.append("")
    return "\n".join(lines)


def as_json(comparison: Comparison, meta: dict[str, Any]) -> dict[str, Any]:
    def table(run: Run) -> dict[str, Any]:
        return {
            "seconds": round(run.seconds, 1),
            "pytest_processes": run.processes,
            "counts": run.counts(),
            "tests": {
                nodeid: {"outcome": r.outcome, "reason": r.reason, "virtual_runs": r.virtual_runs}
                for nodeid, r in sorted(run.results.items())
            },
        }

    stock, virtual = comparison.stock, comparison.virtual
    return {
        **meta,
        "stock_passed": len(stock.passed()),
        "kept": len(comparison.kept),
        "kept_not_counting_collateral": len(comparison.kept) + len(comparison.collateral()),
        "on_virtual": comparison.on_virtual,
        "lost": [
            {
                "nodeid": nodeid,
                "outcome": virtual.results.get(nodeid, Result("not run")).outcome,
                "reason": virtual.results.get(nodeid, Result("not run")).reason,
                "detail": virtual.results.get(nodeid, Result("not run")).detail,
                "alone": comparison.alone.get(nodeid),
                "verdict": comparison.verdict(nodeid),
            }
            for nodeid in comparison.lost
        ],
        "gained": [
            {
                "nodeid": nodeid,
                "stock_outcome": stock.results.get(nodeid, Result("not run")).outcome,
                "stock_reason": stock.results.get(nodeid, Result("not run")).reason,
                "alone": comparison.alone.get(nodeid),
                "verdict": comparison.verdict(nodeid),
            }
            for nodeid in comparison.gained
        ],
        "stock": table(stock),
        "virtual": table(virtual),
    }


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run anyio's test suite on one backend, stock and with virtualtime's loop "
        "(asyncio) or VirtualClock (trio); compare test by test."
    )
    parser.add_argument(
        "--backend",
        choices=sorted(BACKENDS),
        default="asyncio",
        help="anyio backend to measure: asyncio (stock loop vs virtualtime.new_event_loop) or "
        "trio (trio's own clock vs a fresh virtualtime.trio.VirtualClock per test) (asyncio)",
    )
    parser.add_argument("--output", type=Path, help="also write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write the full results as JSON here")
    parser.add_argument("-k", help="pytest -k expression, passed to both runs")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per test (pytest-timeout; 30)"
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=3600.0,
        help="real seconds one run (stock or virtual) may take in all (3600)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"where the sdist, logs and records go ({DEFAULT_CACHE})",
    )
    parser.add_argument(
        "--confirm",
        type=int,
        default=3,
        metavar="N",
        help="run each lost and gained test alone N times per run (stock and virtual), in fresh "
        "processes (3; 0: off)",
    )
    parser.add_argument(
        "--virtual-plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="also load this pytest plugin module in the virtual run (repeatable; it must be "
        "importable, e.g. through PYTHONPATH): to measure an experimental change of the loop "
        "or the clock",
    )
    parser.add_argument(
        "--no-install", action="store_true", help="do not install anyio's test requirements"
    )
    args = parser.parse_args(argv)
    if args.confirm < 0:
        parser.error(f"--confirm must be a count of runs, 0 or more, got {args.confirm}")
    for name in ("timeout", "run_timeout"):
        value = getattr(args, name)
        if not value > 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive number of seconds, "
                         f"got {value!r}")  # fmt: skip
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("virtualtime") is None:
        raise SystemExit(f"virtualtime is not importable from {sys.executable}")
    version = importlib.metadata.version("anyio")
    sdist = fetch_sdist(version, args.cache_dir)
    install_test_requirements(sdist, install=not args.no_install)
    backend = BACKENDS[args.backend]
    work = args.cache_dir / f"runs-{version}-{backend.name}"
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Run] = {}
    for mode in MODES:
        progress(
            f"running anyio {version}'s tests, {backend.name} backend, {mode} run "
            f"(log: {work / mode}.log)"
        )
        runs[mode] = run_suite(mode, sdist, work, args)
        progress(f"  {mode}: {runs[mode].counts()} in {runs[mode].seconds:.0f} s")
    comparison = compare(runs["stock"], runs["virtual"], backend)
    if args.confirm and (comparison.lost or comparison.gained):
        progress(f"running each lost and gained test alone, {args.confirm} time(s) per run")
        comparison.alone = confirm([*comparison.lost, *comparison.gained], sdist, work, args)
    meta: dict[str, Any] = {
        "anyio": version,
        "backend": backend.name,
        "python": f"{platform.python_version()} ({sys.executable})",
        "virtualtime": virtualtime_source(),
        "timeout": args.timeout,
        "k": args.k,
        "virtual_plugins": args.virtual_plugin,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    report = markdown(comparison, meta)
    print(report)
    if args.output is not None:
        args.output.write_text(report + "\n", encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(comparison, meta), indent=1) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
