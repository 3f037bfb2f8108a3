# The optional compiled core of the virtual loop (virtualtime/_engine/_cwake.c), loaded by
# virtualtime._engine._compiled; each function names the Python it mirrors.
import contextvars
import inspect
from collections.abc import Callable
from typing import Any

def setup(
    waiter_type: type,
    timer_type: type,
    soon_type: type,
    waker_a: Callable[..., object],
    waker_b: Callable[..., object],
    invalid_state_error: type[BaseException],
    wake_context: contextvars.Context,
    sleep_timer_type: type,
    /,
) -> None: ...
def note_running(loop: object, /) -> None: ...
def setup_loop(
    loop_type: type,
    queue_type: type,
    world_type: type,
    jump_to: Callable[..., bool],
    threads: dict[int, Any],
    jump_round_every: int,
    /,
) -> None: ...
def jump_to(loop: object, ticks: int, task: object, /) -> bool: ...
def push_after(
    heap: list[Any],
    next_seq: Callable[[], int],
    ticks: int,
    delay: float,
    priority: int,
    item: object,
    /,
) -> int: ...
def fire(
    heap: list[Any], now: int, seconds: float, ready_append: Callable[[Any], object], /
) -> tuple[int, int, float]: ...
def run_ready(
    popleft: Callable[[], Any],
    ntodo: int,
    failed: Callable[[Any, BaseException], object],
    /,
) -> None: ...
def plain_rounds(
    loop: object,
    heap: list[Any],
    ready: Any,
    timers: object,
    world: object,
    threads: dict[int, Any],
    popleft: Callable[[], Any],
    failed: Callable[[Any, BaseException], object],
    /,
) -> int: ...
def sleep_timer_cancel(cancelled: object, /) -> Callable[[Any], None]: ...

class SoonCaller:
    def __init__(
        self, loop: object, ready_append: Callable[[Any], object], fallback: Callable[..., Any], /
    ) -> None: ...
    def __call__(self, callback: Callable[..., object], *args: Any, context: Any = None) -> Any: ...
    @property
    def __signature__(self) -> inspect.Signature: ...

def setup_sleep(running_here: object, py_sleep: Callable[..., Any], /) -> None: ...
def sleep(delay: float, *, priority: int = 0) -> Sleep: ...

class Sleep:
    def send(self, value: object, /) -> Any: ...
    def throw(self, exc: BaseException, /) -> Any: ...
    def close(self) -> None: ...
    def __await__(self) -> Any: ...

def setup_kit(
    sim_var: object,
    proc_var: object,
    drop_native: Callable[[Any], object],
    sleep_type: type,
    py_sleep: Callable[[float], Any],
    py_now: Callable[[], float],
    /,
) -> None: ...
def kit_sleep(delay: float, value: Any = None) -> Any: ...
def kit_now() -> float: ...

KIT_SLEEP_VALUE: int
"""1: kit_sleep takes ``value`` itself, and KitSleep marks ``_awaited`` and warns itself."""

class KitSleep:
    """The compiled base of the sim kit's sleep (virtualtime.sim._sleep._Sleep)."""

    _delay: float
    _undo: Any
    _awaited: bool
    def __await__(self) -> Any: ...

class DebugFlag:
    def __init__(self, loop: object, /) -> None: ...
    def __call__(self) -> Any: ...
    @property
    def __signature__(self) -> inspect.Signature: ...

class LaterCaller:
    def __init__(self, loop: object, timer_type: type, fallback: Callable[..., Any], /) -> None: ...
    def __call__(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: Any = None,
        priority: int = 0,
    ) -> Any: ...
    @property
    def __signature__(self) -> inspect.Signature: ...

def kit_exact_runs(delta: int, /) -> int: ...
