"""Replaying one seed: the run again, its result or its exception, and a trace of it.

:func:`replay` is where a failure found by :func:`~virtualtime.net.explore` is debugged: the
same seed (and, after a shrink, the same kept deviations) gives the same run, which raises its
exception here with its traceback, under a debugger if you like.  With ``trace=`` the run is
recorded by the trace recorder (:mod:`virtualtime.trace`) and written when it ends, failed
or not: a Chrome trace (``.json``) or a timeline picture (``.png``, ``.svg``, ``.pdf``).

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from .._engine._loop import VirtualEventLoop
from .._options import Perturb
from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import shown
from ._runs import call_main, run_seeded, seeded
from ._scenario import (
    check_keep,
    check_perturb,
    check_seed,
    keep_text,
    not_in_a_loop,
    scenario,
)

__all__ = ["Replayed", "check_trace", "replay", "replay_run", "trace_note"]

_TRACE_HISTORY: Final = 1_000_000
_PICTURES: Final = (".png", ".svg", ".pdf")


def check_trace(trace: object) -> Path | None:
    if trace is None:
        return None
    if not isinstance(trace, (str, os.PathLike)):
        raise InvalidTypeError(
            f"trace must be None or a path ending in .json (a Chrome trace) or .png, .svg, "
            f".pdf (a timeline), got {shown(trace)}"
        )
    path = Path(trace)
    suffix = path.suffix.lower()
    if suffix != ".json" and suffix not in _PICTURES:
        raise InvalidValueError(
            f"trace must end in .json (a Chrome trace) or .png, .svg, .pdf (a timeline), "
            f"got {shown(os.fspath(trace))}"
        )
    folder = path.resolve().parent
    if not folder.is_dir():
        raise InvalidValueError(f"trace: folder {shown(str(folder))} does not exist")
    if suffix in _PICTURES:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ImportError(
                "a timeline picture needs matplotlib: pip install 'async-virtualtime[plot]' "
                "(or ask for a .json trace)"
            )
    return path


def replay(
    main: Callable[[], Any],
    seed: int,
    *,
    keep: Iterable[int] | None = None,
    perturb: Perturb = "timers",
    trace: str | os.PathLike[str] | None = None,
    **loop_options: Any,
) -> Any:
    """Run the scenario ``main`` once more under ``seed``, as :func:`explore` ran it.

    Returns what ``main()`` returns and raises what it raises -- a failing seed fails again,
    with its traceback, here where you can debug it.  ``keep`` (the ``keep`` of a shrunk
    :class:`Failure`) keeps only those deviations of the seed; None keeps all.  ``perturb``
    and the loop options must be the exploration's.  ``trace`` records the run with the
    trace recorder and writes it when the run ends, failed or not: a path ending ``.json``
    gets a Chrome trace (open it in https://ui.perfetto.dev), ``.png``/``.svg``/``.pdf`` a
    timeline picture (needs matplotlib).  Should writing the trace fail, a failed run still
    raises its own exception, with a note saying why the trace is missing; a run that
    returned raises the writing's error.
    """
    done = replay_run(main, seed, keep=keep, perturb=perturb, trace=trace, **loop_options)
    return done.outcome()


@dataclasses.dataclass(frozen=True)
class Replayed:
    """One replayed run: what it returned or raised, and what became of its trace.

    ``error`` is what the run raised (None: it returned ``result``); ``trace_error`` what
    writing the trace raised (None: written, or no trace asked for).  :func:`replay` turns it
    into a return or a raise; the command line reads both facts (``virtualtime explore``
    says "passed" or "failed", and whether the trace was written).
    """

    result: Any
    error: BaseException | None
    trace_error: Exception | None

    def outcome(self) -> Any:
        """``result``; or raise ``error`` (noting a trace that was not written), else
        ``trace_error``."""
        error, trace_error = self.error, self.trace_error
        if error is not None:
            if trace_error is not None:
                error.add_note(trace_note(trace_error))
            raise error
        if trace_error is not None:
            raise trace_error
        return self.result


def trace_note(error: BaseException) -> str:
    """The note a failed run's exception gets when its trace could not be written."""
    return f"virtualtime: the replay's trace was not written: {type(error).__name__}: {error}"


def replay_run(
    main: Callable[[], Any],
    seed: int,
    *,
    keep: Iterable[int] | None = None,
    perturb: Perturb = "timers",
    trace: str | os.PathLike[str] | None = None,
    **loop_options: Any,
) -> Replayed:
    """:func:`replay`, with the run's outcome and the trace's kept apart (see :class:`Replayed`).

    Every exception of the run is caught into ``error``, ``KeyboardInterrupt`` included (the
    trace is written first); only bad arguments raise.
    """
    played = scenario(main, loop_options, "replay()")
    seed = check_seed(seed)
    kept = check_keep(keep)
    perturb = check_perturb(perturb)
    path = check_trace(trace)
    not_in_a_loop("replay()")
    options = played.options_dict()
    if path is None:
        try:
            with seeded(seed, kept):
                return Replayed(run_seeded(call_main(main), seed, perturb, options), None, None)
        except BaseException as exc:
            return Replayed(None, exc, None)
    from ..trace import TraceRecorder

    options["history"] = max(options.get("history") or 0, _TRACE_HISTORY)
    recorder = TraceRecorder()
    label = f"seed {seed}"

    def closing(loop: VirtualEventLoop) -> None:
        history = loop.history
        recorder.add_run(
            loop,
            label,
            history,
            max(loop.timers_fired - len(history), 0),
            start=loop.start_time,
            tasks=loop.task_history,
        )
        recorder.forget(loop)

    result: Any = None
    error: BaseException | None = None
    try:
        with recorder, seeded(seed, kept, closing):
            result = run_seeded(call_main(main), seed, perturb, options)
        outcome = "returned"
    except BaseException as exc:
        error = exc
        outcome = f"raised {type(exc).__name__}: {exc}"
    kept_text = "" if kept is None else f", keep {keep_text(kept)}"
    title = f"{played.name}: seed {seed} (perturb={perturb}{kept_text}): {outcome}"
    if len(title) > 160:
        title = title[:157] + "..."
    try:
        _write(recorder.trace(scenario=played.name, seed=seed, outcome=outcome), path, title)
    except Exception as exc:  # a failed write is told, never in place of the run's outcome
        return Replayed(result, error, exc)
    return Replayed(result, error, None)


def _write(document: Any, path: Path, title: str) -> None:
    from ..trace import plot_trace, write_trace

    if path.suffix.lower() == ".json":
        write_trace(document, path)
    else:
        plot_trace(document, path, title=title)
