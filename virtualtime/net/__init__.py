"""Deterministic simulation testing: simulated hosts, a network, faults and seeded runs.

Use it to test distributed asyncio code -- clients with retries and timeouts, leases,
leader election, caches in front of databases -- in one process and in virtual time, with
the faults that break such code placed exactly, and every run repeatable from its seed:

* :class:`Network` -- a world of simulated hosts on the virtual loop; ``world.host("db")``
  makes a :class:`Host` with its own name, address and clock.  Code that lives on a host
  (``async with host:``, :meth:`Host.run`) reaches the other hosts by name through the
  loop's ordinary network methods, so asyncio streams, aiohttp, httpx, redis-py and asyncpg
  run unmodified; names outside the world (``127.0.0.1``, a real service) stay real.
* Faults: :meth:`Network.partition` / :meth:`Network.heal`, :meth:`Network.link` (latency,
  jitter, loss, duplication, bandwidth), :meth:`Host.crash` / :meth:`Host.restart`,
  :meth:`Host.pause`, and per-host clocks (:meth:`Host.set_clock`).
* :func:`current_host` -- which host the calling code lives on.
* :func:`explore` -- run a scenario under many seeds (the order of same-instant timers, link
  jitter and loss draws), get its failures with a one-line replay each, :meth:`Failure.shrink`
  one to its fewest perturbations, :func:`replay` it with a timeline; ``check_determinism``
  runs each seed twice and names the first difference.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from ._entropy import EntropyReport as EntropyReport
from ._explore import Exploration as Exploration
from ._explore import Failure as Failure
from ._explore import explore as explore
from ._replay import replay as replay
from ._streams import WINDOW as WINDOW
from ._world import Host as Host
from ._world import Link as Link
from ._world import Network as Network
from ._world import current_host as current_host

__all__: tuple[str, ...] = (
    "WINDOW",
    "EntropyReport",
    "Exploration",
    "Failure",
    "Host",
    "Link",
    "Network",
    "current_host",
    "explore",
    "replay",
)
