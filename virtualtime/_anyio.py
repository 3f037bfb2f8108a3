"""One call to run anyio code in virtual time, on asyncio or on trio.

anyio already has the seams: ``backend_options={"loop_factory": ...}`` for asyncio and
``backend_options={"clock": ...}`` for trio.  :func:`anyio_run` fills them in with
virtualtime's loop or clock from the same keyword options, so switching a simulation or a test
between backends is a one-word change.  Both trio and the loop are imported only when
:func:`anyio_run` is called: ``import virtualtime`` loads neither anyio nor trio.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

__all__ = ("TRIO_OPTIONS", "anyio_run")

_T = TypeVar("_T")

_BACKENDS: Final = ("asyncio", "trio")

TRIO_OPTIONS: Final = frozenset(
    {
        "start",
        "autojump",
        "autojump_threshold",
        "rate",
        "deadlock_timeout",
        "patch_time",
        "wall_start",
    }
)
"""The loop options :class:`virtualtime.trio.VirtualClock` also has, with the same meaning.

The rest (``history``, ``max_rounds_per_instant``) describe the asyncio loop's timer heap,
which trio does not have.
"""


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
    backends; ``history`` and ``max_rounds_per_instant`` exist only on asyncio.
    On either backend a deadlock raises :class:`~virtualtime.DeadlockError` instead of
    hanging.

    It is shorthand for::

        anyio.run(main, *args, backend="asyncio",
                  backend_options={"loop_factory": functools.partial(
                      virtualtime.new_event_loop, **options)})
        anyio.run(main, *args, backend="trio",
                  backend_options={"clock": virtualtime.trio.VirtualClock(**options)})

    Use it for a simulation's entry point, or in a test that wants one function to run on
    both backends; use anyio's pytest plugin (with the virtualtime marker) for test suites.
    Raises ``ValueError`` for an unknown ``backend`` and ``TypeError`` for options the chosen
    backend does not have, before anything runs.
    """
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise ValueError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
    import anyio

    if backend == "asyncio":
        from ._loop import check_loop_options
        from ._runner import new_event_loop

        check_loop_options(**options)  # bad options fail here, before anyio starts anything
        factory = functools.partial(new_event_loop, **options)
        return anyio.run(main, *args, backend="asyncio", backend_options={"loop_factory": factory})

    from ._loop import LOOP_OPTIONS

    asyncio_only = sorted(set(LOOP_OPTIONS).intersection(options) - TRIO_OPTIONS)
    if asyncio_only:
        raise TypeError(
            f"option(s) {', '.join(asyncio_only)} exist only on the asyncio loop; "
            f"backend='trio' accepts {', '.join(sorted(TRIO_OPTIONS))}"
        )
    unknown = sorted(set(options) - TRIO_OPTIONS)
    if unknown:
        raise TypeError(
            f"unknown option(s) {', '.join(unknown)} for backend='trio'; "
            f"it accepts {', '.join(sorted(TRIO_OPTIONS))}"
        )
    from . import trio as virtual_trio

    clock = virtual_trio.VirtualClock(**options)
    return anyio.run(
        virtual_trio._run_guarded,
        clock,
        main,
        *args,
        backend="trio",
        backend_options={"clock": clock},
    )
