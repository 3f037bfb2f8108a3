"""Seeded choices: one :class:`Chooser` makes every decision a seed decides in a run.

A virtual loop is deterministic by construction: timers due at the same instant run in
``(priority, first scheduled)`` order, and ready callbacks in the order they were made ready.
That is the right default -- a test sees one schedule, always the same -- but it is only one
of the schedules a real machine may produce, and bugs that need another (a reply that beats
its own timeout, a retry that lands before the previous attempt's cleanup) stay hidden.  A
*seed* turns the free choices of a run into draws from one random generator: the order of
timers due at the same instant with the same priority, and -- opt-in, ``perturb="ready"`` --
the order in which the task steps made ready in one loop round run; the simulated network
draws its link jitter and packet loss from the same generator.  Same seed, same draws, same
run, byte for byte; another seed, another schedule, each one a schedule asyncio allows.

Why one object for every decision.  A run's decisions interleave (a timer tie, then a loss
draw, then a ready shuffle...), and only one generator consumed in program order makes the
run a pure function of the seed.  It also makes every decision *countable*: the n-th
decision of a run has an index, and :attr:`Chooser.deviations` lists the ones whose value
differed from the *default* -- the value an unseeded run would have used (FIFO, no jitter, no
loss).  A failing seed can then be *shrunk*: replay it keeping only some deviations
(:func:`replaying` with ``keep=``) and search for a small set that still fails (delta
debugging, as ``virtualtime.explore`` does).  For that to work, every decision draws from
the generator whatever the mask says, so that the draws of later decisions do not shift
when an earlier one is masked back to its default.

What a seed may reorder, and what not.  Timers: any two due at the same tick with the same
priority (explicit priorities still come first).  Ready callbacks: only *task steps* -- a
task's first step and its wake-ups -- and only among the task steps next to them in the
round.  asyncio's own machinery schedules many other callbacks with ``call_soon`` and relies
on their FIFO order, also relative to the wake-ups that follow them (a transport calls
``connection_made``, then starts reading, then wakes the waiter of ``create_connection``; a
future's done callbacks run in the order added), so moving a task step past any other
callback would break asyncio itself, not find bugs in the program.  Tasks made ready
together, though, interleave at their ``await`` points in whatever order a busier or slower
machine could produce, and that is what ``perturb="ready"`` explores.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import itertools
import random
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from .._options import check_option
from .._shared._errors import InvalidTypeError, InvalidValueError

__all__ = ["TIMER_KEY_BITS", "Chooser", "replay_keep", "replaying", "timer_number"]

_T = TypeVar("_T")

TIMER_KEY_BITS: Final = 22
"""The random bits of a timer's key; its sequence number takes the :data:`_COUNTER_BITS`
below them.  Keys stay below 2**62, so the C comparison of heap entries stays on its fast
path (ints of one machine word)."""

_COUNTER_BITS: Final = 40
"""The bits of a timer key that count timers (2**40: a trillion timers per run)."""

_NUMBER_MASK: Final = (1 << _COUNTER_BITS) - 1

# asyncio-private: _PyTask is the pure-Python Task class (a C Task is not an instance of it,
# nor it of asyncio.Task); code that swaps asyncio.Task for it still makes tasks.
_TASK_TYPES: Final = tuple(
    {asyncio.Task, getattr(asyncio.tasks, "_PyTask", asyncio.Task)}  # a set: once if the same
)

_KEEP: Final = contextvars.ContextVar[frozenset[int] | None](
    "virtualtime_replay_keep", default=None
)


def _check_keep(keep: object) -> frozenset[int] | None:
    if keep is None:
        return None
    if not isinstance(keep, frozenset):
        raise InvalidTypeError(
            "keep must be None (every deviation of the seed) or a frozenset of decision "
            f"indices, got {type(keep).__name__}"
        )
    wrong = [index for index in keep if isinstance(index, bool) or not isinstance(index, int)]
    if wrong:
        raise InvalidTypeError(f"keep must hold decision indices (ints), got {wrong[0]!r}")
    return keep


class Chooser:
    """Every seeded decision of one run: drawn from one generator, counted, and maskable.

    A seeded loop makes one (``loop._vt_chooser``) and routes through it every choice the
    program leaves open: :meth:`timer_key` for each timer, :meth:`shuffle_tasks` for each
    ready round (with ``perturb="ready"``); the simulated network draws link jitter and
    loss with :meth:`uniform` and :meth:`chance`.  Code that adds a new kind of decision
    builds it on :meth:`choose`, so that it is counted and masked like the others.

    ``seed`` (an int >= 0) seeds the generator.  ``keep`` masks the run: None keeps every
    decision as drawn; a frozenset of decision indices keeps those and gives every other
    decision its default (so ``keep=frozenset()`` is the unseeded run, consuming the same
    draws).  After a run, :attr:`decisions` says how many decisions it made and
    :attr:`deviations` which of them differed from their default: replaying with
    ``keep=frozenset(deviations)`` repeats the run exactly, and a subset of it is a
    "smaller" run -- closer to the unseeded one -- to try when shrinking a failure.
    """

    __slots__ = ("_bits", "_made", "decisions", "deviations", "keep", "rng", "seed")

    seed: int
    """The seed the generator was made from."""
    keep: frozenset[int] | None
    """The decisions kept as drawn (None: all of them); the others take their default."""
    rng: random.Random
    """The generator: draw from it only inside :meth:`choose` (else nothing is counted)."""
    decisions: int
    """How many decisions were made so far (the index the next one gets)."""
    deviations: list[int]
    """The indices of the decisions whose value differed from their default, in order."""

    def __init__(self, seed: int, keep: frozenset[int] | None = None) -> None:
        checked = check_option("seed", seed)
        if checked is None:
            raise InvalidTypeError("a Chooser's seed must be an int >= 0, got None")
        self.seed = checked
        self.keep = _check_keep(keep)
        self.rng = random.Random(checked)
        self.decisions = 0
        self.deviations = []
        self._bits = self.rng.getrandbits
        self._made = 0

    def __repr__(self) -> str:
        kept = "" if self.keep is None else f" keep={len(self.keep)}"
        return (
            f"<Chooser seed={self.seed}{kept} decisions={self.decisions} "
            f"deviations={len(self.deviations)}>"
        )

    def choose(self, default: _T, draw: Callable[[random.Random], _T]) -> _T:
        """One decision: ``draw(rng)``, or ``default`` where :attr:`keep` masks it.

        ``draw`` is always called, masked or not, so that later decisions draw the same
        numbers whichever earlier ones are masked.  ``default`` is what an unseeded run does
        (compared with ``!=``); a decision whose value differs from it is a deviation.
        """
        index = self.decisions
        self.decisions = index + 1
        value = draw(self.rng)
        keep = self.keep
        if keep is not None and index not in keep:
            value = default
        if value != default:
            self.deviations.append(index)
        return value

    def random(self) -> float:
        """A float in [0, 1); default 0.0."""
        return self.choose(0.0, _random)

    def chance(self, p: float) -> bool:
        """True with probability ``p`` (a loss draw); default False."""
        if not 0.0 <= p <= 1.0:
            raise InvalidValueError(f"p must be a probability in [0, 1], got {p!r}")
        return self.choose(False, lambda rng: rng.random() < p)

    def uniform(self, a: float, b: float) -> float:
        """A float between ``a`` and ``b`` (a jitter draw); default ``a``."""
        return self.choose(a, lambda rng: rng.uniform(a, b))

    def timer_key(self) -> int:
        """The sequence number of a new timer: its place among ties (one decision).

        ``(draw << 40) | n`` with ``draw`` a 22-bit random number and ``n`` the timer's
        creation number: timers due at the same tick with the same priority run in the
        order of their draws, ties between draws first created first.  The default draw is
        0, which leaves ``n`` alone: plain FIFO, as an unseeded loop.  (:meth:`choose`,
        written out: it runs for every timer of a seeded run.)
        """
        index = self.decisions
        self.decisions = index + 1
        draw = self._bits(TIMER_KEY_BITS)
        keep = self.keep
        number = self._made
        self._made = number + 1
        if keep is not None and index not in keep:
            return number
        if draw:
            self.deviations.append(index)
            return (draw << _COUNTER_BITS) | number
        return number

    def ready_gate(self, ready: collections.deque[Any], ntodo: int) -> int:
        """:meth:`shuffle_tasks` as a gate of the loop's ready queue (what
        ``perturb="ready"`` adds): it runs the whole batch, reordered."""
        self.shuffle_tasks(ready, ntodo)
        return ntodo

    def number_timers_from(self, first: int) -> None:
        """Give the next timer key the number ``first`` (and count on from there).

        For a loop seeded while it runs (``loop._vt_reseed``): its timers so far were
        numbered 0, 1, 2...; the seeded ones go on from the next number, so that numbers
        stay unique among the pending timers and grow in the order timers were made.
        """
        self._made = first

    @property
    def timers_made(self) -> int:
        """How many timer keys :meth:`timer_key` has handed out (the next one's number)."""
        return self._made

    def shuffle_tasks(self, ready: collections.deque[Any], ntodo: int) -> None:
        """Permute the task steps among the first ``ntodo`` handles of ``ready`` (one decision).

        Only handles whose callback is a method of an :class:`asyncio.Task` -- its steps and
        wake-ups -- move, and only among the task steps next to them: each run of adjacent
        task steps is permuted within itself, and every other handle keeps its place, with no
        task step passing it in either direction.  asyncio schedules its own callbacks with
        ``call_soon`` and relies on their FIFO order, also with respect to the wake-ups they
        come before: a subprocess transport schedules ``connection_made`` and then resolves
        the waiter of ``create_subprocess_exec``, whose wake-up, run first, would find no
        pipes (``communicate()`` would return ``None``).  Shuffling those would break asyncio
        rather than find a bug in the program.  With no two adjacent task steps there is
        nothing to choose: no decision is made.  The default is the order as it is.
        """
        places = [
            place
            for place, handle in enumerate(itertools.islice(ready, ntodo))
            if _is_task_step(handle)
        ]
        count = len(places)
        runs = []  # (first, end) in ``places`` of each run of two or more adjacent steps
        first = 0
        for index in range(1, count + 1):
            if index == count or places[index] != places[index - 1] + 1:
                if index - first >= 2:
                    runs.append((first, index))
                first = index
        if not runs:
            return
        identity = tuple(range(count))
        order = self.choose(identity, lambda rng: _shuffled_runs(rng, count, runs))
        if order == identity:
            return
        batch = [ready.popleft() for _ in range(ntodo)]
        steps = [batch[place] for place in places]
        for place, taken in zip(places, order, strict=True):
            batch[place] = steps[taken]
        ready.extendleft(reversed(batch))


def timer_number(key: int) -> int:
    """The creation number of the timer with sequence number ``key`` (seeded or not).

    Sequence numbers of a seeded loop do not grow with time (their high bits are drawn);
    their low bits do: use this where the order timers were *made* in matters.
    """
    return key & _NUMBER_MASK


def _is_task_step(handle: Any) -> bool:
    """Is ``handle``'s callback a method of a task: its step or a wake-up?

    A C task schedules its step as a ``TaskStepMethWrapper`` and its wake-up as a bound
    builtin, a pure-Python task as bound methods: each has the task as ``__self__``.
    """
    # asyncio-private: ``Handle._callback`` is the callback a handle runs, and that a task's
    # step and wake-up callbacks carry the task as ``__self__`` is how asyncio happens to
    # build them (C and pure-Python tasks alike), not a documented promise.  Canaries in
    # tests/test_canaries.py check both, and that asyncio.tasks._PyTask still exists.
    return isinstance(getattr(getattr(handle, "_callback", None), "__self__", None), _TASK_TYPES)


def _random(rng: random.Random) -> float:
    return rng.random()


def _shuffled_runs(rng: random.Random, count: int, runs: list[tuple[int, int]]) -> tuple[int, ...]:
    """``range(count)`` with each ``runs`` slice shuffled in place (one shuffle per run)."""
    order = list(range(count))
    for first, end in runs:
        run = order[first:end]
        rng.shuffle(run)
        order[first:end] = run
    return tuple(order)


@contextlib.contextmanager
def replaying(keep: frozenset[int] | None) -> Iterator[None]:
    """Inside the block, every loop seeded (at creation or later) masks its seed with ``keep``.

    The seam of shrinking: run a failing seed again with ``keep`` a subset of its
    :attr:`Chooser.deviations`, and the loop makes only those decisions as the seed drew
    them, every other one as an unseeded loop would.  ``keep=None`` is the plain seeded run.
    A :mod:`contextvars` context: the current thread and the tasks started from it.
    """
    token = _KEEP.set(_check_keep(keep))
    try:
        yield
    finally:
        _KEEP.reset(token)


def replay_keep() -> frozenset[int] | None:
    """The ``keep`` of the innermost active :func:`replaying` block (None outside any)."""
    return _KEEP.get()
