"""virtualtime: a virtual clock for async Python (work in progress)."""

from ._errors import DeadlockError as DeadlockError
from ._errors import RunawayError as RunawayError
from ._errors import VirtualTimeError as VirtualTimeError

__all__ = ("DeadlockError", "RunawayError", "VirtualTimeError")
