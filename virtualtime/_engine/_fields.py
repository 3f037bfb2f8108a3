"""The fields of the virtual loop, declared once for the modules its class is made of.

:class:`~virtualtime._engine._loop.VirtualEventLoop` is built on a stack of mixin classes,
one module per concern, each using the loop's state; from the bottom up:
:mod:`._history` (what the loop remembers), :mod:`._driving` (how time moves besides the
loop's own round: the clock's setter, the horizon watch, drives), :mod:`._waits` (the native
wait and the in-place jump), :mod:`._reports` (what the loop says when it is stuck),
:mod:`._idle` (waiting for the outside world when nothing is ready) and :mod:`._cycle` (one
round of the loop: the hot path).  Each builds on the ones below it.  :class:`LoopFields` is
the bottom of that stack: it declares, for type checkers, the fields ``VirtualEventLoop.__init__``
sets that the mixins use (what each holds is said there, where it is set; a mixin declares
the fields only it uses) and the private asyncio attributes they use.  It adds nothing at
run time: annotations only, no values.

Five of these fields are read from outside the engine, by the sim kit's native wait on the
compiled path: ``_vt_heap``, ``_vt_seq``, ``_vt_ticks``, ``_vt_history`` and ``_vt_now``
(docs/loop.md, "the in-place jump", says why; ``tests/test_sim_kit_fast.py`` pins them).

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._options import Perturb
from .._shared._time import RateAnchor
from ._outside import OutsideWork
from ._seeding import Chooser
from ._sockets import CountingSelector
from ._timers import TimerQueue

__all__ = ["LoopFields"]


class LoopFields(asyncio.SelectorEventLoop):
    """The virtual loop's fields (set by ``VirtualEventLoop.__init__``), for type checkers."""

    _vt_ticks: int
    _vt_now: float
    _vt_beyond: int
    _vt_at_horizon: Callable[[], object] | None
    _vt_scheduled_at: dict[int, tuple[int, asyncio.Task[Any] | None]]
    _vt_timers: TimerQueue
    _vt_heap: list[tuple[int, int, int, Any]]
    _vt_seq: Callable[[], int]
    _vt_chooser: Chooser | None
    _vt_perturb: Perturb
    _vt_gates: list[Callable[[collections.deque[Any], int], int]]
    _vt_autojump: bool
    _vt_threshold: float
    _vt_deadlock_timeout: float
    _vt_max_instant: int
    _vt_instant_count: int
    _vt_rearmed: bool
    _vt_rearm_tick: int
    _vt_rearm_rounds: int
    _vt_creeping: tuple[int, int]
    _vt_skipped: int
    _vt_target: asyncio.Future[Any] | None
    _vt_fired: int
    _vt_task_number: Callable[[], int]
    _vt_history: collections.deque[tuple[int, int, int, object, int]] | None
    _vt_running: weakref.WeakKeyDictionary[asyncio.Future[Any], tuple[int, int]] | None
    _vt_lives: collections.deque[tuple[int, int, int, int, str]] | None
    _vt_lives_made: Callable[[], int]
    _vt_paced: bool
    _vt_rate_strict: bool | float
    _vt_anchor: RateAnchor
    _vt_selector: CountingSelector
    _vt_world: OutsideWork
    _vt_fast: bool
    _vt_lean: bool
    _vt_plain: bool
    _vt_lone: object
    _vt_native_sleep: bool
    _vt_clock_views: bool
    _vt_signals: dict[int, Any]

    if TYPE_CHECKING:
        # asyncio-private attributes and methods this module uses, which typeshed omits.
        _ready: collections.deque[asyncio.Handle]
        _stopping: bool
        _debug: bool
        _default_executor: concurrent.futures.ThreadPoolExecutor | None
        _current_handle: asyncio.Handle | None
        _task_factory: Any

        def _check_closed(self) -> None: ...
        def _check_thread(self) -> None: ...
        def _check_callback(self, callback: Callable[..., Any], method: str) -> None: ...
        def _check_default_executor(self) -> None: ...
        def _process_events(self, event_list: list[Any]) -> None: ...

        # Defined by VirtualEventLoop itself (it compares the class's methods with its own).
        def _vt_update_fast(self) -> None: ...
