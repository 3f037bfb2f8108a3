"""What runs on a worker: a model reference, one replication's task, and its outcome.

Everything here is picklable with plain :mod:`pickle`, so one task travels unchanged to a
process pool, a Dask worker or a Ray worker; the worker resolves the model itself.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import math
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import run as _virtual_run  # the public runner: a fresh virtual loop per call
from .._shared._errors import InvalidTypeError, InvalidValueError

__all__ = ["ModelRef", "Outcome", "Task", "execute", "make_rng", "run_one"]

Model = Callable[..., Any]


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error message, cut short so a huge value cannot flood it."""
    try:
        text = repr(value)
    except Exception:  # a repr that raises must not hide the real error
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text):,} characters)"


def check_seed(seed: object, *, or_none: bool = False) -> int:
    """A root seed: a non-negative int (numpy's SeedSequence takes any size)."""
    rule = "a non-negative integer or None" if or_none else "a non-negative integer"
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidTypeError(f"seed must be {rule}, got {shown(seed)}")
    if seed < 0:
        raise InvalidValueError(f"seed must be {rule}, got {shown(seed)}")
    return seed


def check_params(params: object) -> dict[str, Any]:
    """A scenario's parameters: None (no parameters) or a mapping with str keys."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidTypeError(
            f"params must be a mapping of parameters or None, got {shown(params)}"
        )
    for name in params:
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"params: names must be non-empty strs, got {shown(name)}")
    return dict(params)


@dataclass(frozen=True)
class ModelRef:
    """Where a worker finds the model: a module (or a file) and a name in it.

    A model defined at module level is sent as this reference, not as pickled code: a worker
    imports the module by name, or loads the file when the name cannot be imported there
    (a script, ``__main__``, a test file).  Anything else (a lambda, a closure, a partial) is
    sent as the object itself, so it must be picklable by the executor's serializer.
    """

    module: str
    name: str
    file: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.module, str) or not self.module:
            raise InvalidValueError(
                f"ModelRef: module must be a non-empty str, got {shown(self.module)}"
            )
        if not isinstance(self.name, str) or not all(
            part.isidentifier() for part in self.name.split(".")
        ):
            raise InvalidValueError(
                f"ModelRef: name must be a (dotted) identifier, got {shown(self.name)}"
            )
        if self.file is not None and (not isinstance(self.file, str) or not self.file):
            raise InvalidValueError(
                f"ModelRef: file must be None or a non-empty str, got {shown(self.file)}"
            )

    @classmethod
    def parse(cls, spec: str) -> ModelRef:
        """``"path/to/model.py:name"`` or ``"package.module:name"``, as the CLI takes it."""
        if not isinstance(spec, str) or spec.count(":") < 1:
            raise InvalidValueError(
                f"a model reference is 'file.py:function' or 'module:function', got {shown(spec)}"
            )
        where, _, name = spec.rpartition(":")
        if not where or not name.isidentifier():
            raise InvalidValueError(
                f"a model reference is 'file.py:function' or 'module:function', got {shown(spec)}"
            )
        if where.endswith(".py") or "/" in where or "\\" in where:
            try:
                path = Path(where).resolve()
                found = path.is_file()
            except (OSError, ValueError):  # a name too long, a NUL byte
                found = False
            if not found:
                raise InvalidValueError(f"model file {shown(where)} does not exist")
            path = Path(where).resolve()
            return cls(module=f"_virtualtime_model_{path.stem}", name=name, file=str(path))
        if not all(part.isidentifier() for part in where.split(".")):
            raise InvalidValueError(
                f"a model reference is 'file.py:function' or 'module:function' (a module's "
                f"dotted name), got {shown(spec)}"
            )
        return cls(module=where, name=name)

    def resolve(self) -> Model:
        """The model function itself (imported, or loaded from the file), cached per process."""
        key = (self.module, self.name, self.file)
        cached = _RESOLVED.get(key)
        if cached is not None:
            return cached
        module: Any = None
        if self.module != "__main__" and not self.module.startswith("_virtualtime_model_"):
            try:
                module = importlib.import_module(self.module)
            except ImportError:
                if self.file is None:
                    raise
        if module is None:
            if self.file is None:
                raise ImportError(f"cannot find the model's module {self.module!r}")
            module = sys.modules.get(_file_module_name(self.file))
            if module is None:
                module = _load_file(self.file)
        target: Any = module
        for part in self.name.split("."):
            target = getattr(target, part, None)
            if target is None:
                where = self.file or self.module
                raise AttributeError(f"{where} has no model named {self.name!r}")
        if not callable(target):
            raise InvalidTypeError(f"{self.name!r} in {self.file or self.module} is not callable")
        _RESOLVED[key] = target
        return target  # type: ignore[no-any-return]

    def __str__(self) -> str:
        return f"{self.file or self.module}:{self.name}"


_RESOLVED: dict[tuple[str, str, str | None], Model] = {}


def _file_module_name(file: str) -> str:
    return f"_virtualtime_model_{abs(hash(file)):x}_{Path(file).stem}"


def _load_file(file: str) -> Any:
    name = _file_module_name(file)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a model from {file!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def reference(model: Model | str | ModelRef) -> Model | ModelRef:
    """What to send to workers for ``model`` (a :class:`ModelRef` when one can be made)."""
    if isinstance(model, ModelRef):
        return model
    if isinstance(model, str):
        return ModelRef.parse(model)
    if not callable(model):
        raise InvalidTypeError(
            f"model must be a function or 'file.py:function', got {shown(model)}"
        )
    module = getattr(model, "__module__", None)
    qualname = getattr(model, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return model  # a lambda, closure or callable object: sent as itself
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if module == "__main__" and file is None:
        return model  # an interactive session: nothing a worker could load
    return ModelRef(module=module, name=qualname, file=str(Path(file).resolve()) if file else None)


def make_rng(seed: int, stream: Sequence[int] | str) -> np.random.Generator:
    """The generator of one replication: ``SeedSequence(seed)``'s child at ``stream``.

    Use it to give a model run outside :func:`replicate` (a notebook, a test, a rerun) the
    very numbers a replication drew: pass the ``seed`` and ``stream`` columns of its row.
    ``SeedSequence(seed, spawn_key=(i,))`` is exactly ``SeedSequence(seed).spawn(n)[i]``
    for any ``n > i``, so a replication's stream does not depend on how many there are.

    ``seed`` is required (a non-negative int): None is refused rather than read as "fresh
    entropy", because a generator nobody can make again cannot reproduce anything.  (Where
    :func:`replicate` is given ``seed=None`` it draws a seed and records it in every row.)
    """
    sequence = np.random.SeedSequence(check_seed(seed), spawn_key=parse_stream(stream))
    return np.random.Generator(np.random.PCG64(sequence))


@dataclass(frozen=True)
class Task:
    """One replication to run: which scenario, which index, which random stream."""

    scenario: int
    replication: int
    params: Mapping[str, Any]
    seed: int
    stream: tuple[int, ...]

    @property
    def key(self) -> tuple[int, int]:
        return (self.scenario, self.replication)


@dataclass
class Outcome:
    """What one replication gave: its outputs, or the error it raised (with traceback)."""

    scenario: int
    replication: int
    outputs: dict[str, float] | None
    end_time: float
    wall_seconds: float
    error: str | None = None
    traceback: str | None = None
    worker: str = field(default="")

    @property
    def key(self) -> tuple[int, int]:
        return (self.scenario, self.replication)


def _as_outputs(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(
            f"a model must return a mapping of output names to numbers, got {value!r}"
        )
    outputs: dict[str, float] = {}
    for name, number in value.items():
        if not isinstance(name, str) or not name:
            raise InvalidTypeError(f"output names must be non-empty strings, got {shown(name)}")
        if isinstance(number, bool) or not isinstance(number, (int, float, np.number)):
            raise InvalidTypeError(f"output {shown(name)} must be a number, got {shown(number)}")
        outputs[name] = float(number)
    return outputs


def _call(model: Model, params: Mapping[str, Any], rng: np.random.Generator) -> tuple[Any, float]:
    """Run the model once: an async model on a fresh virtual loop; returns (value, end time).

    The loop runs inside a :class:`virtualtime.sim.Simulation` of its own, so the model may
    use the simulation kit (``sim.start``, ``sim.sleep``, resources) without opening one; a
    process still running when the model returns is cancelled cleanly with the simulation.
    """
    coro = model(params, rng)
    if not inspect.iscoroutine(coro):
        return coro, math.nan
    ends: list[float] = []

    async def main() -> Any:
        from ..sim import Simulation

        async with Simulation():
            value = await coro
            ends.append(asyncio.get_running_loop().time())
        return value

    try:
        value = _virtual_run(main())
    finally:
        coro.close()  # never started (the loop failed to start): no "never awaited" warning
    return value, ends[0]


def run_one(
    model: Model | str | ModelRef,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int,
    stream: Sequence[int] | str = (0,),
) -> dict[str, float]:
    """Run one replication here and now, and let its exception out: for re-running a failure.

    ``seed`` and ``stream`` are the columns of that replication's row (or the fields of its
    :class:`Failure`); the model gets exactly the random stream it had in the experiment, so
    a replication that raised raises again, under a debugger if you like.
    """
    given = check_params(params)
    rng = make_rng(seed, stream)
    if isinstance(model, ModelRef):
        fn = model.resolve()
    elif callable(model):
        fn = model  # the very function: nothing to import (or to execute twice)
    else:
        ref = reference(model)
        fn = ref.resolve() if isinstance(ref, ModelRef) else ref
    value, _ = _call(fn, given, rng)
    return _as_outputs(value)


def parse_stream(stream: Sequence[int] | str) -> tuple[int, ...]:
    """A stream key from its table form (``"3"`` or ``"1.3"``) or a sequence of ints."""
    if isinstance(stream, str):
        if len(stream) > 1000:
            raise InvalidValueError(f"stream: a stream is like '3' or '1.3', got {shown(stream)}")
        try:
            parts = tuple(int(part) for part in stream.split("."))
        except ValueError:
            raise InvalidValueError(
                f"stream: a stream is like '3' or '1.3', got {shown(stream)}"
            ) from None
    elif isinstance(stream, (list, tuple)):
        parts = tuple(stream)
    else:
        raise InvalidTypeError(
            f"stream must be a str like '1.3' or a sequence of ints, got {shown(stream)}"
        )
    if not parts or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts):
        raise InvalidValueError(
            f"stream: a stream is one or more non-negative integers, got {shown(stream)}"
        )
    return parts


def stream_text(stream: Sequence[int]) -> str:
    return ".".join(str(part) for part in stream)


def execute(model: Model | ModelRef, tasks: Sequence[Task]) -> list[Outcome]:
    """Run a chunk of replications on this worker; a raising replication becomes an outcome."""
    worker = f"{_hostname()}:{_pid()}"
    try:
        fn = model.resolve() if isinstance(model, ModelRef) else model
    except Exception as error:  # the model cannot even be found: every task fails alike
        text = traceback.format_exc()
        return [
            Outcome(t.scenario, t.replication, None, math.nan, 0.0, repr(error), text, worker)
            for t in tasks
        ]
    outcomes: list[Outcome] = []
    for task in tasks:
        began = time.perf_counter()
        try:
            value, end = _call(fn, task.params, make_rng(task.seed, task.stream))
            outputs = _as_outputs(value)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            outcomes.append(
                Outcome(
                    task.scenario,
                    task.replication,
                    None,
                    math.nan,
                    time.perf_counter() - began,
                    f"{type(error).__name__}: {error}",
                    traceback.format_exc(),
                    worker,
                )
            )
            continue
        outcomes.append(
            Outcome(
                task.scenario,
                task.replication,
                outputs,
                end,
                time.perf_counter() - began,
                worker=worker,
            )
        )
    return outcomes


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _pid() -> int:
    import os

    return os.getpid()
