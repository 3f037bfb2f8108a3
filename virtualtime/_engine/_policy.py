"""The legacy path: an asyncio event-loop policy whose loops are virtual.

When to use it
--------------
Only for code that insists on choosing its loop through a policy: an old framework that calls
``asyncio.set_event_loop_policy`` itself, or a test harness with no ``loop_factory`` hook.
Everything else should pass a loop factory, which is what asyncio recommends from 3.12 on::

    asyncio.run(main(), loop_factory=virtualtime.new_event_loop)        # 3.12+
    with asyncio.Runner(loop_factory=virtualtime.new_event_loop) as r:   # 3.11+
        r.run(main())

and to run an unmodified program, ``virtualtime run script.py`` needs neither.

Python versions
---------------
asyncio deprecates event-loop policies in Python 3.14 and removes them in 3.16.  This class
exists on 3.11 to 3.15.  On 3.11--3.13 nothing warns.  On 3.14 and 3.15 creating an
:class:`EventLoopPolicy` is silent too, and ``asyncio.set_event_loop_policy`` (and
``asyncio.get_event_loop_policy``) raise asyncio's own ``DeprecationWarning``, exactly as they
do for asyncio's built-in policies -- virtualtime adds no warning of its own.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from typing import Any, Unpack

from .._options import LoopKwargs, LoopOptions
from ._loop import VirtualEventLoop

__all__ = ["EventLoopPolicy"]

if sys.version_info >= (3, 16):  # pragma: no cover - asyncio has no policies any more
    raise ImportError(
        "asyncio removed event-loop policies in Python 3.16: pass "
        "loop_factory=virtualtime.new_event_loop to asyncio.run or asyncio.Runner instead"
    )

with warnings.catch_warnings():
    # Python 3.14+ warns when the name asyncio.DefaultEventLoopPolicy is looked up.  Our own
    # subclass is defined once, here, at import; the warning users should see is the one
    # asyncio raises when they *install* a policy, and that one is left alone.
    warnings.filterwarnings(
        "ignore",
        message=r".*asyncio\.DefaultEventLoopPolicy.*",
        category=DeprecationWarning,
    )
    _DefaultPolicy = asyncio.DefaultEventLoopPolicy


class EventLoopPolicy(_DefaultPolicy):
    """An event-loop policy whose every new loop is a :class:`~virtualtime.VirtualEventLoop`.

    ``asyncio.set_event_loop_policy(virtualtime.EventLoopPolicy(**options))`` makes
    ``asyncio.run``, ``asyncio.Runner`` without a ``loop_factory``,
    ``asyncio.new_event_loop`` and (on 3.11) the implicit loop of ``get_event_loop`` all
    create virtual loops with ``options`` (``start``, ``autojump``, ``rate``, ``history``, ...,
    as for :func:`virtualtime.new_event_loop`).  Options are checked when the policy is
    created, so a typo fails there, not at the first loop.  Restore the previous policy when
    done (``asyncio.set_event_loop_policy(None)`` brings back asyncio's default).

    This is the legacy path, for code that selects its loop through a policy; prefer
    ``loop_factory=virtualtime.new_event_loop``.  Available on Python 3.11--3.15; on 3.14+
    ``asyncio.set_event_loop_policy`` itself raises asyncio's ``DeprecationWarning``.
    """

    def __init__(self, **options: Unpack[LoopKwargs]) -> None:
        # Checked now by the options catalogue, so a typo fails here, not at the first loop;
        # nothing is built to check them.
        self._loop_options = LoopOptions.of(options)
        super().__init__()
        self._options: dict[str, Any] = dict(options)

    @property
    def options(self) -> dict[str, Any]:
        """The options every new loop is created with, as given (a copy)."""
        return dict(self._options)

    def new_event_loop(self) -> VirtualEventLoop:
        """A new virtual loop with this policy's options (asyncio calls this)."""
        return VirtualEventLoop(self._loop_options)

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self._options.items())
        return f"virtualtime.EventLoopPolicy({options})"
