"""Creating and running virtual loops: the loop factory and ``run``.

:func:`new_event_loop` is the factory to hand to ``asyncio.Runner``, ``asyncio.run`` (3.12+)
or anyio wherever a loop factory goes; :func:`run` is ``asyncio.run`` on a virtual loop, for
a coroutine that should simply run to completion in virtual time.  Both are re-exported by
``virtualtime``.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar, Unpack

from .._options import LoopKwargs, LoopOptions
from .._shared._errors import UsageError
from ._loop import VirtualEventLoop

__all__ = ["new_event_loop", "run"]

_T = TypeVar("_T")


def new_event_loop(
    options: LoopOptions | None = None, /, **kwargs: Unpack[LoopKwargs]
) -> VirtualEventLoop:
    """A new :class:`~virtualtime.VirtualEventLoop`: pass it wherever a loop factory goes.

    ``asyncio.Runner(loop_factory=virtualtime.new_event_loop)``,
    ``asyncio.run(main(), loop_factory=virtualtime.new_event_loop)`` (3.12+), or anyio's
    ``backend_options={"loop_factory": virtualtime.new_event_loop}``.  Options are keyword-only
    and validated; bind them with :func:`functools.partial` when a factory takes no arguments.
    A :class:`~virtualtime.LoopOptions` built once may be passed instead of the keywords.
    """
    return VirtualEventLoop(options, **kwargs)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run(
    main: Coroutine[Any, Any, _T], *, debug: bool | None = None, **options: Unpack[LoopKwargs]
) -> _T:
    """Run coroutine ``main`` on a new virtual loop and return its result, like ``asyncio.run``.

    The loop is closed afterwards, with async generators and the default executor shut down.
    ``options`` are those of :class:`~virtualtime.VirtualEventLoop` (``start``, ``autojump``,
    ``rate``, ``history``, ...); they are validated before ``main`` is touched, and on a bad
    option ``main`` is closed so no "never awaited" warning follows the error.  Like
    ``asyncio.run``, it cannot be called while an event loop runs in this thread (await
    ``main`` there instead); that error, too, closes ``main`` and creates no loop.
    """
    if _loop_running():
        if asyncio.iscoroutine(main):
            main.close()
        raise UsageError(
            "virtualtime.run() cannot be called from a running event loop; "
            "await the coroutine instead"
        )
    try:
        loop = VirtualEventLoop(**options)
    except BaseException:
        if asyncio.iscoroutine(main):
            main.close()
        raise
    with asyncio.Runner(debug=debug, loop_factory=lambda: loop) as runner:
        return runner.run(main)
