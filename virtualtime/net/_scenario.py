"""A scenario and the checks of the arguments that run it; the pool of worker processes.

:class:`Scenario` is what :func:`~virtualtime.net.explore`, :func:`~virtualtime.net.replay`
and a :class:`~virtualtime.net.Failure` hold of the function they run: the function, the
name another process loads it by (see :mod:`._targets`), and the loop options of every run.
The ``check_*`` functions refuse bad arguments with the project's errors, naming the value and
the rule.  :class:`WorkerPool` is a pool of spawned worker processes with a fixed
``PYTHONHASHSEED``.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._options import LoopOptions, Perturb, check_option
from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError
from .._shared._time import shown
from ._targets import target_of

__all__ = [
    "Scenario",
    "WorkerPool",
    "check_count",
    "check_keep",
    "check_perturb",
    "check_seed",
    "check_seeds",
    "keep_text",
    "not_in_a_loop",
    "scenario",
]


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A scenario and how it runs: the function, its name elsewhere, the loop options."""

    main: Callable[[], Any]
    target: str | None
    options: tuple[tuple[str, Any], ...]

    @property
    def name(self) -> str:
        if self.target is not None:
            return self.target
        return str(getattr(self.main, "__qualname__", None) or repr(self.main))

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)


def scenario(main: object, loop_options: Mapping[str, Any], who: str) -> Scenario:
    if not callable(main):
        raise InvalidTypeError(
            f"{who}: main must be a function that returns a coroutine (an `async def` "
            f"scenario taking no arguments), got {shown(main)}"
        )
    try:
        signature = inspect.signature(main)
    except (TypeError, ValueError):  # a builtin without one: let the call tell
        signature = None
    if signature is not None:
        try:
            signature.bind()
        except TypeError as exc:
            raise InvalidTypeError(
                f"{who}: main must take no arguments (it is called as main() for each run; "
                f"bind them with functools.partial), but {shown(main)} says: {exc}"
            ) from None
    if "seed" in loop_options:
        hint = "seeds=[...]" if who == "explore()" else "the seed argument"
        raise InvalidTypeError(
            f"{who}: the seed of each run is {who}'s own (use {hint}), not a loop option "
            f"seed={shown(loop_options['seed'])}"
        )
    LoopOptions.of(loop_options)  # every name and value checked, here
    return Scenario(main, target_of(main), tuple(loop_options.items()))


def check_seed(seed: object, who: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidTypeError(f"{who} must be an int >= 0, got {shown(seed)}")
    if seed < 0:
        raise InvalidValueError(f"{who} must be an int >= 0, got {shown(seed)}")
    return seed


def check_seeds(seeds: object) -> tuple[int, ...]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise InvalidTypeError(
            f"seeds must be an iterable of ints >= 0 (range(1000), [3, 17]), got {shown(seeds)}"
        )
    checked = tuple(check_seed(seed, "each seed") for seed in seeds)
    if not checked:
        raise InvalidValueError("seeds is empty: give at least one seed (range(100))")
    return checked


def check_perturb(perturb: object) -> Perturb:
    return check_option("perturb", perturb)  # type: ignore[no-any-return]


def check_keep(keep: object) -> frozenset[int] | None:
    if keep is None:
        return None
    if isinstance(keep, (str, bytes)) or not isinstance(keep, Iterable):
        raise InvalidTypeError(
            f"keep must be None (every deviation of the seed) or a set of decision indices, "
            f"got {shown(keep)}"
        )
    return frozenset(check_seed(index, "each index in keep") for index in keep)


def check_count(name: str, value: object, rule: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be None or an int >= 1 ({rule}), got {shown(value)}")
    if value < 1:
        raise InvalidValueError(f"{name} must be None or an int >= 1 ({rule}), got {shown(value)}")
    return value


def not_in_a_loop(who: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UsageError(
        f"{who} cannot be called from a running event loop: it runs each seed on a loop of "
        "its own (call it from synchronous code, a test function or a script)"
    )


def keep_text(keep: frozenset[int]) -> str:
    return ",".join(map(str, sorted(keep))) or "none"


class WorkerPool:
    """A pool of spawned workers whose ``PYTHONHASHSEED`` is ``hash_seed``.

    ``with WorkerPool(n, seed) as executor:`` -- the variable is set for the pool's life (each
    worker reads it when it starts) and put back afterwards, also when the pool fails to
    start.  Leaving the block cancels the work not started and waits for the work running,
    except on ``KeyboardInterrupt``: then it returns at once.
    """

    def __init__(self, workers: int, hash_seed: str | None) -> None:
        self._workers = workers
        self._hash_seed = hash_seed
        self._saved: str | None = None
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None

    def __enter__(self) -> concurrent.futures.ProcessPoolExecutor:
        # Spawned (fork is unsafe in a process with threads, and warns); the environment
        # is read when each worker starts, so it holds the hash seed until the pool is done.
        self._saved = os.environ.get("PYTHONHASHSEED")
        if self._hash_seed is not None:
            os.environ["PYTHONHASHSEED"] = self._hash_seed
        try:
            import multiprocessing  # only here: importing it is not free

            context = multiprocessing.get_context("spawn")
            self._executor = concurrent.futures.ProcessPoolExecutor(
                self._workers, mp_context=context
            )
        except BaseException:  # no pool: __exit__ will not run, so put the variable back here
            self._restore()
            raise
        return self._executor

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        # Pending work is cancelled; the work running is waited for -- except after Ctrl-C,
        # when the user wants the prompt back, not the end of every worker's chunk.
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        try:
            if self._executor is not None:
                self._executor.shutdown(wait=not interrupted, cancel_futures=True)
        finally:
            self._restore()

    def _restore(self) -> None:
        if self._saved is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = self._saved
