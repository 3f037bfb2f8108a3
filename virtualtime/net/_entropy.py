"""The entropy a program reaches besides the loop: seeded for a run, counted, and reported.

A seed makes the loop's own choices repeatable (:mod:`virtualtime._engine._seeding`), but a
program also draws from sources the loop does not own, and a run that draws from them is not
a function of its seed: ``random.random()`` continues wherever the previous run left the
module's generator, ``uuid.uuid4()`` and ``secrets.token_hex()`` read the operating system's
randomness, and the iteration order of a ``set`` of strings changes with the process's hash
seed.  :class:`SeededEntropy` takes the first two in hand for the length of one run:

* the :mod:`random` module's global generator is seeded as ``random.seed(seed)`` (and put
  back as it was afterwards, so the code around the run does not notice); its module
  functions (``random.random``, ``randint``, ``choice``, ``shuffle``...) are counted;
* ``os.urandom`` -- and with it ``uuid.uuid4``, :mod:`secrets` and ``random.SystemRandom``,
  which read it -- returns a stream drawn from the seed (and a *salt*, see below), and is
  counted.

Whose stream.  :func:`virtualtime.net.explore` runs one scenario under many seeds: each run's
``os.urandom`` stream is drawn from the run's seed alone, so a seed's run draws the same bytes
whenever (and in whichever process) it runs.  The pytest plugin runs *many tests* under one
seed: there the stream is salted with the test's node id, so that two tests under seed 0 do
not draw the same ``uuid4()`` values (two tests that share a database would collide on their
keys), and each test still draws the same bytes under its seed every time it runs.  The
:mod:`random` module is seeded with the seed alone in both (``random.seed(seed)``, as one
would write it by hand).

What cannot be seeded from inside a process is reported instead: ``PYTHONHASHSEED``.  With
hash randomization on (the variable unset, or ``random``), ``hash()`` of a ``str`` or
``bytes`` differs between processes, and so does the order of sets and the buckets of dicts
keyed by them; a run in another process (a worker, a replay from the command line) may then
take another path.  :func:`hash_seed` says which hash seed this process has.

Objects hashed by ``id()`` and real clocks (``time.perf_counter``) are not sources this
module can seed: the determinism check of :func:`virtualtime.net.explore` finds them, by
running a seed twice and comparing.

The patches are process-wide while a run lasts (another thread drawing at that time draws
from the seeded stream too), and undone when it ends.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import sys
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Final

from .._shared._errors import InvalidValueError

__all__ = ["SOURCES", "EntropyReport", "SeededEntropy", "hash_seed"]

RANDOM: Final = "random"
"""The :mod:`random` module's global generator (its module functions)."""
URANDOM: Final = "os.urandom"
"""The operating system's randomness: ``os.urandom``, ``uuid.uuid4``, :mod:`secrets`,
``random.SystemRandom``."""

SOURCES: Final = (RANDOM, URANDOM)
"""The sources :class:`SeededEntropy` seeds and counts, in the order reports list them."""

# The module functions of ``random`` that draw from its global generator (bound methods of
# ``random._inst``): each is replaced by a counting wrapper for the length of a run.  Code
# that bound one before the run (``from random import random``) still draws from the seeded
# generator, but uncounted; the generator's state tells that it was reached.
_DRAWS: Final = tuple(
    name
    for name in (
        "betavariate",
        "binomialvariate",
        "choice",
        "choices",
        "expovariate",
        "gammavariate",
        "gauss",
        "getrandbits",
        "lognormvariate",
        "normalvariate",
        "paretovariate",
        "randbytes",
        "randint",
        "random",
        "randrange",
        "sample",
        "shuffle",
        "triangular",
        "uniform",
        "vonmisesvariate",
        "weibullvariate",
    )
    if callable(getattr(random, name, None))
)


def hash_seed() -> str | None:
    """This process's ``PYTHONHASHSEED`` when it fixes ``str`` hashing; None when random.

    None means hash randomization is on: the order of a set of strings may differ in another
    process, so a run that iterates one may not replay there.
    """
    value = os.environ.get("PYTHONHASHSEED")
    if not sys.flags.hash_randomization:
        return value if value not in (None, "", "random") else "0"
    if value in (None, "", "random"):
        return None
    return value  # set after start-up: it does not apply to this process, but to its children


class SeededEntropy:
    """For the length of a ``with`` block, the program's entropy comes from ``seed``.

    Use it around one run of a scenario to make the run a function of its seed: the
    :mod:`random` module is seeded as ``random.seed(seed)``, and ``os.urandom`` (so
    ``uuid.uuid4``, :mod:`secrets`, ``random.SystemRandom``) returns bytes drawn from the seed
    and ``salt`` (give each of many programs run under one seed a salt of its own).
    Everything is put back on exit, the generator's state included.  :attr:`calls` counts what
    the block drew from each source (see :data:`SOURCES`).  Blocks nest (each puts back what it
    found); they are process-wide, not per thread.
    """

    __slots__ = ("_random_state", "_saved", "_seeded_state", "calls", "salt", "seed")

    def __init__(self, seed: int, salt: str = "") -> None:
        self.seed = seed
        self.salt = salt
        """Mixed into the ``os.urandom`` stream's seed (not :mod:`random`'s): a test's node id
        under pytest, so that tests under one seed draw different bytes; empty for a run of
        :func:`~virtualtime.net.explore`, whose stream is its seed's alone."""
        self.calls: dict[str, int] = dict.fromkeys(SOURCES, 0)
        """How many times the block drew from each source (a key of :data:`SOURCES`)."""
        self._saved: list[tuple[object, str, object]] = []
        self._random_state: Any = None
        self._seeded_state: Any = None

    def __enter__(self) -> SeededEntropy:
        self._random_state = random.getstate()
        random.seed(self.seed)
        self._seeded_state = random.getstate()
        calls = self.calls
        for name in _DRAWS:
            self._patch(random, name, _counted(getattr(random, name), calls, RANDOM))
        salted = f" {self.salt}" if self.salt else ""
        stream = random.Random(f"virtualtime os.urandom {self.seed}{salted}")
        urandom = _seeded_urandom(stream, calls)
        self._patch(os, "urandom", urandom)
        # stdlib-private: random.SystemRandom (and so secrets) reads os.urandom through the
        # name random bound at import, ``random._urandom`` (SystemRandom.random/getrandbits
        # call it); replaced for the block so that secrets.token_hex() is seeded too.  A
        # canary test (test_canaries.py) checks that SystemRandom still draws through it.
        if hasattr(random, "_urandom"):
            self._patch(random, "_urandom", urandom)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Drawn through a name bound before the block (``from random import random``)?  The
        # generator moved without a counted call: count it as reached once.
        if self.calls[RANDOM] == 0 and random.getstate() != self._seeded_state:
            self.calls[RANDOM] = 1
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()
        random.setstate(self._random_state)
        self._random_state = self._seeded_state = None

    def _patch(self, owner: object, name: str, value: object) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)


def _counted(draw: Callable[..., Any], calls: dict[str, int], source: str) -> Callable[..., Any]:
    @functools.wraps(draw)
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[source] += 1
        return draw(*args, **kwargs)

    return counted


def _seeded_urandom(stream: random.Random, calls: dict[str, int]) -> Callable[[int], bytes]:
    def urandom(size: int, /) -> bytes:
        """``os.urandom`` for a seeded run: ``size`` bytes drawn from the run's seed."""
        if size < 0:
            raise InvalidValueError(f"os.urandom: size must be >= 0, got {size!r}")
        calls[URANDOM] += 1
        return stream.randbytes(size)

    return urandom


@dataclasses.dataclass(frozen=True)
class EntropyReport:
    """Which sources of entropy the runs of an exploration reached, and the hash seed.

    ``calls[source]`` is how many times the runs drew from a source of :data:`SOURCES` in all,
    ``runs[source]`` in how many runs; each run's draws were seeded from its seed (so they
    repeat with it).  ``hash_seed`` is the ``PYTHONHASHSEED`` the runs had, or None when hash
    randomization was on: then the order of sets of strings may differ in another process,
    and a failure found here may not replay there (``PYTHONHASHSEED=0 python ...`` fixes it).
    """

    calls: Mapping[str, int]
    runs: Mapping[str, int]
    hash_seed: str | None

    @classmethod
    def empty(cls, hash_seed: str | None) -> EntropyReport:
        return cls(dict.fromkeys(SOURCES, 0), dict.fromkeys(SOURCES, 0), hash_seed)

    def reached(self) -> tuple[str, ...]:
        """The sources some run drew from, in the order of :data:`SOURCES`."""
        return tuple(source for source in SOURCES if self.calls.get(source, 0))

    def lines(self) -> Iterator[str]:
        for source in SOURCES:
            calls, runs = self.calls.get(source, 0), self.runs.get(source, 0)
            if calls:
                yield (
                    f"{source}: {calls:,} call{'s' if calls != 1 else ''} in {runs:,} "
                    f"run{'s' if runs != 1 else ''}, seeded from each run's seed"
                )
            else:
                yield f"{source}: not reached"
        if self.hash_seed is None:
            yield (
                "PYTHONHASHSEED: random (the order of sets of str may differ in another "
                "process; set PYTHONHASHSEED=0 to replay elsewhere)"
            )
        else:
            yield f"PYTHONHASHSEED: {self.hash_seed}"

    def __str__(self) -> str:
        return "; ".join(self.lines())


def add_counts(
    into: tuple[dict[str, int], dict[str, int]], calls: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """Add one run's ``calls`` to running totals ``(calls, runs)``; return them."""
    total, runs = into
    for source, count in calls.items():
        if count:
            total[source] = total.get(source, 0) + count
            runs[source] = runs.get(source, 0) + 1
    return into
