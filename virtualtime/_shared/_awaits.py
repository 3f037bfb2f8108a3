"""Following a task's chain of awaits through ``async for``: both backends' models need it.

A blocked task's coroutine awaits another (``cr_await``), a generator-based one delegates
(``gi_yieldfrom``) -- and a task inside ``async for`` awaits an async generator's *step* object
(the ``asend``/``athrow`` awaitable ``__anext__`` returns), which has no public attribute for the
generator it steps.  The garbage collector's list of what an object refers to (public
``gc.get_referents``) names it, and the generator's ``ag_await`` goes on down the chain.  The
trio clock reads what a task waits for this way (httpx's ``Response.aiter_raw``, anyio's stream
iterators), and the asyncio loop's look at grpc.aio calls (a task reading a stream).

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import gc
import types
from collections.abc import AsyncGenerator
from typing import Any, Final

__all__ = ["ASYNC_GEN_STEPS", "generator_of"]


async def _sample() -> AsyncGenerator[None]:
    yield  # pragma: no cover - never run: only its step objects' types are wanted


def _step_types() -> tuple[type, ...]:
    generator = _sample()
    send, throw = generator.asend(None), generator.athrow(GeneratorExit)
    send.close()
    throw.close()
    return type(send), type(throw)


ASYNC_GEN_STEPS: Final = _step_types()
"""The types of an async generator's step awaitables (``asend``/``__anext__``, ``athrow``)."""

_ASYNC_GENERATOR: Final = types.AsyncGeneratorType


def generator_of(step: object) -> Any:
    """The async generator an ``asend``/``athrow`` step belongs to (None if none is found)."""
    for ref in gc.get_referents(step):
        if type(ref) is _ASYNC_GENERATOR:
            return ref
    return None
