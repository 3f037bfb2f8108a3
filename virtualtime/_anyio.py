"""One call to run anyio code in virtual time, on asyncio or on trio.

anyio already has the seams: ``backend_options={"loop_factory": ...}`` for asyncio and
``backend_options={"clock": ...}`` for trio.  :func:`anyio_run` fills them in with
virtualtime's loop or clock from the same keyword options, so switching a simulation or a test
between backends is a one-word change.  Both trio and the loop are imported only when
:func:`anyio_run` is called: ``import virtualtime`` loads neither anyio nor trio.

Part of ``api``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net`` (see tests/layout.py).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from ._options import LoopOptions
from ._shared._errors import InvalidTypeError, InvalidValueError

__all__ = ("anyio_run",)

_T = TypeVar("_T")

_BACKENDS: Final = ("asyncio", "trio")


def anyio_run(
    main: Callable[..., Awaitable[_T]],
    *args: object,
    backend: str = "asyncio",
    **options: Any,
) -> _T:
    """Run ``main(*args)`` with anyio in virtual time and return its result.

    ``backend="asyncio"`` (the default) runs it on :class:`virtualtime.VirtualEventLoop`;
    ``backend="trio"`` runs it under trio with a :class:`virtualtime.trio.VirtualClock`.
    ``options`` configure the loop or clock: ``start``, ``autojump``, ``autojump_threshold``,
    ``rate``, ``deadlock_timeout``, ``patch_time`` and ``wall_start`` mean the same on both
    backends; ``history``, ``max_rounds_per_instant``, ``seed`` and ``perturb`` exist only on
    asyncio.  On either backend a deadlock raises :class:`~virtualtime.DeadlockError` instead of
    hanging.

    It is shorthand for::

        anyio.run(main, *args, backend="asyncio",
                  backend_options={"loop_factory": functools.partial(
                      virtualtime.new_event_loop, **options)})
        anyio.run(main, *args, backend="trio",
                  backend_options={"clock": virtualtime.trio.VirtualClock(**options)})

    Use it for a simulation's entry point, or in a test that wants one function to run on
    both backends; use anyio's pytest plugin (with the virtualtime marker) for test suites.
    Raises ``ValueError`` for an unknown ``backend``, and ``TypeError`` for a ``main`` that is
    not callable and for options the chosen backend does not have, before anything runs (the
    options catalogue's own errors, the same as every other entry point raises).
    """
    if not callable(main):
        raise InvalidTypeError(
            f"main must be an async function, got {main!r} ({type(main).__name__})"
        )
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise InvalidValueError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
    # Bad options fail here, before anyio starts anything, as on every other entry point.
    checked = LoopOptions.of(options, backend="trio" if backend == "trio" else "asyncio")
    import anyio

    if backend == "asyncio":
        from ._engine._runner import new_event_loop

        factory = functools.partial(new_event_loop, checked)
        return anyio.run(main, *args, backend="asyncio", backend_options={"loop_factory": factory})

    from . import trio as virtual_trio

    clock = virtual_trio.VirtualClock(checked)
    guard = virtual_trio.RunGuard(clock, main)
    return anyio.run(guard.guarded_main, *args, backend="trio", backend_options={"clock": clock})
