"""Simulation toolkit: clock trees, periodic timers, events with durations.

Written against anyio only, so everything here runs on the virtual asyncio loop
(``virtualtime.new_event_loop``) and on trio with ``virtualtime.trio.VirtualClock`` alike;
the synchronous parts (a manual :class:`Clock` tree, :meth:`Timer.run_sync`,
:meth:`Timeline.update`) need no loop at all.

* :class:`Clock` — clocks at relative rates that sleep, pause and speed up in lock-step
  (Ruck's clock tree, with rate changes that re-time pending sleeps); :class:`TriggerClock`
  parks objects until a named trigger fires.
* :class:`Timer` and :class:`PeriodicAction` — actions run at a start and then every period,
  with priorities, FIFO at equal time and priority, exact periods (TerraME's timer).
* :class:`Timeline` and :class:`TimelineEntry` — things with a start and a duration, polled
  by ``update(dt)`` or every ``dt`` of virtual time (Nit's event queue).
* :class:`Vehicle`, :class:`Fleet` and :class:`Journey` — vehicles whose step-planned
  journeys you can await, command, redirect, halt and resume from anywhere, on a
  :class:`Geometry` such as :class:`Euclidean`, :class:`Polyline` or :class:`GuidePath`
  (KSL's interpolated movement).
* The modelling kit (SimPy's building blocks, in async idiom): :func:`simulate` and
  :class:`Simulation`; processes (:func:`start`, :class:`Process` with
  :meth:`~Process.interrupt` and :class:`Interrupt`); :func:`sleep`, :func:`now`;
  :class:`Resource`, :class:`PriorityResource`, :class:`PreemptiveResource`;
  :class:`Container`, :class:`Store`, :class:`FilterStore`, :class:`PriorityStore`;
  :class:`Signal`; :func:`first_of` and :func:`all_of`; statistics on every resource,
  container and store (:class:`ResourceStats`, :class:`BufferStats`, :class:`TimeSeries`,
  :class:`Tally`).  See docs/coming-from-simpy.md.

Sync or async: one rule
-----------------------
A function is a coroutine exactly when it waits inside a running loop (``await
timer.run(T)``, ``await env.run(T)``, ``await clock.sleep(dt)``, ``await journey``); a
``run…`` method that drives a clock from outside any loop is synchronous
(:meth:`Timer.run_sync`, :meth:`Clock.run` / :meth:`Clock.run_until` on a manual tree,
:meth:`Timeline.update`), as ``loop.run_until`` is and ``await virtualtime.run_until`` is not.
Commands that only read or change state inside a loop without waiting (:func:`start`,
``resource.request()``, ``van.travel_to()``, :func:`now`) are plain functions.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from ._clock import Clock as Clock
from ._clock import TriggerClock as TriggerClock
from ._geometry import ARRIVAL_TOLERANCE as ARRIVAL_TOLERANCE
from ._geometry import Between as Between
from ._geometry import DistanceTable as DistanceTable
from ._geometry import Euclidean as Euclidean
from ._geometry import Geometry as Geometry
from ._geometry import GuidePath as GuidePath
from ._geometry import Point as Point
from ._geometry import Polyline as Polyline

# The modelling kit's names, in the order the API reference (docs/api/sim.md) lists them:
# mkdocstrings follows the order of these imports.
# isort: off
from ._simulation import ORDERS as ORDERS
from ._events import AllOf as AllOf
from ._events import AnyOf as AnyOf
from ._base import BaseResource as BaseResource
from ._core import ConditionValue as ConditionValue
from ._base import Get as Get
from ._base import Put as Put
from ._stores import PriorityItem as PriorityItem
from ._buffers import BufferStats as BufferStats
from ._containers import Container as Container
from ._stores import FilterStore as FilterStore
from ._process import Interrupt as Interrupt
from ._resources import Preempted as Preempted
from ._resources import PreemptiveResource as PreemptiveResource
from ._resources import PriorityResource as PriorityResource
from ._stores import PriorityStore as PriorityStore
from ._process import Process as Process
from ._resources import Request as Request
from ._resources import Resource as Resource
from ._resources import ResourceStats as ResourceStats
from ._kit import Signal as Signal
from ._simulation import Simulation as Simulation
from ._stores import Store as Store
from ._conditions import all_of as all_of
from ._process import current_process as current_process
from ._conditions import first_of as first_of
from ._sleep import now as now
from ._simulation import simulate as simulate
from ._sleep import sleep as sleep
from ._process import start as start
from ._process import start_delayed as start_delayed

# isort: on
from ._journey import Journey as Journey
from ._journey import JourneyOutcome as JourneyOutcome
from ._journey import JourneyStatus as JourneyStatus
from ._movement import Fleet as Fleet
from ._movement import Vehicle as Vehicle
from ._stats import Summary as Summary
from ._stats import Tally as Tally
from ._stats import TimeSeries as TimeSeries
from ._timeline import Timeline as Timeline
from ._timeline import TimelineEntry as TimelineEntry
from ._timer import PRIORITIES as PRIORITIES
from ._timer import PeriodicAction as PeriodicAction
from ._timer import Timer as Timer

__all__ = (
    "ARRIVAL_TOLERANCE",
    "AllOf",
    "AnyOf",
    "BaseResource",
    "Between",
    "BufferStats",
    "Clock",
    "ConditionValue",
    "Container",
    "DistanceTable",
    "Euclidean",
    "FilterStore",
    "Fleet",
    "Geometry",
    "Get",
    "GuidePath",
    "Interrupt",
    "Journey",
    "JourneyOutcome",
    "JourneyStatus",
    "ORDERS",
    "PRIORITIES",
    "PeriodicAction",
    "Point",
    "Polyline",
    "Preempted",
    "PreemptiveResource",
    "PriorityItem",
    "PriorityResource",
    "PriorityStore",
    "Process",
    "Put",
    "Request",
    "Resource",
    "ResourceStats",
    "Signal",
    "Simulation",
    "Store",
    "Summary",
    "Tally",
    "TimeSeries",
    "Timeline",
    "TimelineEntry",
    "Timer",
    "TriggerClock",
    "Vehicle",
    "all_of",
    "current_process",
    "first_of",
    "now",
    "simulate",
    "sleep",
    "start",
    "start_delayed",
)
