"""The clocks outside the loop: time.monotonic(), time.time(), datetime.now() (stub)."""

from __future__ import annotations

import datetime
import time
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._loop import VirtualEventLoop


class TimePatch:
    """Makes the stdlib clocks follow a virtual loop while it runs (stub: not yet patching)."""

    @staticmethod
    def check_wall_start(wall_start: float | datetime.datetime | None) -> float:
        """Validate ``wall_start``; return the wall-clock epoch as a POSIX timestamp."""
        if wall_start is None:
            return time.time()
        if isinstance(wall_start, datetime.datetime):
            return wall_start.timestamp()
        return float(wall_start)

    def __init__(self, loop: VirtualEventLoop, wall_start: float) -> None:
        self.loop = loop
        self.wall_start = wall_start

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None
