"""Where a vehicle can be, how far apart two places are, and where *between* them is.

Why geometry is its own thing
-----------------------------
A vehicle's journey has two halves.  The clockwork -- plan a step, wait for it, advance, plan
the next -- is the same whatever the vehicle moves through, and lives in
:mod:`virtualtime.sim._movement`.  Everything that differs between a warehouse floor, a road
drawn as a polyline and a zone-controlled guide path is here, behind the small
:class:`Geometry` protocol.  A geometry is *stateless* with respect to vehicles: one
``Euclidean()`` or one ``GuidePath`` is shared by a whole fleet, and each vehicle keeps its own
position.

The protocol has five methods, and the interesting one may say "I cannot":
``position_along(a, b, d)`` answers ``None`` when the geometry has no idea where part way
between two places is (a table of pairwise distances, for instance).  That is a supported
answer: such a geometry makes every leg one step, and the vehicle is seen at its origin until
it arrives (KSL's free-path move).

``boundaries(a, b)`` is how a geometry fixes its own decision points.  A guide path answers
with the cumulative distances of the zone boundaries along the route, and the vehicle then
steps boundary to boundary whatever its ``step_size``; a plane answers ``None`` and the
modeller's ``step_size`` decides.

Distances are in the geometry's own units (metres, kilometres, grid cells); velocities are those
units per second of virtual time.  Two places closer than :data:`ARRIVAL_TOLERANCE` are the same
place.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol, TypeVar, runtime_checkable

from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import check_finite
from ._check import check_positive, short

_MAX_GRID: Final = 10**7
"""The most junctions :meth:`GuidePath.grid` builds (a larger grid would not fit in memory)."""

__all__ = [
    "ARRIVAL_TOLERANCE",
    "Between",
    "DistanceTable",
    "Euclidean",
    "Geometry",
    "GuidePath",
    "Point",
    "Polyline",
]

ARRIVAL_TOLERANCE: Final = 1e-9
"""Below this distance (in the geometry's own units) two places are the same place."""

P = TypeVar("P")

Point = tuple[float, ...]
"""A point in 2-D or 3-D space: a tuple of floats."""


@runtime_checkable
class Geometry(Protocol[P]):
    """What a :class:`~virtualtime.sim.Vehicle` needs to know about the space it moves through.

    Implement these five methods to give vehicles a new kind of space (a rail network, a great
    circle, a lookup table of road distances).  ``P`` is the type of a position: a tuple of
    floats for a plane, a zone name for a guide path.  The vehicle holds its own position; the
    geometry only answers questions about positions, so one geometry serves a whole fleet.

    * ``check_position(value, name=..., like=...)`` -- turn a user's value into a position, or
      raise ``TypeError``/``ValueError`` naming ``name`` and the rule broken.  ``like`` is the
      vehicle's current position when a destination is checked (so a plane can insist on the
      same number of dimensions), ``None`` otherwise.
    * ``distance(a, b)`` -- how far a vehicle at ``a`` must travel to reach ``b``, along the route
      it would actually take (``math.inf`` when it cannot).
    * ``is_reachable(a, b)`` -- whether a vehicle at ``a`` can get to ``b`` at all.
    * ``position_along(a, b, d)`` -- the position ``d`` along that route, or ``None`` when the
      geometry cannot say (then every leg is one step).
    * ``boundaries(a, b)`` -- the distances along the route at which the geometry itself fixes a
      decision point, ascending and ending with the route's length; or ``None`` to let the
      vehicle's ``step_size`` decide.
    """

    def check_position(self, value: object, *, name: str = "position", like: P | None = None) -> P:
        """``value`` as a position of this geometry, or a clear ``TypeError``/``ValueError``."""
        ...

    def distance(self, a: P, b: P) -> float:
        """Distance a vehicle at ``a`` travels to reach ``b`` (``math.inf`` if it cannot)."""
        ...

    def is_reachable(self, a: P, b: P) -> bool:
        """Whether a vehicle at ``a`` can reach ``b``."""
        ...

    def position_along(self, a: P, b: P, distance: float) -> P | None:
        """The position ``distance`` along the route from ``a`` to ``b``; ``None``: cannot say."""
        ...

    def boundaries(self, a: P, b: P) -> Sequence[float] | None:
        """Decision points fixed by the geometry along the route, or ``None``."""
        ...


# --------------------------------------------------------------------------------- points


def _check_point(
    value: object, name: str, dimensions: tuple[int, ...], like: Point | None
) -> Point:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidTypeError(
            f"{name} must be a sequence of {' or '.join(map(str, dimensions))} coordinates, "
            f"got {value!r} ({type(value).__name__})"
        )
    point = tuple(check_finite(f"{name}[{i}]", x) for i, x in enumerate(value))
    if like is not None and len(point) != len(like):
        raise InvalidValueError(
            f"{name} must have {len(like)} coordinates like the vehicle's position {like!r}, "
            f"got {value!r}"
        )
    if len(point) not in dimensions:
        raise InvalidValueError(
            f"{name} must have {' or '.join(map(str, dimensions))} coordinates, got {value!r}"
        )
    return point


def _lerp(a: Point, b: Point, fraction: float) -> Point:
    return tuple(x + (y - x) * fraction for x, y in zip(a, b, strict=True))


class Euclidean:
    """Straight lines in a 2-D or 3-D plane; positions are tuples of floats.

    The geometry of an open floor, a yard, a sea or the sky: a vehicle goes straight from where
    it is to where it is sent, and can be anywhere on the way, so its journey is cut into steps of
    the vehicle's ``step_size``.  ``dimensions`` fixes 2 or 3; left as ``None`` either is
    accepted, and each vehicle keeps the dimension of its starting position (a destination of
    another dimension is a ``ValueError``).
    """

    __slots__ = ("_dimensions",)

    def __init__(self, dimensions: int | None = None) -> None:
        if dimensions is not None:
            if isinstance(dimensions, bool) or not isinstance(dimensions, int):
                raise InvalidTypeError(f"dimensions must be 2, 3 or None, got {dimensions!r}")
            if dimensions not in (2, 3):
                raise InvalidValueError(f"dimensions must be 2, 3 or None, got {dimensions!r}")
        self._dimensions = dimensions

    @property
    def dimensions(self) -> int | None:
        """2 or 3, or ``None`` when either is accepted."""
        return self._dimensions

    def check_position(
        self, value: object, *, name: str = "position", like: Point | None = None
    ) -> Point:
        """A tuple of 2 or 3 finite floats (the same count as ``like``, when given)."""
        allowed = (2, 3) if self._dimensions is None else (self._dimensions,)
        return _check_point(value, name, allowed, like)

    def distance(self, a: Point, b: Point) -> float:
        """Straight-line distance."""
        return math.dist(a, b)

    def is_reachable(self, a: Point, b: Point) -> bool:
        """True when ``a`` and ``b`` have as many coordinates: then every point can be reached
        in a straight line (a 2-D point and a 3-D point are not in the same space)."""
        return len(a) == len(b)

    def position_along(self, a: Point, b: Point, distance: float) -> Point:
        """The point ``distance`` from ``a`` toward ``b`` (``b`` itself at or past the end)."""
        length = math.dist(a, b)
        if distance >= length:
            return b
        if distance <= 0:
            return a
        return _lerp(a, b, distance / length)

    def boundaries(self, a: Point, b: Point) -> None:
        """None: on a plane the vehicle's ``step_size`` sets the decision points."""
        return None

    def __repr__(self) -> str:
        return f"Euclidean(dimensions={self._dimensions!r})"


class Polyline:
    """A fixed path through waypoints -- a road, a rail, a conveyor -- that vehicles follow.

    Use it when vehicles are free to stop anywhere but must keep to a drawn route: a position is
    any point *on* the path (a ``ValueError`` otherwise), the distance between two positions is
    measured along the path, and a journey interpolates along it, turning the corners at the
    waypoints.  Steps are the vehicle's ``step_size``.

    A path that crosses itself is allowed; a point at a crossing is taken at its first passage
    (the smaller distance from the first waypoint).  :meth:`point_at` and :meth:`arc_position`
    convert between points and distances along the path ("chainage").
    """

    __slots__ = ("_arc_cache", "_cumulative", "_points", "_tolerance")

    def __init__(self, waypoints: Iterable[Sequence[float]]) -> None:
        given: object = waypoints
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise InvalidTypeError(f"waypoints must be an iterable of points, got {waypoints!r}")
        points: list[Point] = []
        for i, raw in enumerate(waypoints):
            like = points[0] if points else None
            points.append(_check_point(raw, f"waypoints[{i}]", (2, 3), like))
            if i and points[-1] == points[-2]:
                raise InvalidValueError(
                    f"waypoints[{i}] repeats the waypoint before it ({raw!r}); consecutive "
                    "waypoints must differ"
                )
        if len(points) < 2:
            raise InvalidValueError(f"a Polyline needs at least 2 waypoints, got {len(points)}")
        cumulative = [0.0]
        for p, q in itertools.pairwise(points):
            cumulative.append(cumulative[-1] + math.dist(p, q))
        self._points = tuple(points)
        self._cumulative = tuple(cumulative)
        extent = max(abs(x) for p in points for x in p)
        self._tolerance = ARRIVAL_TOLERANCE * max(1.0, extent, cumulative[-1])
        self._arc_cache: dict[Point, float] = {}

    @property
    def waypoints(self) -> tuple[Point, ...]:
        """The waypoints, as given (as tuples of floats)."""
        return self._points

    @property
    def length(self) -> float:
        """Length of the whole path."""
        return self._cumulative[-1]

    def point_at(self, s: float) -> Point:
        """The point at distance ``s`` along the path from the first waypoint (clamped)."""
        s = check_finite("s", s)
        cumulative = self._cumulative
        if s <= 0:
            return self._points[0]
        if s >= cumulative[-1]:
            return self._points[-1]
        i = bisect_left(cumulative, s)
        if cumulative[i] == s:
            return self._points[i]
        start = cumulative[i - 1]
        return _lerp(self._points[i - 1], self._points[i], (s - start) / (cumulative[i] - start))

    def arc_position(self, point: Sequence[float]) -> float:
        """Distance along the path of ``point`` (its first passage); ``ValueError`` if off it."""
        p = _check_point(point, "point", (len(self._points[0]),), None)
        return self._arc(p, "point")

    def _arc(self, p: Point, name: str) -> float:
        cached = self._arc_cache.get(p)
        if cached is not None:
            return cached
        best = math.inf
        for i, (a, b) in enumerate(itertools.pairwise(self._points)):
            seg = tuple(y - x for x, y in zip(a, b, strict=True))
            seg2 = sum(c * c for c in seg)
            t = sum((x - y) * c for x, y, c in zip(p, a, seg, strict=True)) / seg2
            t = min(1.0, max(0.0, t))
            gap = math.dist(p, _lerp(a, b, t))
            best = min(best, gap)
            if gap <= self._tolerance:
                s = (
                    self._cumulative[i + 1]
                    if t == 1.0
                    else self._cumulative[i] + t * (self._cumulative[i + 1] - self._cumulative[i])
                )
                if len(self._arc_cache) >= 4096:
                    self._arc_cache.clear()
                self._arc_cache[p] = s
                return s
        raise InvalidValueError(f"{name} {p!r} is not on the path (it is {best:.6g} away from it)")

    def check_position(
        self, value: object, *, name: str = "position", like: Point | None = None
    ) -> Point:
        """A point on the path, with as many coordinates as the waypoints."""
        p = _check_point(value, name, (len(self._points[0]),), like)
        self._arc(p, name)
        return p

    def distance(self, a: Point, b: Point) -> float:
        """Distance along the path."""
        return abs(self._arc(b, "b") - self._arc(a, "a"))

    def is_reachable(self, a: Point, b: Point) -> bool:
        """Always true: any point of the path can be reached from any other."""
        return True

    def position_along(self, a: Point, b: Point, distance: float) -> Point:
        """The point ``distance`` along the path from ``a`` toward ``b``."""
        sa, sb = self._arc(a, "a"), self._arc(b, "b")
        if distance >= abs(sb - sa):
            return b
        if distance <= 0:
            return a
        return self.point_at(sa + distance if sb >= sa else sa - distance)

    def boundaries(self, a: Point, b: Point) -> None:
        """None: the vehicle's ``step_size`` sets the decision points."""
        return None

    def __repr__(self) -> str:
        return f"Polyline({len(self._points)} waypoints, length={self.length:g})"


# ------------------------------------------------------------------------------ guide path


@dataclass(frozen=True, slots=True)
class Between:
    """A place part way along the guide-path edge ``start -> end``, ``offset`` from ``start``.

    Only a halt puts a vehicle here (between decision points); it cannot be a destination.  A
    vehicle halted between two zones resumes toward whichever end is shorter for its journey.
    """

    start: Hashable
    end: Hashable
    offset: float

    def __repr__(self) -> str:
        return f"Between({self.start!r}, {self.end!r}, {self.offset:g})"


class _Hop(NamedTuple):
    start: Hashable  # the edge this hop runs along, as stored: start -> end
    end: Hashable
    begin: float  # offset along that edge where the hop begins
    length: float  # distance covered by the hop
    forward: bool  # True: toward `end`; False: back toward `start`


class GuidePath:
    """A network of zones joined by edges of known length: guided vehicles, roads, aisles.

    Use it when a vehicle may only change its mind at fixed places: the zone boundaries of an
    AGV guide path, the junctions of a road map.  Positions are zone names (any hashable value
    except ``None``); a journey follows the shortest route and each step crosses one edge, from
    boundary to boundary, so ``step_size`` is ignored.  A redirect therefore takes effect at the
    next zone, like a real guided vehicle, and a continuation gate is asked at every zone.

    ``edges`` are ``(zone_a, zone_b, length)``; with ``two_way=True`` (the default) each can be
    travelled both ways, otherwise only from ``zone_a`` to ``zone_b``.  A destination that cannot
    be reached (another component, the wrong side of a one-way edge) is a ``ValueError``.  Routes
    are shortest paths; among equally short routes the one found first in edge order wins, so
    results are deterministic.  A vehicle halted part way along an edge is :class:`Between` two
    zones.  :meth:`grid` builds a rectangular street grid.
    """

    __slots__ = ("_adjacent", "_hops_cache", "_trees", "_two_way")

    def __init__(
        self, edges: Iterable[tuple[Hashable, Hashable, float]], *, two_way: bool = True
    ) -> None:
        if not isinstance(two_way, bool):
            raise InvalidTypeError(f"two_way must be a bool, got {two_way!r}")
        given: object = edges
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise InvalidTypeError(
                f"edges must be an iterable of (zone, zone, length), got {edges!r}"
            )
        adjacent: dict[Hashable, dict[Hashable, float]] = {}
        for i, edge in enumerate(edges):
            if not isinstance(edge, tuple) or len(edge) != 3:
                raise InvalidTypeError(
                    f"edges[{i}] must be a tuple (zone, zone, length), got {edge!r}"
                )
            a, b, raw_length = edge
            for zone in (a, b):
                self._check_zone_label(zone, f"edges[{i}]")
            if a == b:
                raise InvalidValueError(f"edges[{i}] joins zone {a!r} to itself")
            length = check_finite(f"edges[{i}] length", raw_length)
            if length <= 0:
                raise InvalidValueError(f"edges[{i}] length must be > 0, got {raw_length!r}")
            pairs = [(a, b), (b, a)] if two_way else [(a, b)]
            for u, v in pairs:
                if v in adjacent.get(u, {}):
                    raise InvalidValueError(f"edges[{i}] repeats the edge {u!r} -> {v!r}")
                adjacent.setdefault(u, {})[v] = length
                adjacent.setdefault(v, {})
        if not adjacent:
            raise InvalidValueError("a GuidePath needs at least one edge")
        self._adjacent = adjacent
        self._two_way = two_way
        self._trees: dict[Hashable, tuple[dict[Hashable, float], dict[Hashable, Hashable]]] = {}
        self._hops_cache: dict[tuple[Hashable, Hashable], tuple[_Hop, ...] | None] = {}

    @staticmethod
    def _check_zone_label(zone: object, name: str) -> None:
        if zone is None or isinstance(zone, Between):
            raise InvalidTypeError(
                f"{name}: a zone must be a hashable value other than None, got {zone!r}"
            )
        try:
            hash(zone)
        except TypeError:
            raise InvalidTypeError(f"{name}: a zone must be hashable, got {zone!r}") from None

    @classmethod
    def grid(cls, rows: int, columns: int, spacing: float = 1.0) -> GuidePath:
        """A two-way street grid of ``rows`` x ``columns`` junctions ``spacing`` apart.

        Zones are ``(row, column)`` tuples counted from 0, edges join horizontal and vertical
        neighbours.
        """
        for name, value in (("rows", rows), ("columns", columns)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be an int, got {value!r}")
        if rows < 1 or columns < 1 or rows * columns < 2:
            raise InvalidValueError(
                f"rows x columns must make at least 2 junctions, got {short(rows)} x "
                f"{short(columns)}"
            )
        if rows * columns > _MAX_GRID:
            raise InvalidValueError(
                f"rows x columns must make at most {_MAX_GRID:,} junctions, got {short(rows)} x "
                f"{short(columns)}"
            )
        check_positive("spacing", spacing)
        edges: list[tuple[Hashable, Hashable, float]] = []
        for r in range(rows):
            for c in range(columns):
                if c + 1 < columns:
                    edges.append(((r, c), (r, c + 1), spacing))
                if r + 1 < rows:
                    edges.append(((r, c), (r + 1, c), spacing))
        return cls(edges)

    @property
    def zones(self) -> tuple[Hashable, ...]:
        """Every zone, in the order the edges introduced them."""
        return tuple(self._adjacent)

    @property
    def two_way(self) -> bool:
        """Whether every edge can be travelled in both directions."""
        return self._two_way

    def edge_length(self, a: Hashable, b: Hashable) -> float | None:
        """Length of the edge ``a -> b``, or ``None`` when there is none."""
        return self._adjacent.get(a, {}).get(b)

    def route(self, a: Hashable, b: Hashable) -> tuple[Hashable, ...]:
        """The zones a vehicle passes from zone ``a`` to zone ``b``, both included."""
        a = self.check_position(a, name="a")
        b = self.check_position(b, name="b")
        if a == b:
            return (a,)
        hops = self._hops(a, b)
        if hops is None:
            raise InvalidValueError(f"zone {b!r} cannot be reached from zone {a!r}")
        return (a, *(hop.end for hop in hops))

    def check_position(
        self, value: object, *, name: str = "position", like: Hashable | None = None
    ) -> Hashable:
        """A zone of this guide path (positions :class:`Between` zones come only from halts)."""
        if isinstance(value, Between):
            raise InvalidValueError(
                f"{name} must be a zone; {value!r} is part way along an edge, where only a "
                "halt can put a vehicle"
            )
        self._check_zone_label(value, name)
        if value not in self._adjacent:
            raise InvalidValueError(f"{name} {value!r} is not a zone of this guide path")
        return value

    # -- shortest paths

    def _tree(self, source: Hashable) -> tuple[dict[Hashable, float], dict[Hashable, Hashable]]:
        tree = self._trees.get(source)
        if tree is None:
            dist: dict[Hashable, float] = {source: 0.0}
            prev: dict[Hashable, Hashable] = {}
            counter = itertools.count()
            heap: list[tuple[float, int, Hashable]] = [(0.0, next(counter), source)]
            done: set[Hashable] = set()
            while heap:
                d, _, u = heapq.heappop(heap)
                if u in done:
                    continue
                done.add(u)
                for v, length in self._adjacent[u].items():
                    nd = d + length
                    if v not in dist or nd < dist[v]:
                        dist[v] = nd
                        prev[v] = u
                        heapq.heappush(heap, (nd, next(counter), v))
            tree = (dist, prev)
            self._trees[source] = tree
        return tree

    def _zone_hops(self, a: Hashable, b: Hashable) -> tuple[_Hop, ...] | None:
        dist, prev = self._tree(a)
        if b not in dist:
            return None
        zones = [b]
        while zones[-1] != a:
            zones.append(prev[zones[-1]])
        zones.reverse()
        return tuple(
            _Hop(u, v, 0.0, self._adjacent[u][v], True) for u, v in itertools.pairwise(zones)
        )

    def _hops(self, a: Hashable, b: Hashable) -> tuple[_Hop, ...] | None:
        key = (a, b)
        if key in self._hops_cache:
            return self._hops_cache[key]
        hops: tuple[_Hop, ...] | None
        if not isinstance(a, Between):
            hops = () if a == b else self._zone_hops(a, b)
        else:
            length = self._adjacent[a.start][a.end]
            options: list[tuple[float, tuple[_Hop, ...]]] = []
            ahead = self._zone_hops(a.end, b) if a.end != b else ()
            if ahead is not None:
                first = _Hop(a.start, a.end, a.offset, length - a.offset, True)
                options.append((first.length + sum(h.length for h in ahead), (first, *ahead)))
            if self._adjacent[a.end].get(a.start) == length:
                behind = self._zone_hops(a.start, b) if a.start != b else ()
                if behind is not None:
                    first = _Hop(a.start, a.end, a.offset, a.offset, False)
                    options.append((first.length + sum(h.length for h in behind), (first, *behind)))
            hops = min(options, key=lambda option: option[0])[1] if options else None
        if len(self._hops_cache) >= 65536:
            self._hops_cache.clear()
        self._hops_cache[key] = hops
        return hops

    # -- the Geometry protocol

    def distance(self, a: Hashable, b: Hashable) -> float:
        """Length of the shortest route from ``a`` to ``b`` (``math.inf`` if there is none)."""
        hops = self._hops(a, b)
        return math.inf if hops is None else sum(h.length for h in hops)

    def is_reachable(self, a: Hashable, b: Hashable) -> bool:
        """Whether some route leads from ``a`` to ``b``."""
        return self._hops(a, b) is not None

    def position_along(self, a: Hashable, b: Hashable, distance: float) -> Hashable | None:
        """The zone reached after ``distance`` along the route, or :class:`Between` two zones."""
        hops = self._hops(a, b)
        if hops is None:
            return None
        if distance <= ARRIVAL_TOLERANCE:
            return a
        travelled = 0.0
        for hop in hops:
            end = travelled + hop.length
            if distance < end - ARRIVAL_TOLERANCE:
                into = distance - travelled
                offset = hop.begin + into if hop.forward else hop.begin - into
                return Between(hop.start, hop.end, offset)
            travelled = end
            if distance <= end + ARRIVAL_TOLERANCE:
                return hop.end if hop.forward else hop.start
        return b

    def boundaries(self, a: Hashable, b: Hashable) -> tuple[float, ...] | None:
        """Distances along the route at which each zone boundary is crossed."""
        hops = self._hops(a, b)
        if not hops:
            return None if hops is None else (0.0,)
        return tuple(itertools.accumulate(h.length for h in hops))

    def __repr__(self) -> str:
        edges = sum(len(v) for v in self._adjacent.values())
        if self._two_way:
            edges //= 2
        return f"GuidePath({len(self._adjacent)} zones, {edges} edges, two_way={self._two_way})"


# -------------------------------------------------------------------------- distance table


class DistanceTable:
    """Named places and the distances between them, with nothing known about the way between.

    The geometry of a road-distance matrix or a list of travel times: a vehicle can only be *at*
    a place, so it cannot interpolate (``position_along`` is ``None``) and every leg is a single
    step -- the vehicle is seen at its origin until it arrives, and a redirect or a
    continuation gate waits for the whole leg.  Use it when that is all the data there is; use a
    :class:`GuidePath` when the places are joined by a network.

    ``distances`` maps ``(place_a, place_b)`` to a finite distance > 0; with ``symmetric=True``
    (the default) the reverse pair gets the same distance unless given.  A pair that is absent
    is unreachable.
    """

    __slots__ = ("_distances", "_known", "_places")

    def __init__(
        self, distances: Mapping[tuple[Hashable, Hashable], float], *, symmetric: bool = True
    ) -> None:
        if not isinstance(distances, Mapping):
            raise InvalidTypeError(
                f"distances must be a mapping {{(a, b): distance}}, got {distances!r}"
            )
        table: dict[tuple[Hashable, Hashable], float] = {}
        places: dict[Hashable, None] = {}
        for key, raw in distances.items():
            if not isinstance(key, tuple) or len(key) != 2:
                raise InvalidTypeError(f"distances keys must be (place, place) pairs, got {key!r}")
            a, b = key
            for place in key:
                if place is None:
                    raise InvalidTypeError(f"distances[{key!r}]: a place must not be None")
            value = check_finite(f"distances[{key!r}]", raw)
            if a == b:
                raise InvalidValueError(f"distances[{key!r}] gives a place a distance to itself")
            if value <= 0:
                raise InvalidValueError(f"distances[{key!r}] must be > 0, got {raw!r}")
            table[key] = value
            places[a] = places[b] = None
        if symmetric:
            for (a, b), value in list(table.items()):
                other = table.setdefault((b, a), value)
                if other != value:
                    raise InvalidValueError(
                        f"distances[{(a, b)!r}] = {value!r} but distances[{(b, a)!r}] = "
                        f"{other!r}; pass symmetric=False for a one-way table"
                    )
        if not places:
            raise InvalidValueError("a DistanceTable needs at least one pair of places")
        self._distances = table
        self._places = tuple(places)
        self._known = frozenset(places)

    @property
    def places(self) -> tuple[Hashable, ...]:
        """Every place, in the order the table introduced them."""
        return self._places

    def check_position(
        self, value: object, *, name: str = "position", like: Hashable | None = None
    ) -> Hashable:
        """One of the table's places."""
        try:
            known = value in self._known
        except TypeError:
            raise InvalidTypeError(f"{name} must be a hashable place, got {value!r}") from None
        if not known:
            raise InvalidValueError(f"{name} {value!r} is not a place of this distance table")
        return value

    def distance(self, a: Hashable, b: Hashable) -> float:
        """The tabled distance (0 for a place to itself, ``math.inf`` when not tabled)."""
        if a == b:
            return 0.0
        return self._distances.get((a, b), math.inf)

    def is_reachable(self, a: Hashable, b: Hashable) -> bool:
        """Whether the pair is tabled (or the places are the same)."""
        return a == b or (a, b) in self._distances

    def position_along(self, a: Hashable, b: Hashable, distance: float) -> None:
        """None: a table cannot say where part way is, so each leg is one step."""
        return None

    def boundaries(self, a: Hashable, b: Hashable) -> None:
        """None: there are no decision points between two places."""
        return None

    def __repr__(self) -> str:
        return f"DistanceTable({len(self._places)} places)"
