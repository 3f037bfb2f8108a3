"""Simulation toolkit: clock trees, periodic timers, events with durations.

Written against anyio only, so everything here runs on the virtual asyncio loop
(``virtualtime.new_event_loop``) and on trio with ``virtualtime.trio.VirtualClock`` alike;
the synchronous parts (a manual :class:`Clock` tree, :meth:`Timer.run_sync`,
:meth:`EventQueue.update`) need no loop at all.

* :class:`Clock` — clocks at relative rates that sleep, pause and speed up in lock-step
  (Ruck's clock tree, with rate changes that re-time pending sleeps); :class:`EventClock`
  parks objects until an event is raised.
* :class:`Timer` and :class:`Event` — periodic events with priorities, FIFO at equal time
  and priority, exact periods (TerraME's timer).
* :class:`EventQueue` and :class:`EventInfo` — events with a start and a duration, polled
  by ``update(dt)`` or every ``dt`` of virtual time (Nit's event queue).
* :class:`Vehicle`, :class:`Fleet` and :class:`Journey` — vehicles whose step-planned
  journeys you can await, command, redirect, halt and resume from anywhere, on a
  :class:`Geometry` such as :class:`Euclidean`, :class:`Polyline` or :class:`GuidePath`
  (KSL's interpolated movement).
"""

from ._clock import Clock as Clock
from ._clock import EventClock as EventClock
from ._events import EventInfo as EventInfo
from ._events import EventQueue as EventQueue
from ._geometry import ARRIVAL_TOLERANCE as ARRIVAL_TOLERANCE
from ._geometry import Between as Between
from ._geometry import DistanceTable as DistanceTable
from ._geometry import Euclidean as Euclidean
from ._geometry import Geometry as Geometry
from ._geometry import GuidePath as GuidePath
from ._geometry import Point as Point
from ._geometry import Polyline as Polyline
from ._movement import Fleet as Fleet
from ._movement import Journey as Journey
from ._movement import JourneyOutcome as JourneyOutcome
from ._movement import JourneyStatus as JourneyStatus
from ._movement import Vehicle as Vehicle
from ._timer import PRIORITIES as PRIORITIES
from ._timer import Event as Event
from ._timer import Timer as Timer

__all__ = (
    "ARRIVAL_TOLERANCE",
    "Between",
    "Clock",
    "DistanceTable",
    "Euclidean",
    "Event",
    "EventClock",
    "EventInfo",
    "EventQueue",
    "Fleet",
    "Geometry",
    "GuidePath",
    "Journey",
    "JourneyOutcome",
    "JourneyStatus",
    "PRIORITIES",
    "Point",
    "Polyline",
    "Timer",
    "Vehicle",
)
