"""One seeded run of a scenario, and what it leaves behind: its outcome, its choices, its print.

:func:`run_seed` is the unit every exploration, shrink and replay is made of: it calls the
scenario for a fresh coroutine and runs it with :func:`virtualtime.run` under the seed
(``seed=``, ``perturb=``), inside :class:`~virtualtime.net._entropy.SeededEntropy` (so
``random`` and ``os.urandom`` draw from the seed too) and, when shrinking, inside
:func:`~virtualtime._engine._seeding.replaying` (only some of the seed's deviations kept).
The loops the run creates are watched through :func:`virtualtime.configure`'s ``on_close``
(for the *fingerprint*, when asked); the run's decisions (how many, which deviated) are read
from the :class:`~virtualtime._engine._seeding.Chooser` of the run's own loop -- the one
:func:`run_seeded` built for ``main()`` -- never from another loop the scenario made.

The run's seed wins
-------------------
A :func:`virtualtime.configure` layer's options win over a loop's own, so around an
exploration (``with virtualtime.configure(seed=1): explore(main)``) every run would be
seed 1's, and each failure labelled with a seed it did not run.  :func:`run_seeded` builds
the run's loop under one more layer, innermost, holding the run's ``seed`` and ``perturb``
-- active only while that one loop is built: the other layers' options still apply to it,
and loops the scenario makes for itself (a helper's own ``virtualtime.run``) keep theirs.

The fingerprint of a run
------------------------
Two runs of one seed must be the same run.  What is compared, in this order, is what the loop
already keeps with ``history=n`` (so the check costs nothing when it is off): every timer it
dispatched (the instant, what it woke, when it was scheduled, its priority and creation
number), every task it made (name, when created and ended), the instant it ended and how many
timers fired, the seeded decisions (how many, which deviated), and how the scenario ended
(what it returned or raised).  Memory addresses (``0x7f...``) are blanked, and asyncio's
default task names (``Task-17``: a counter of the whole process, which goes on counting from
run to run) are renumbered by first appearance, so only a real difference shows.  The first
item that differs is named in the report.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import traceback
import zlib
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, Final

from .._engine._loop import VirtualEventLoop
from .._engine._seeding import replaying, timer_number
from .._options import Perturb, configure
from .._shared._errors import InvalidTypeError
from .._shared._time import shown
from ._entropy import SeededEntropy

__all__ = [
    "FINGERPRINT_HISTORY",
    "NotAScenarioError",
    "RunError",
    "RunResult",
    "call_main",
    "difference",
    "run_seed",
    "run_seeded",
    "seeded",
]

FINGERPRINT_HISTORY: Final = 100_000
"""The history a loop keeps while its run is fingerprinted (the latest timers, if more)."""

_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{6,}")
_TASK_NAME: Final = re.compile(r"\bTask-(\d+)\b")


@dataclasses.dataclass(frozen=True)
class RunError:
    """How a run failed: the exception's type (qualified and short), message and traceback."""

    type: str
    name: str
    message: str
    traceback: str

    @classmethod
    def of(cls, error: BaseException) -> RunError:
        kind = type(error)
        qualified = f"{kind.__module__}.{kind.__qualname__}"
        if kind.__module__ == "builtins":
            qualified = kind.__qualname__
        return cls(
            qualified,
            kind.__qualname__,
            str(error),
            "".join(traceback.format_exception(error)),
        )


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one run came to (picklable: it crosses from worker processes).

    ``error`` is None when the scenario returned; ``decisions`` and ``deviations`` are those
    of the run's own loop (the one ``main()`` ran on); ``fingerprint`` is set when one was
    asked for, as ``(what, text)`` pairs; ``entropy`` counts the draws from each source.
    """

    seed: int
    error: RunError | None
    decisions: int
    deviations: tuple[int, ...]
    entropy: tuple[tuple[str, int], ...]
    fingerprint: tuple[tuple[str, str], ...] | None = None
    outcome: str = ""


def run_seed(
    main: Callable[[], Any],
    seed: int,
    perturb: Perturb,
    options: Mapping[str, Any],
    *,
    keep: frozenset[int] | None = None,
    fingerprint: bool = False,
    on_close: Callable[[VirtualEventLoop], None] | None = None,
) -> RunResult:
    """Run ``main()`` once under ``seed``; catch what it raises (not ``KeyboardInterrupt``).

    A scenario that raises any ``Exception`` -- :class:`~virtualtime.DeadlockError` and
    :class:`~virtualtime.RunawayError` included -- or lets ``asyncio.CancelledError`` out has
    failed; the error is kept, not raised.  ``main()`` must return a coroutine: anything else
    is an :class:`~virtualtime.InvalidTypeError`, raised.  ``on_close`` sees each loop of the
    run as it closes (the trace recorder of a replay uses it).
    """
    loops: list[_Seen] = []
    own: list[VirtualEventLoop] = []

    def closing(loop: object) -> None:
        if isinstance(loop, VirtualEventLoop):
            loops.append(_Seen.of(loop, fingerprint))
            if on_close is not None:
                on_close(loop)

    given = dict(options)
    if fingerprint:
        given["history"] = max(given.get("history") or 0, FINGERPRINT_HISTORY)
    error: RunError | None = None
    outcome = ""
    with seeded(seed, keep, closing) as entropy:
        coro = call_main(main)
        try:
            result = run_seeded(coro, seed, perturb, given, made=own.append)
        except (Exception, asyncio.CancelledError) as exc:
            error = RunError.of(exc)
            outcome = f"raised {error.name}: {error.message}"
        else:
            outcome = f"returned {_repr(result)}" if fingerprint else ""
    # The run's own loop, closed by now; its chooser is still there to read.
    mine = _Seen.of(own[0], False) if own else _Seen(0, (), ())
    prints: tuple[tuple[str, str], ...] | None = None
    if fingerprint:
        names = _Names()
        items: list[tuple[str, str]] = []
        for index, seen in enumerate(loops):
            where = f"loop {index + 1}: " if len(loops) > 1 else ""
            items.extend((where + what, names.plain(text)) for what, text in seen.prints)
        items.append(("the outcome", names.plain(_blank(outcome))))
        prints = tuple(items)
    return RunResult(
        seed,
        error,
        mine.decisions,
        mine.deviations,
        tuple(sorted(entropy.calls.items())),
        prints,
        outcome,
    )


def run_seeded(
    coro: Coroutine[Any, Any, Any],
    seed: int,
    perturb: Perturb,
    options: Mapping[str, Any],
    *,
    made: Callable[[VirtualEventLoop], object] | None = None,
) -> Any:
    """``virtualtime.run(coro, seed=seed, perturb=perturb, **options)``, the run's seed winning.

    The run's loop is built under an innermost :func:`~virtualtime.configure` layer holding
    ``seed`` and ``perturb`` (see the module: "The run's seed wins"), then run as
    :func:`virtualtime.run` runs it; ``made(loop)`` is told which loop that is before it
    runs.  On an error building the loop, ``coro`` is closed (no "never awaited" warning).
    """
    try:
        with configure(seed=seed, perturb=perturb):
            loop = VirtualEventLoop(**options)
    except BaseException:
        coro.close()
        raise
    if made is not None:
        made(loop)
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(coro)


@contextlib.contextmanager
def seeded(
    seed: int,
    keep: frozenset[int] | None,
    on_close: Callable[[Any], object] | None = None,
) -> Iterator[SeededEntropy]:
    """The context of one seeded run: its entropy, its ``keep`` mask, a hook on its loops."""
    with SeededEntropy(seed) as entropy, replaying(keep), configure(on_close=on_close):
        yield entropy


class NotAScenarioError(InvalidTypeError):
    """``main()`` returned something that is not a coroutine: ``main`` is no scenario."""


def call_main(main: Callable[[], Any]) -> Coroutine[Any, Any, Any]:
    """``main()``, which must be a coroutine; else a :class:`NotAScenarioError`."""
    coro = main()
    if not asyncio.iscoroutine(coro):
        raise NotAScenarioError(
            f"main must be a function that returns a coroutine (an `async def` scenario "
            f"taking no arguments), but main() returned {shown(coro)}"
        )
    return coro


def _repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a repr that fails is still a fact about the result
        text = f"<repr failed: {type(exc).__name__}>"
    return text if len(text) <= 500 else text[:497] + "..."


def _blank(text: str) -> str:
    return _ADDRESS.sub("0x?", text)


class _Names:
    """Renumbers asyncio's default task names (``Task-17``) by first appearance in one run."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def plain(self, text: str) -> str:
        return _TASK_NAME.sub(self._renamed, text)

    def _renamed(self, match: re.Match[str]) -> str:
        name = match[0]
        renamed = self._seen.get(name)
        if renamed is None:
            renamed = self._seen[name] = f"Task-#{len(self._seen) + 1}"
        return renamed


@dataclasses.dataclass(frozen=True)
class _Seen:
    """What a closing loop showed: its seeded decisions and, when asked, its print."""

    decisions: int
    deviations: tuple[int, ...]
    prints: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, loop: VirtualEventLoop, fingerprint: bool) -> _Seen:
        chooser = getattr(loop, "_vt_chooser", None)
        decisions = 0 if chooser is None else chooser.decisions
        deviations = () if chooser is None else tuple(chooser.deviations)
        prints = tuple(_prints(loop, decisions, deviations)) if fingerprint else ()
        return cls(decisions, deviations, prints)


def _prints(
    loop: VirtualEventLoop, decisions: int, deviations: tuple[int, ...]
) -> Iterator[tuple[str, str]]:
    history = loop.history
    first = loop.timers_fired - len(history)  # the number of the first timer still kept
    for number, record in enumerate(history, start=first + 1):
        yield (
            f"timer {number} of the history",
            f"t={record.time!r} {_blank(record.what)} (from t={record.scheduled!r}, "
            f"priority {record.priority}, timer #{timer_number(record.seq)})",
        )
    for number, task in enumerate(loop.task_history, start=1):
        ended = "still running" if task.ended is None else f"ended at t={task.ended!r}"
        yield (
            f"task {number} of the task history",
            f"{_blank(task.name)} created at t={task.created!r}, {ended}",
        )
    yield ("the end of the run", f"t={loop.time()!r}, {loop.timers_fired} timers fired")
    listed = ", ".join(map(str, deviations[:20]))
    if len(deviations) > 20:  # the rest by a checksum: the text stays short, and exact
        listed += f", ... (checksum {zlib.crc32(repr(deviations).encode()):08x})"
    yield (
        "the seeded decisions",
        f"{decisions} decisions, {len(deviations)} deviations: [{listed}]",
    )


def difference(first: RunResult, second: RunResult) -> str | None:
    """The first item in which two fingerprinted runs of one seed differ, or None."""
    a, b = first.fingerprint or (), second.fingerprint or ()
    for (what_a, text_a), (what_b, text_b) in zip(a, b, strict=False):
        if what_a != what_b or text_a != text_b:
            if what_a != what_b:
                return (
                    f"run 1 has {what_a} where run 2 has {what_b}: run 1: {text_a}; run 2: {text_b}"
                )
            return f"{what_a} differs: run 1: {text_a}; run 2: {text_b}"
    if len(a) != len(b):
        longer, which = (a, 1) if len(a) > len(b) else (b, 2)
        what, text = longer[min(len(a), len(b))]
        return f"only run {which} has {what}: {text}"
    if first.entropy != second.entropy:
        return (
            f"the entropy drawn differs: run 1: {dict(first.entropy)}; run 2: "
            f"{dict(second.entropy)}"
        )
    return None
