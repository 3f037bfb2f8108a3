"""The ``virtual_time`` fixture and its object, :class:`VirtualTime`.

Owns what a test requests to read or drive its virtual clock: the :class:`VirtualTime` class
(public: ``from virtualtime.pytest_plugin import VirtualTime`` for type hints) and the
function-scoped ``virtual_time`` fixture, which refuses a test that does not run in virtual
time.  The fixture reaches pytest through the plugin's face, which imports it.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from .._engine._loop import VirtualEventLoop
    from ..trio import VirtualClock

from ._running_clock import _require_virtual, _running_backend
from ._settings import _is_anyio_test, _is_async_test, _is_pytest_asyncio_test, _settings


class VirtualTime:
    """The ``virtual_time`` fixture: read and drive the clock of a test in virtual time.

    Request it in a test marked ``@pytest.mark.virtualtime`` (or run with ``--virtualtime``)
    when the test needs more than instant sleeps: to assert the exact virtual time something
    happened (``now()``), to see what is scheduled next (``peek()``), or to move time by hand
    -- typically with ``autojump=False``, where time moves only when the test says so::

        @pytest.mark.asyncio
        @pytest.mark.virtualtime(autojump=False)
        async def test_cache_expires(virtual_time):
            cache = TTLCache(ttl=60)
            cache["k"] = 1
            await virtual_time.evolve(59.999)
            assert "k" in cache
            await virtual_time.evolve(0.001)
            assert "k" not in cache

    The same methods work on asyncio (pytest-asyncio, or anyio on asyncio) and on trio (anyio
    on trio).  All of them act on the clock of the *running* test, so call them from the async
    test body or from its function-scoped async fixtures; they raise
    :class:`~virtualtime.VirtualTimeError` anywhere else.  The verbs mean what they mean on the
    loop (see :mod:`virtualtime`): ``settle()`` lets everything that is ready run without moving
    time; ``step()`` fires the next timer instant; ``evolve(dt)`` fires every timer due in
    ``[now, now + dt]`` at its own instant and ends at exactly ``now + dt``; ``run_until(t)``
    does the same up to ``t``; ``fast_forward(dt)`` leaps ``dt`` at once, overdue timers then
    firing late.  On trio, same-instant wake-ups keep trio's own (random) order.
    """

    __slots__ = ("_nodeid", "_options")

    def __init__(self, nodeid: str, options: Mapping[str, Any]) -> None:
        self._nodeid = nodeid
        self._options = MappingProxyType(dict(options))

    def __repr__(self) -> str:
        return f"<VirtualTime of {self._nodeid} options={dict(self._options)!r}>"

    @property
    def options(self) -> Mapping[str, Any]:
        """The loop options this test's marks resolved to (read-only)."""
        return self._options

    @property
    def backend(self) -> Literal["asyncio", "trio"]:
        """``"asyncio"`` or ``"trio"``: which virtual clock runs the test."""
        return _running_backend("virtual_time.backend")

    @property
    def loop(self) -> VirtualEventLoop:
        """The running :class:`~virtualtime.VirtualEventLoop` (asyncio only)."""
        from .._engine._loop import running_virtual_loop
        from .._shared._errors import UsageError

        if _running_backend("virtual_time.loop") != "asyncio":
            raise UsageError("virtual_time.loop exists on asyncio only; on trio use .clock")
        return running_virtual_loop("virtual_time.loop")

    @property
    def clock(self) -> VirtualClock:
        """The running :class:`virtualtime.trio.VirtualClock` (trio only)."""
        from .._shared._errors import UsageError

        if _running_backend("virtual_time.clock") != "trio":
            raise UsageError("virtual_time.clock exists on trio only; on asyncio use .loop")
        import trio.lowlevel

        clock: VirtualClock = trio.lowlevel.current_clock()  # type: ignore[assignment]
        return clock

    # The verbs are virtualtime's own backend-neutral ones (virtualtime._engine._control); checking
    # the backend first gives the fixture's own message when the running clock is not virtual.

    def now(self) -> float:
        """The virtual time now, in seconds."""
        _require_virtual("virtual_time.now()")
        from .._engine._control import now

        return now()

    def peek(self) -> float:
        """Virtual time of the next pending timer or deadline, or ``math.inf``."""
        _require_virtual("virtual_time.peek()")
        from .._engine._control import peek

        return peek()

    async def settle(self) -> float:
        """Run everything that is ready without moving time; return the time."""
        _require_virtual("virtual_time.settle()")
        from .._engine._control import settle

        return await settle()

    async def step(self) -> float | None:
        """Fire the next timer instant and let it settle; None if nothing is scheduled."""
        _require_virtual("virtual_time.step()")
        from .._engine._control import step

        return await step()

    async def evolve(self, dt: float) -> float:
        """Fire every timer due in ``[now, now + dt]`` at its own instant; return ``now + dt``."""
        from .._shared._time import check_delay

        dt = check_delay("dt", dt)
        _require_virtual("virtual_time.evolve()")
        from .._engine._control import evolve

        return await evolve(dt)

    async def run_until(self, t: float) -> float:
        """:meth:`evolve` up to the absolute virtual time ``t`` (not in the past)."""
        from .._shared._time import check_finite

        t = check_finite("t", t)
        _require_virtual("virtual_time.run_until()")
        from .._engine._control import run_until

        return await run_until(t)

    async def fast_forward(self, dt: float) -> float:
        """Leap ``dt`` at once; timers the leap made overdue then fire, seeing the new time."""
        from .._shared._time import check_delay

        dt = check_delay("dt", dt)
        _require_virtual("virtual_time.fast_forward()")
        from .._engine._control import fast_forward

        return await fast_forward(dt)


def _virtual_time_fixture(request: pytest.FixtureRequest) -> VirtualTime:
    item = request.node
    if not isinstance(item, pytest.Item):  # pragma: no cover - function scope is an item
        pytest.fail("virtual_time is a function-scoped fixture", pytrace=False)
    settings = _settings(item)
    runner = _is_pytest_asyncio_test(item) or (_is_anyio_test(item) and _is_async_test(item))
    if not settings.virtual or not runner:
        why = (
            "is not marked @pytest.mark.virtualtime (and --virtualtime is off)"
            if not settings.virtual
            else "is not an async test run by pytest-asyncio or anyio"
        )
        pytest.fail(
            f"{item.nodeid} requests the virtual_time fixture but does not run in virtual "
            f"time: it {why}",
            pytrace=False,
        )
    return VirtualTime(item.nodeid, settings.options_dict())


virtual_time = pytest.fixture(name="virtual_time")(_virtual_time_fixture)
