"""The short report of a test that deadlocked, alike on asyncio and trio.

Owns :func:`deadlock_report` (public: the report's text for a
:class:`~virtualtime.DeadlockError`) and what it needs to show each blocked task from the
test's own code on -- which files are the test runners' and libraries' frames, left out -- and
how the error is found inside an exception group.  The ``pytest_runtest_makereport`` hook puts
the report in place of the traceback unless ``--tb=long`` or ``native`` is asked for.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from ._settings import _settings

_HARNESS: Final = (
    "/anyio/_backends/",
    "/anyio/pytest_plugin.py",
    "/pytest_asyncio/",
    "/pytest_trio/",
    "/virtualtime/pytest_plugin/",  # every module of this plugin
    "/virtualtime/trio/",  # RunGuard.guarded_main, in whichever module of the package
    "/virtualtime/_engine/_loop.py",
    "/_pytest/",
    "/pluggy/",
)
"""Files of the runners, whose frames lead up to the test's own code in a task's stack."""


def _user_frames(where: str) -> str:
    """A blocked task's stack (``f() at file:line -> g() at ...``) from the first frame
    that is not the test runners' own."""
    frames = where.split(" -> ")
    index = 0
    while index < len(frames) - 1 and any(
        part in frames[index].replace("\\", "/") for part in _HARNESS
    ):
        index += 1
    return " -> ".join(frames[index:])


_LIBRARIES: Final = ("/trio/", "/anyio/", "/outcome/")
"""Libraries a blocked task's stack passes through on its way to what it waits for."""


def _runner_only(where: str) -> bool:
    """Whether a blocked task's stack is all test runners' and libraries' frames."""
    return all(
        any(part in frame.replace("\\", "/") for part in (*_HARNESS, *_LIBRARIES))
        for frame in where.split(" -> ")
    )


def _settings_or_none(item: pytest.Item) -> bool:
    """Whether ``item`` is a virtual test (False if its marks are bad: set-up says so)."""
    try:
        return _settings(item).virtual
    except pytest.fail.Exception:
        return False


def _deadlock_of(error: BaseException) -> Any:
    """The DeadlockError ``error`` is, or the only one an exception group holds."""
    from .._shared._errors import DeadlockError

    if isinstance(error, DeadlockError):
        return error
    if isinstance(error, BaseExceptionGroup):
        found = [_deadlock_of(inner) for inner in error.exceptions]
        found = [e for e in found if e is not None]
        if len(found) == 1 and len(error.exceptions) == 1:
            return found[0]
    return None


def deadlock_report(error: Any) -> str:
    """The short report of a test that deadlocked: what happened, then each blocked task.

    The same shape on asyncio and trio: the first sentence of the loop's or clock's message,
    then one line per blocked task with its stack from the test's own code on (the frames of
    pytest, pytest-asyncio, anyio and virtualtime that lead up to it are left out).
    """
    message = str(error)
    head = message.split("\n", 1)[0]
    for end in ("Blocked tasks:", ".  "):
        cut = head.find(end)
        if cut > 0:
            head = head[:cut].rstrip()
    head = head.rstrip(".") + "."
    lines = [f"DeadlockError: {head}"]
    blocked = tuple(getattr(error, "blocked", ()) or ())
    # A runner's own tasks (pytest-trio's, waiting for the test) say nothing about the test.
    own = tuple((name, where) for name, where in blocked if not _runner_only(where)) or blocked
    if own:
        lines.append("Blocked tasks:")
        lines.extend(f"  - {name}: {_user_frames(where)}" for name, where in own)
    else:
        lines.append(message)
    lines.append("(run with --tb=long for the full traceback)")
    return "\n".join(lines)
