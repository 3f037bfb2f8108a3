"""pytest plugin loaded by ``bench/anyio_conformance.py`` into each run of anyio's test suite.

Not a plugin for users: ``anyio_conformance.py`` puts this directory on ``PYTHONPATH`` and
passes ``-p _anyio_conformance_plugin`` to the pytest it starts.  It does three things, chosen
by environment variables the runner sets; ``VT_ANYIO_BACKEND`` (``asyncio``, the default, or
``trio``) says which backend of anyio is measured:

* **Selection (both runs).**  Only the plain parameter of that backend in ``anyio_backend`` is
  kept.  With asyncio, items parametrized with trio, or with an asyncio ``loop_factory`` of
  anyio's own (uvloop, eager tasks), are deselected; with trio, every asyncio item (and a trio
  one that already brings a ``clock``).  So the stock run and the virtual run collect the same
  items.  Node ids listed in the file named by ``VT_ANYIO_SKIP_FILE`` are deselected too (the
  runner uses this to resume after a crashed pytest process).
* **The virtual time (virtual run only, ``VT_ANYIO_MODE=virtual``).**  Whatever value
  ``anyio_backend`` has for a test — anyio's conftest fixture, a module's own fixture or a
  direct ``@pytest.mark.parametrize("anyio_backend", ...)`` — the plain value of the measured
  backend gains one documented backend option of anyio.  asyncio: ``"asyncio"`` becomes
  ``("asyncio", {"loop_factory": factory})`` and ``("asyncio", options)`` becomes
  ``("asyncio", {**options, "loop_factory": factory})``, where ``factory`` calls
  :func:`virtualtime.new_event_loop`.  trio: ``("trio", options)`` becomes ``("trio",
  {**options, "clock": clock})``, a fresh :class:`virtualtime.trio.VirtualClock` (defaults)
  each time the fixture is set up, i.e. per test; anyio hands it to trio's run.  A plugin
  fixture cannot override anyio's ``tests/conftest.py`` (a conftest is closer to the tests
  than a plugin), so this is done in a ``pytest_fixture_setup`` wrapper that swaps the
  fixture's function for the duration of its setup — the same seam anyio's own pytest plugin
  uses for async fixtures.  Every other option (anyio's ``debug=True``) stays, so the two runs
  differ only in the loop or the clock.
* **Records (both runs).**  One JSON object per line is appended to ``VT_ANYIO_RECORDS``: a
  ``start`` line when a test begins, a ``result`` line when it ends (outcome, one-line reason,
  a longer excerpt, and how many virtual runs the test made: virtual loops created, or trio
  runs started on a virtual clock -- counted in the clock's ``start_clock``, so a clock that
  was made but never ran does not count), and a ``finished`` line at the end of the session.
  Lines written as they happen survive a crash or a kill.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any, Final

import pytest

MODE: Final = os.environ.get("VT_ANYIO_MODE", "stock")
BACKEND: Final = os.environ.get("VT_ANYIO_BACKEND", "asyncio")
VIRTUAL_OPTION: Final = {"asyncio": "loop_factory", "trio": "clock"}
"""Per backend, the anyio backend option through which the virtual run brings virtual time."""
RECORDS: Final = os.environ.get("VT_ANYIO_RECORDS")
SKIP_FILE: Final = os.environ.get("VT_ANYIO_SKIP_FILE")
DETAIL_CHARS: Final = 3000

if BACKEND not in VIRTUAL_OPTION:
    raise pytest.UsageError(
        f"VT_ANYIO_BACKEND must be one of {', '.join(VIRTUAL_OPTION)}, got {BACKEND!r}"
    )

_virtual_runs = 0
_phases: dict[str, list[tuple[str, str, str, str]]] = {}


def _count_run() -> None:
    global _virtual_runs
    _virtual_runs += 1


if MODE == "virtual":
    # Imported now, not by the first test that needs it, so no test pays for the import; the
    # stock run never imports virtualtime at all, the asyncio one never virtualtime.trio.
    import virtualtime

if MODE == "virtual" and BACKEND == "trio":
    import virtualtime.trio

    class _CountedClock(virtualtime.trio.VirtualClock):
        """A default VirtualClock that counts the trio runs it clocks (and changes nothing)."""

        def start_clock(self) -> None:
            _count_run()
            super().start_clock()


def _virtual_loop() -> Any:
    """The loop factory of the virtual asyncio run: a default virtualtime loop, counted."""
    _count_run()
    return virtualtime.new_event_loop()


def _virtual_option() -> object:
    """The value of :data:`VIRTUAL_OPTION` for one test: the loop factory, or a fresh clock."""
    return _virtual_loop if BACKEND == "asyncio" else _CountedClock()


def _is_plain(value: object) -> bool:
    """Whether ``value`` of ``anyio_backend`` names the measured backend, without our option."""
    if value == BACKEND:
        return True
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and value[0] == BACKEND
        and isinstance(value[1], dict)
        and VIRTUAL_OPTION[BACKEND] not in value[1]
    )


def _virtualize(value: object) -> object:
    """``value`` with the virtual loop factory or clock added, if it is a plain backend."""
    if not _is_plain(value):
        return value
    options: dict[str, Any] = {} if isinstance(value, str) else dict(value[1])  # type: ignore[index]
    options[VIRTUAL_OPTION[BACKEND]] = _virtual_option()
    return (BACKEND, options)


def _write(record: dict[str, Any]) -> None:
    if RECORDS is None:
        return
    with open(RECORDS, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip: set[str] = set()
    if SKIP_FILE is not None and Path(SKIP_FILE).exists():
        skip = set(json.loads(Path(SKIP_FILE).read_text(encoding="utf-8")))
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params: dict[str, object] = callspec.params if callspec is not None else {}
        other_backend = "anyio_backend" in params and not _is_plain(params["anyio_backend"])
        (dropped if other_backend or item.nodeid in skip else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Generator[None]:
    if MODE != "virtual" or fixturedef.argname != "anyio_backend":
        return (yield)
    original: Callable[..., object] = fixturedef.func

    def virtual_backend(*args: Any, **kwargs: Any) -> object:
        return _virtualize(original(*args, **kwargs))

    fixturedef.func = virtual_backend
    try:
        return (yield)
    finally:
        fixturedef.func = original


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    global _virtual_runs
    _virtual_runs = 0
    _phases[nodeid] = []
    _write({"kind": "start", "nodeid": nodeid})


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, message)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if isinstance(message, str) and message.strip():
        return message.strip().splitlines()[0]
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "passed" and not hasattr(report, "wasxfail"):
        reason = detail = ""
    elif hasattr(report, "wasxfail"):
        reason, detail = f"xfail: {report.wasxfail}", ""
    else:
        text = report.longreprtext
        reason, detail = _reason(report), text[-DETAIL_CHARS:]
        if "unraisable" in reason.lower():
            # Which object was collected unclosed says whose leak this was.
            leaked = re.search(r"ResourceWarning: (.+)", text)
            if leaked is not None:
                reason += f"; first: {leaked.group(1).strip()}"
    _phases.setdefault(report.nodeid, []).append((report.when, report.outcome, reason, detail))
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
        _phases[report.nodeid][-1] = (report.when, outcome, reason, detail)


def _outcome(phases: Iterable[tuple[str, str, str, str]]) -> tuple[str, str, str]:
    """(outcome, reason, detail) of a test from its setup/call/teardown reports."""
    result = ("passed", "", "")
    for when, outcome, reason, detail in phases:
        if outcome == "failed":
            prefix = "" if when == "call" else f"error in {when}: "
            return ("failed" if when == "call" else "error", prefix + reason, detail)
        if outcome != "passed" and result[0] == "passed":
            result = (outcome, reason, detail)
    return result


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    outcome, reason, detail = _outcome(_phases.pop(nodeid, []))
    _write(
        {
            "kind": "result",
            "nodeid": nodeid,
            "outcome": outcome,
            "reason": reason,
            "detail": detail,
            "virtual_runs": _virtual_runs,
        }
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write({"kind": "finished", "exitstatus": int(exitstatus)})
