"""A snapshot of every public module's ``__all__``: changing the public API is deliberate.

If this fails, you added, removed or renamed a public name.  If that was the intent, update
the snapshot below in the same commit (and the docs and the changelog); if not, keep the name
where it was.  Names that most users need live at the top level; the rest live in their
part's module (``virtualtime.trio``, ``virtualtime.sim``, ``virtualtime.cli``, ...).
"""

from __future__ import annotations

import importlib
import sys

import pytest

SNAPSHOT: dict[str, tuple[str, ...]] = {
    "virtualtime": (
        "DeadlockError",
        "FellBehindError",
        "HistoryRecord",
        "InvalidTypeError",
        "InvalidValueError",
        "LoopOptions",
        "RESOLUTION",
        "RunawayError",
        "UsageError",
        "VirtualEventLoop",
        "VirtualTimeError",
        "anyio_run",
        "configure",
        "evolve",
        "explore",
        "fast_forward",
        "new_event_loop",
        "now",
        "peek",
        "run",
        "run_until",
        "settle",
        "sleep",
        "sleep_until",
        "step",
        "wall_time",
    ),
    "virtualtime.net": (
        "EntropyReport",
        "Exploration",
        "Failure",
        "Host",
        "Link",
        "Network",
        "WINDOW",
        "current_host",
        "explore",
        "replay",
    ),
    "virtualtime.trio": (
        "RunGuard",
        "VirtualClock",
        "run",
    ),
    "virtualtime.sim": (
        "ARRIVAL_TOLERANCE",
        "AllOf",
        "AnyOf",
        "BaseResource",
        "Between",
        "BufferStats",
        "Clock",
        "ConditionValue",
        "Container",
        "DistanceTable",
        "Euclidean",
        "FilterStore",
        "Fleet",
        "Geometry",
        "Get",
        "GuidePath",
        "Interrupt",
        "Journey",
        "JourneyOutcome",
        "JourneyStatus",
        "ORDERS",
        "PRIORITIES",
        "PeriodicAction",
        "Point",
        "Polyline",
        "Preempted",
        "PreemptiveResource",
        "PriorityItem",
        "PriorityResource",
        "PriorityStore",
        "Process",
        "Put",
        "Request",
        "Resource",
        "ResourceStats",
        "Signal",
        "Simulation",
        "Store",
        "Summary",
        "Tally",
        "TimeSeries",
        "Timeline",
        "TimelineEntry",
        "Timer",
        "TriggerClock",
        "Vehicle",
        "all_of",
        "current_process",
        "first_of",
        "now",
        "simulate",
        "sleep",
        "start",
        "start_delayed",
    ),
    "virtualtime.cli": (
        "EXIT_DEADLOCK",
        "EXIT_ERROR",
        "EXIT_INTERRUPTED",
        "EXIT_OK",
        "EXIT_UNTIL",
        "EXIT_USAGE",
        "main",
    ),
    "virtualtime.pytest_plugin": (
        "DEFAULT_MAX_TIME",
        "VirtualTime",
        "deadlock_report",
    ),
}

POLICY_UNTIL: tuple[int, int] = (3, 16)
"""``virtualtime.EventLoopPolicy`` exists only where asyncio still has policies."""


@pytest.mark.parametrize("module_name", sorted(SNAPSHOT))
def test_public_names_are_the_snapshot(module_name: str) -> None:
    module = importlib.import_module(module_name)
    expected = set(SNAPSHOT[module_name])
    if module_name == "virtualtime" and sys.version_info < POLICY_UNTIL:
        expected.add("EventLoopPolicy")
    actual = set(module.__all__)
    added, removed = sorted(actual - expected), sorted(expected - actual)
    assert (added, removed) == ([], []), (
        f"the public API of {module_name} changed: added {added}, removed {removed}; "
        "if that is deliberate, update SNAPSHOT in tests/test_api_snapshot.py"
    )


def test_the_top_level_has_no_tracing_helpers() -> None:
    import virtualtime

    for name in ("chrome_trace", "plot_trace", "record_span", "write_trace"):
        assert not hasattr(virtualtime, name), f"virtualtime.{name} belongs to its own module"
