"""Random SimPy models, run on SimPy 4.1.2 and on ``virtualtime.sim``, compared exactly (issue 37).

Use this module to find where the kit's ``order="simpy"`` parts from SimPy, and to hand a
minimal example to whoever fixes it:

* :func:`generate` makes a :class:`Model` from a seed (``random.Random(seed)``): processes
  started at equal instants, each a list of :class:`Step` -- sleeps, requests of the three
  resource kinds (``with``, ``async with``, explicit release, reneging), container and store
  operations, interrupts, joins, signals, conditions.  ``features=`` switches each ingredient
  off (:data:`FEATURES` names them; :data:`NEW_FEATURES` are the API names issue 37 adds).
* :func:`simpy_source` and :func:`kit_source` render a model as the SOURCE of two programs --
  a SimPy one and a kit one -- that mean the same thing by the mapping of issue 37's API note
  (withdraw rules, ``first_of``/``all_of`` as ``AnyOf``/``AllOf``, ``with`` blocks).  Each
  program's ``run()`` returns its log: ``(now, process, action, detail)`` tuples, then
  ``("end", now)`` or ``("raised", class name, str(exc))``.  They run on their own too
  (``python prog.py``), which is what a shrunk pair is for.
* :func:`run_simpy` and :func:`run_kit` run them; the kit run carries a :class:`Tracker`
  that checks invariants at every log call and, where the simulation offers ``_on_step``,
  after every event it processes.  :func:`evaluate` does both and compares.
* :func:`shrink` reduces a failing model while it keeps failing; :func:`format_pair` prints
  both programs and both logs with the first differing line marked.

Models on which SimPy itself crashes (a process preempting its own request, a preempted user
that has ended) are :attr:`Verdict.simpy_crash`: counted, never a divergence.

One room: the generator, both renderers, the tracker and the shrinker all read and write the
one model description (:class:`Model`, :class:`Step`), and a change to one -- a new step kind,
a new feature -- changes them together; split, every such change would touch four files.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import itertools
import linecache
import logging
import math
import random
import re
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import simpy

FEATURES: Final[dict[str, str]] = {
    "zero_delays": "delays of 0 (and equal delays)",
    "fractions": "delays k/4 and k/8 (binary fractions: exact sums on both sides)",
    "sleep_value": "sim.sleep(d, value) / env.timeout(d, value)",
    "many_processes": "up to 30 processes started at the same instant",
    "resource": "Resource",
    "priority_resource": "PriorityResource (priorities, ties)",
    "preemptive_resource": "PreemptiveResource (preempt=True/False)",
    "with_request": "with res.request() as req: await req",
    "async_with": "async with res.request() as req:",
    "explicit_release": "req = res.request(); await req; ...; req.release()",
    "res_release": "res.release(req)",
    "renege": "first_of(request or get or put, sleep(patience))",
    "nested_request": "a request inside another's block (SimPy crashes on self-preemption)",
    "container": "Container(capacity, init): get and put",
    "store": "Store",
    "filter_store": "FilterStore with get(filter)",
    "priority_store": "PriorityStore",
    "priority_item": "PriorityItem(priority, item) in a PriorityStore",
    "op_with": "with tank.get(a) as g: await g",
    "op_cancel": "op.cancel() of an operation that lost an a | b",
    "interrupt": "interrupts of sleeping and waiting processes",
    "interrupt_unstarted": "interrupts of processes that have not started yet",
    "first_of": "sim.first_of(...) / AnyOf with the losers withdrawn",
    "all_of": "sim.all_of(...) / AllOf",
    "operators": "a | b and a & b (ConditionValue)",
    "anyof_cls": "sim.AnyOf(...) and sim.AllOf(...)",
    "join": "await process (its value, or its exception caught)",
    "fail": "processes that raise",
    "signal": "Signal succeed and await",
    "signal_fail": "Signal.fail (caught by waiters, or ending the run)",
    "signal_trigger": "Signal.trigger(other)",
    "signal_state": "Signal.triggered / .processed / .ok",
    "defused": "Signal.defused = True on a failed signal",
    "late_start": "processes started later by main",
    "start_delayed": "sim.start_delayed / simpy.util.start_delayed",
    "until_number": "simulate(until=T)",
    "until_process": "run until a process ends (env.run(until=process))",
    "until_signal": "simulate(until=signal)",
}
"""Every ingredient :func:`generate` can use, by name; all are on by default."""

ALL_FEATURES: Final = frozenset(FEATURES)

NEW_FEATURES: Final = frozenset(
    {
        "res_release",
        "priority_item",
        "op_with",
        "op_cancel",
        "operators",
        "anyof_cls",
        "signal_trigger",
        "signal_state",
        "defused",
        "start_delayed",
        "until_process",
        "until_signal",
    }
)
"""The features that need API names issue 37 adds (``start_delayed``, ``PriorityItem``, ...)."""

EXISTING_FEATURES: Final = ALL_FEATURES - NEW_FEATURES


def detect_features() -> frozenset[str]:
    """The features the installed kit offers: :data:`EXISTING_FEATURES` plus each new one
    whose API names exist (found by looking, and by a tiny probe run)."""
    from virtualtime import sim

    found = set(EXISTING_FEATURES)
    checks = {
        "start_delayed": hasattr(sim, "start_delayed"),
        "priority_item": hasattr(sim, "PriorityItem"),
        "anyof_cls": hasattr(sim, "AnyOf") and hasattr(sim, "AllOf"),
        "res_release": hasattr(sim.Resource, "release"),
        "signal_trigger": hasattr(sim.Signal, "trigger"),
        "signal_state": hasattr(sim.Signal, "processed") and hasattr(sim.Signal, "ok"),
        "defused": hasattr(sim.Signal, "defused"),
    }
    found.update(name for name, ok in checks.items() if ok)
    probe: dict[str, bool] = {}

    async def main() -> None:
        tank = sim.Container(5, 1)
        op: Any = tank.get(1)
        probe["op_cancel"] = hasattr(op, "cancel")
        probe["op_with"] = hasattr(op, "__enter__")
        try:
            probe["operators"] = hasattr(op | sim.Signal(), "__await__")
        except TypeError:
            probe["operators"] = False
        await op

    with contextlib.suppress(Exception):
        sim.simulate(main, order="simpy")
    found.update(name for name, ok in probe.items() if ok)
    with contextlib.suppress(Exception):
        done: Any = sim.Signal()  # (Any: until= takes a signal only since issue 37)

        async def fire() -> None:
            done.succeed(1)

        if sim.simulate(fire, until=done, order="simpy") == 1:
            found.update({"until_signal", "until_process"})
    return frozenset(found)


# --------------------------------------------------------------------------- the model


@dataclass
class Operand:
    """One operand of a condition: ``sleep`` (num: delay, value), ``sig``, ``join`` (target),
    ``cget``/``cput`` (target container, num: amount), ``sget``/``sput`` (target store;
    value: the filter or the item)."""

    kind: str
    target: str = ""
    num: float = 0
    value: Any = None


@dataclass
class Step:
    """One step of a process.

    ``kind`` is ``sleep``, ``request``, ``cget``, ``cput``, ``sget``, ``sput``, ``interrupt``,
    ``join``, ``fire``, ``wait``, ``cond``, ``sigstate`` or (main only) ``start``.  ``catch``
    wraps it in ``try/except Interrupt`` (logged).  The other fields mean what the kind needs:
    ``style`` the form (``with``/``async_with``/``explicit`` for a request; ``plain``/``with``
    for a buffer operation; ``first_of``/``all_of``/``or``/``and``/``AnyOf``/``AllOf`` for a
    condition; ``succeed``/``fail``/``fail_defused``/``trigger`` for a fire).
    """

    kind: str
    target: str = ""
    num: float = 0
    value: Any = None
    style: str = ""
    patience: float | None = None
    priority: int = 0
    preempt: bool = True
    release: str = "req"
    catch: bool = False
    cancel: bool = False
    source: str = ""
    ops: list[Operand] = field(default_factory=list)
    body: list[Step] = field(default_factory=list)


@dataclass
class Proc:
    """A process: its name, steps, whether it catches an interrupt that escapes its steps,
    and how it ends (``return`` a value or ``fail``: raise ``Boom``)."""

    name: str
    steps: list[Step]
    catch_all: bool = True
    ending: str = "return"


@dataclass
class Model:
    """A whole model: its entities, the processes main starts at 0 (``procs``), the ones it
    starts later (``late``), main's own steps, and how the run ends (``until``: ``("none",
    None)``, ``("number", T)``, ``("signal", None)`` or ``("process", None)`` -- main)."""

    seed: int
    resources: list[tuple[str, str, int]] = field(default_factory=list)  # name, kind, capacity
    containers: list[tuple[str, float, int]] = field(default_factory=list)  # name, cap, init
    stores: list[tuple[str, str, float]] = field(default_factory=list)  # name, kind, capacity
    signals: list[str] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    late: list[Proc] = field(default_factory=list)
    main: list[Step] = field(default_factory=list)
    until: tuple[str, float | None] = ("none", None)

    def size(self) -> tuple[int, int]:
        """(processes, steps), main's steps included."""
        procs = self.procs + self.late
        return len(procs), sum(_count(p.steps) for p in procs) + _count(self.main)


def _count(steps: list[Step]) -> int:
    return sum(1 + _count(s.body) for s in steps)


def step_lists(model: Model) -> list[list[Step]]:
    """Every list of steps in the model (processes', main's, request bodies), in one order."""
    found: list[list[Step]] = []

    def walk(steps: list[Step]) -> None:
        found.append(steps)
        for s in steps:
            if s.body or s.kind == "request":
                walk(s.body)

    for proc in model.procs + model.late:
        walk(proc.steps)
    walk(model.main)
    return found


# --------------------------------------------------------------------------- the generator


class _Gen:
    def __init__(self, seed: int, features: frozenset[str]) -> None:
        unknown = set(features) - ALL_FEATURES
        if unknown:
            raise ValueError(f"unknown features {sorted(unknown)}; known: {sorted(FEATURES)}")
        self.rng = random.Random(seed)
        self.f = features
        self.model = Model(seed)
        self.cause = 0
        self.item = 0
        self.wrapped: dict[str, bool] = {}

    def on(self, name: str) -> bool:
        return name in self.f

    def delay(self, positive: bool = False) -> float:
        rng = self.rng
        if not positive and self.on("zero_delays") and rng.random() < 0.25:
            return 0
        if self.on("fractions") and rng.random() < 0.5:
            den = rng.choice((4, 8))
            return rng.randint(1, 2 * den) / den
        return rng.randint(1, 4)

    def build(self) -> Model:
        rng, m = self.rng, self.model
        kinds = [k for k, f in _RESOURCE_KINDS if self.on(f)]
        for i in range(rng.choice((0, 1, 1, 2)) if kinds else 0):
            m.resources.append((f"r{i}", rng.choice(kinds), rng.randint(1, 3)))
        if self.on("container"):
            for i in range(rng.choice((0, 1, 1, 2))):
                cap = rng.choice((3, 5, 10, math.inf))
                init = rng.randint(0, 5 if cap == math.inf else int(cap))
                m.containers.append((f"c{i}", cap, init))
        skinds = [k for k, f in _STORE_KINDS if self.on(f)]
        for i in range(rng.choice((0, 1, 1, 2)) if skinds else 0):
            m.stores.append((f"s{i}", rng.choice(skinds), rng.choice((1, 2, 3, math.inf))))
        if self.on("signal"):
            m.signals = [f"g{i}" for i in range(rng.choice((0, 1, 2, 3)))]
        sizes = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30) if self.on("many_processes") else (1, 2, 3)
        n = rng.choice(sizes)
        names = [f"p{i}" for i in range(n)]
        m.procs = [self.proc(name, names) for name in names]
        if self.on("late_start") or self.on("start_delayed"):
            m.late = [self.proc(f"q{i}", names) for i in range(rng.choice((0, 0, 1, 2)))]
        if self.on("fail"):
            # A process that raises ends the run unless somebody joins it: mostly those.
            joined = {
                t
                for steps in step_lists(m)
                for s in steps
                for t in [s.target] * (s.kind == "join") + [o.target for o in s.ops]
            }
            for proc in m.procs + m.late:
                if rng.random() < (0.2 if proc.name in joined else 0.01):
                    proc.ending = "fail"
        m.main = self.main_steps(names)
        m.until = self.until()
        return m

    def until(self) -> tuple[str, float | None]:
        rng = self.rng
        choices: list[tuple[str, float | None]] = [("none", None)] * 3
        if self.on("until_number"):
            choices += [("number", rng.randint(1, 48) / 4)] * 2
        if self.on("until_signal"):
            choices.append(("signal", None))
        if self.on("until_process"):
            choices.append(("process", None))
        return rng.choice(choices)

    def main_steps(self, names: list[str]) -> list[Step]:
        rng = self.rng
        steps: list[Step] = []
        started = list(names)
        if self.on("interrupt_unstarted") and names and rng.random() < 0.3:
            steps.append(self.interrupt(rng.choice(names)))
        pending = list(self.model.late)
        for _ in range(rng.randint(0, 4) + len(pending)):
            roll = rng.random()
            if pending and roll < 0.35:
                proc = pending.pop(0)
                delayed = self.on("start_delayed") and (
                    not self.on("late_start") or rng.random() < 0.5
                )
                steps.append(Step("start", proc.name, self.delay(True) if delayed else 0))
                if not delayed:
                    started.append(proc.name)
            elif roll < 0.6:
                steps.append(self.sleep())
            elif roll < 0.8 and self.on("interrupt") and started:
                steps.append(self.interrupt(rng.choice(started)))
            elif self.model.signals:
                steps.append(self.fire())
        for proc in pending:
            steps.append(Step("start", proc.name, 0))
        return steps

    def proc(self, name: str, names: list[str]) -> Proc:
        rng = self.rng
        others = [n for n in names if n != name]
        steps = [self.step(others, 0) for _ in range(rng.randint(1, 5))]
        return Proc(name, steps, catch_all=rng.random() < 0.9)

    def step(self, others: list[str], depth: int, outer: str = "") -> Step:
        """One step; ``outer``: the resource whose block it is in (a nested request often
        asks for the same one -- on a PreemptiveResource SimPy may then crash)."""
        rng, m = self.rng, self.model
        menu: list[tuple[str, float]] = [("sleep", 3)]
        if m.resources and (depth == 0 or (depth == 1 and self.on("nested_request"))):
            menu.append(("request", 3 if depth == 0 else 1))
        if m.containers:
            menu += [("cget", 1), ("cput", 1)]
        if m.stores:
            menu += [("sget", 1), ("sput", 1)]
        if self.on("interrupt") and others:
            menu.append(("interrupt", 1))
        if self.on("join") and others:
            menu.append(("join", 0.7))
        if m.signals:
            menu += [("fire", 0.8), ("wait", 0.8)]
            if self.on("signal_state"):
                menu.append(("sigstate", 0.2))
        if self.cond_styles():
            menu.append(("cond", 1.2))
        kind = _weighted(rng, menu)
        if kind == "request":
            step = self.request(others, depth, outer)
        elif kind == "interrupt":
            step = self.interrupt(rng.choice(others))
        elif kind == "join":
            step = Step("join", rng.choice(others))
        elif kind == "cond":
            step = self.cond(others)
        else:
            step = getattr(self, kind)()
        if self.on("interrupt") and rng.random() < 0.5:
            step.catch = True
        return step

    def sleep(self) -> Step:
        value = None
        if self.on("sleep_value") and self.rng.random() < 0.25:
            value = self.rng.choice(("v", 7, "w"))
        return Step("sleep", num=self.delay(), value=value)

    def interrupt(self, target: str) -> Step:
        self.cause += 1
        cause: Any = f"c{self.cause}" if self.rng.random() < 0.7 else self.cause
        return Step("interrupt", target, value=cause)

    def request(self, others: list[str], depth: int, outer: str) -> Step:
        rng = self.rng
        name, kind, _ = rng.choice(self.model.resources)
        if outer and rng.random() < 0.5:
            name, kind, _ = next(r for r in self.model.resources if r[0] == outer)
        styles = (
            ["with"]
            if self.on("with_request") or not (self.on("async_with") or self.on("explicit_release"))
            else []
        )
        styles += [
            s
            for s, f in (("async_with", "async_with"), ("explicit", "explicit_release"))
            if self.on(f)
        ]
        step = Step("request", name, style=rng.choice(styles))
        if kind != "Resource":
            step.priority = rng.randint(0, 2)
        if kind == "PreemptiveResource":
            step.preempt = rng.random() < 0.7
        if step.style != "async_with" and self.on("renege") and rng.random() < 0.3:
            step.patience = self.delay()
        if step.style == "explicit" and self.on("res_release") and rng.random() < 0.5:
            step.release = "res"
        step.body = [self.step(others, depth + 1, name) for _ in range(rng.randint(0, 2))]
        if not any(s.kind == "sleep" for s in step.body):
            step.body.insert(rng.randint(0, len(step.body)), self.sleep())
        return step

    def buffer_style(self, step: Step) -> Step:
        if self.on("op_with") and self.rng.random() < 0.3:
            step.style = "with"
        else:
            step.style = "plain"
        if self.on("renege") and self.rng.random() < 0.2:
            step.patience = self.delay()
        return step

    def amount(self, target: str) -> int:
        cap = next(c for n, c, _ in self.model.containers if n == target)
        return self.rng.randint(1, int(min(cap, 5)))

    def cget(self) -> Step:
        name = self.rng.choice(self.model.containers)[0]
        return self.buffer_style(Step("cget", name, num=self.amount(name)))

    def cput(self) -> Step:
        name = self.rng.choice(self.model.containers)[0]
        return self.buffer_style(Step("cput", name, num=self.amount(name)))

    def store_filter(self, target: str) -> Any:
        kind = self.store_kind(target)
        if kind != "FilterStore" or self.rng.random() < 0.2:
            return None
        return ("eq", self.rng.randint(0, 3)) if self.rng.random() < 0.6 else ("even", 0)

    def store_kind(self, target: str) -> str:
        return next(k for n, k, _ in self.model.stores if n == target)

    def store_item(self, target: str) -> Any:
        kind = self.store_kind(target)
        self.item += 1
        if kind == "FilterStore":
            return self.rng.randint(0, 3)
        if kind == "PriorityStore":
            if target not in self.wrapped:  # one kind of item per store: they must compare
                self.wrapped[target] = self.on("priority_item") and self.rng.random() < 0.6
            if self.wrapped[target]:
                return ("PI", self.rng.randint(0, 2), f"i{self.item}")
            return self.rng.randint(0, 5)
        return f"i{self.item}"

    def sget(self) -> Step:
        name = self.rng.choice(self.model.stores)[0]
        return self.buffer_style(Step("sget", name, value=self.store_filter(name)))

    def sput(self) -> Step:
        name = self.rng.choice(self.model.stores)[0]
        return self.buffer_style(Step("sput", name, value=self.store_item(name)))

    def fire(self) -> Step:
        rng = self.rng
        modes = ["succeed"] * 4
        if self.on("signal_fail"):
            modes.append("fail")
        if self.on("defused"):
            modes.append("fail_defused")
        if self.on("signal_trigger") and len(self.model.signals) > 1:
            modes.append("trigger")
        target = rng.choice(self.model.signals)
        step = Step("fire", target, style=rng.choice(modes), value=rng.choice(("x", 1, 2)))
        if step.style == "trigger":
            step.source = rng.choice([g for g in self.model.signals if g != target])
        return step

    def wait(self) -> Step:
        return Step("wait", self.rng.choice(self.model.signals))

    def sigstate(self) -> Step:
        return Step("sigstate", self.rng.choice(self.model.signals))

    def cond_styles(self) -> list[str]:
        styles = []
        for style, feature in (("first_of", "first_of"), ("all_of", "all_of")):
            if self.on(feature):
                styles.append(style)
        if self.on("operators"):
            styles += ["or", "and"]
        if self.on("anyof_cls"):
            styles += ["AnyOf", "AllOf"]
        return styles

    def cond(self, others: list[str]) -> Step:
        rng, m = self.rng, self.model
        step = Step("cond", style=rng.choice(self.cond_styles()))
        menu: list[tuple[str, float]] = [("sleep", 3)]
        if m.signals:
            menu.append(("sig", 1))
        if self.on("join") and others:
            menu.append(("join", 1))
        if m.containers:
            menu += [("cget", 0.7), ("cput", 0.5)]
        if m.stores:
            menu += [("sget", 0.7), ("sput", 0.5)]
        for _ in range(rng.choice((2, 2, 3))):
            kind = _weighted(rng, menu)
            if kind == "sleep":
                value = rng.choice((None, None, "t", 3)) if self.on("sleep_value") else None
                step.ops.append(Operand("sleep", num=self.delay(), value=value))
            elif kind == "sig":
                step.ops.append(Operand("sig", rng.choice(m.signals)))
            elif kind == "join":
                step.ops.append(Operand("join", rng.choice(others)))
            elif kind in ("cget", "cput"):
                name = rng.choice(m.containers)[0]
                step.ops.append(Operand(kind, name, num=self.amount(name)))
            elif kind == "sget":
                name = rng.choice(m.stores)[0]
                step.ops.append(Operand(kind, name, value=self.store_filter(name)))
            else:
                name = rng.choice(m.stores)[0]
                step.ops.append(Operand(kind, name, value=self.store_item(name)))
        if step.style in ("or", "and", "AnyOf", "AllOf") and self.on("op_cancel"):
            step.cancel = rng.random() < 0.5
        return step


_RESOURCE_KINDS: Final = (
    ("Resource", "resource"),
    ("PriorityResource", "priority_resource"),
    ("PreemptiveResource", "preemptive_resource"),
)
_STORE_KINDS: Final = (
    ("Store", "store"),
    ("FilterStore", "filter_store"),
    ("PriorityStore", "priority_store"),
)


def _weighted(rng: random.Random, menu: list[tuple[str, float]]) -> str:
    total = sum(w for _, w in menu)
    roll = rng.random() * total
    for name, weight in menu:
        roll -= weight
        if roll < 0:
            return name
    return menu[-1][0]


def generate(seed: int, features: frozenset[str] | set[str] = ALL_FEATURES) -> Model:
    """The model of ``seed``: the same seed and features give the same model, always."""
    return _Gen(seed, frozenset(features)).build()


# --------------------------------------------------------------------------- the renderers


class _Writer:
    """Lines of Python at an indentation depth."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self.counter = 0

    def __call__(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        self(header)
        self.depth += 1
        mark = len(self.lines)
        try:
            yield
        finally:
            if len(self.lines) == mark:
                self("pass")
            self.depth -= 1

    def fresh(self) -> int:
        self.counter += 1
        return self.counter


def _num(x: float) -> str:
    if x == math.inf:
        return "float('inf')"
    if isinstance(x, float) and x.is_integer():
        return repr(int(x))
    return repr(x)


def _item_literal(item: Any) -> Any:
    """What ``norm`` makes of an item in the programs (a PriorityItem: ``("PI", p, item)``)."""
    return tuple(item) if isinstance(item, tuple) else item


_PRELUDE_SIMPY: Final = '''\
"""SimPy program of model {seed} (tests/simpy_models.py)."""

import simpy
from simpy.util import start_delayed

LOG = []
PROCS, R, C, S, G = {{}}, {{}}, {{}}, {{}}, {{}}
env = None
DONE = None


class Boom(Exception):
    pass


def log(who, action, detail=None):
    LOG.append((env.now, who, action, detail))


def cause(c):
    if isinstance(c, simpy.resources.resource.Preempted):
        return ("preempted", None if c.by is None else c.by.name, c.usage_since)
    return str(c)


def norm(v):
    if type(v).__name__ == "PriorityItem":
        return ("PI", v.priority, norm(v.item))
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return tuple(norm(x) for x in v)
    return type(v).__name__


def withdraw(op, kind, owner, block=False):
    """What the kit does to an operation it withdraws (a first_of loser, an interrupted wait).

    block: op belongs to a with block that ends right after this, whose exit cancels it
    (SimPy's cancel() may run once), so a pending op is left to that exit.
    """
    if kind == "req":
        if op.triggered:
            owner.release(op)
        elif not block:
            op.cancel()
    elif kind == "get":
        if op.triggered:
            owner.put(op.amount if isinstance(owner, simpy.Container) else op.value)
        elif not block:
            op.cancel()
    elif kind == "put":
        if not op.triggered and not block:
            op.cancel()


def first_of(ops):
    """sim.first_of: the first operand (argument order) in AnyOf's value; losers withdrawn."""
    events = [op[0] for op in ops]
    try:
        r = yield simpy.AnyOf(env, events)
    except Exception:
        for op in ops:
            withdraw(*op)
        raise
    k = next(i for i, ev in enumerate(events) if ev in r)
    for i, op in enumerate(ops):
        if i != k:
            withdraw(*op)
    return k, r[events[k]]


def all_of(ops):
    """sim.all_of: AllOf's values in argument order; all operands withdrawn if it fails."""
    events = [op[0] for op in ops]
    try:
        r = yield simpy.AllOf(env, events)
    except Exception:
        for op in ops:
            withdraw(*op)
        raise
    return [r[ev] for ev in events]
'''

_PRELUDE_KIT: Final = '''\
"""virtualtime.sim program of model {seed} (tests/simpy_models.py)."""

import virtualtime
from virtualtime import sim

LOG = []
PROCS, R, C, S, G = {{}}, {{}}, {{}}, {{}}, {{}}
TRACK = [None]  # the harness's invariant tracker (reg/ab/gone only tell it what happened)
DONE = None


class Boom(Exception):
    pass


def log(who, action, detail=None):
    LOG.append((sim.now(), who, action, detail))
    if TRACK[0] is not None:
        TRACK[0].check()


def cause(c):
    if isinstance(c, sim.Preempted):
        return ("preempted", None if c.by is None else c.by.name, c.usage_since)
    return str(c)


def norm(v):
    if type(v).__name__ == "PriorityItem":
        return ("PI", v.priority, norm(v.item))
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return tuple(norm(x) for x in v)
    return type(v).__name__


def reg(op, kind, owner, amount=1, priority=0, preempt=False):
    if TRACK[0] is not None:
        TRACK[0].reg(op, kind, owner, amount, priority, preempt)
    return op


def ab(*ops):  # the kit withdrew these (interrupted or cancelled wait, lost or failed condition)
    if TRACK[0] is not None:
        TRACK[0].mark(ops, withdrawn=True)


def gone(*ops):  # the program cancelled these
    if TRACK[0] is not None:
        TRACK[0].mark(ops, withdrawn=False)
'''


class _Render:
    """One model as one program: the SimPy one (``kit=False``) or the kit one."""

    def __init__(self, model: Model, kit: bool) -> None:
        self.m = model
        self.kit = kit
        self.w = _Writer()
        self.aw = "await " if kit else "yield "
        self.interrupt_exc = "sim.Interrupt" if kit else "simpy.Interrupt"
        self.res_kind = {n: k for n, k, _ in model.resources}
        self.store_kind = {n: k for n, k, _ in model.stores}

    # ------------------------------------------------------------------ expressions

    def sleep_expr(self, delay: float, value: Any = None) -> str:
        extra = "" if value is None else f", {value!r}"
        if self.kit:
            return f"sim.sleep({_num(delay)}{extra})"
        return f"env.timeout({_num(delay)}{extra})"

    def item_expr(self, item: Any) -> str:
        if isinstance(item, tuple):
            _, prio, payload = item
            return f"{'sim' if self.kit else 'simpy'}.PriorityItem({prio!r}, {payload!r})"
        return repr(item)

    def buffer_expr(self, kind: str, target: str, num: float, value: Any) -> str:
        if kind in ("cget", "cput"):
            return f"C[{target!r}].{kind[1:]}({_num(num)})"
        if kind == "sput":
            return f"S[{target!r}].put({self.item_expr(value)})"
        if value is None or self.store_kind.get(target) != "FilterStore":
            return f"S[{target!r}].get()"
        if value[0] == "eq":
            return f"S[{target!r}].get(lambda x: x == {value[1]!r})"
        return f"S[{target!r}].get(lambda x: x % 2 == 0)"

    @staticmethod
    def owner(kind: str, target: str) -> str:
        return f"C[{target!r}]" if kind in ("cget", "cput") else f"S[{target!r}]"

    # ------------------------------------------------------------------ building blocks

    def await_op(self, var: str, kind: str, owner: str, value: bool, block: bool = False) -> None:
        """Await one operation; the SimPy side withdraws it when interrupted, as the kit does."""
        w = self.w
        target = f"v_ = {self.aw}{var}" if value else f"{self.aw}{var}"
        with w.block("try:"):
            w(target)
        if self.kit:
            with w.block("except BaseException:"):
                w(f"ab({var})")
                w("raise")
        else:
            with w.block("except simpy.Interrupt:"):
                w(f"withdraw({var}, {kind!r}, {owner}{', True' if block else ''})")
                w("raise")

    def first_of(
        self, entries: list[tuple[str, str | None, str | None]], block: bool = False
    ) -> None:
        """``k_, v_`` = the winner's index and value (losers withdrawn).  ``block``: the first
        entry belongs to the enclosing with block (see the SimPy prelude's withdraw)."""
        w = self.w
        if not self.kit:
            flags = [block and i == 0 for i in range(len(entries))]
            parts = ", ".join(
                f"({e}, {k!r}, {o or 'None'}{', True' if f else ''})"
                for (e, k, o), f in zip(entries, flags, strict=True)
            )
            w(f"k_, v_ = yield from first_of([{parts}])")
            return
        ops = f"ops{w.fresh()}"
        w(f"{ops} = [{', '.join(e for e, _, _ in entries)}]")
        with w.block("try:"):
            w(f"which, v_ = await sim.first_of(*{ops})")
        with w.block("except BaseException:"):
            w(f"ab(*{ops})")
            w("raise")
        w(f"k_ = [o is which for o in {ops}].index(True)")
        w(f"ab(*[o for o in {ops} if o is not which])")

    # ------------------------------------------------------------------ steps

    def steps(self, steps: list[Step], who: str) -> None:
        for step in steps:
            self.step(step, who)

    def step(self, s: Step, who: str) -> None:
        w = self.w
        if not s.catch:
            self.step_body(s, who)
            return
        with w.block("try:"):
            self.step_body(s, who)
        with w.block(f"except {self.interrupt_exc} as i_:"):
            w(f"log({who!r}, 'interrupted', cause(i_.cause))")

    def step_body(self, s: Step, who: str) -> None:
        getattr(self, f"do_{s.kind}")(s, who)

    def do_sleep(self, s: Step, who: str) -> None:
        if s.value is None:
            self.w(f"{self.aw}{self.sleep_expr(s.num)}")
            self.w(f"log({who!r}, 'slept')")
        else:
            self.w(f"v_ = {self.aw}{self.sleep_expr(s.num, s.value)}")
            self.w(f"log({who!r}, 'slept', norm(v_))")

    def do_interrupt(self, s: Step, who: str) -> None:
        with self.w.block(f"if PROCS[{s.target!r}].is_alive:"):
            self.w(f"PROCS[{s.target!r}].interrupt({s.value!r})")
            self.w(f"log({who!r}, 'interrupt', {s.target!r})")

    def do_join(self, s: Step, who: str) -> None:
        w = self.w
        with w.block("try:"):
            w(f"v_ = {self.aw}PROCS[{s.target!r}]")
        with w.block("except Boom as e_:"):
            w(f"log({who!r}, 'join-failed', ({s.target!r}, str(e_)))")
        with w.block("else:"):
            w(f"log({who!r}, 'joined', ({s.target!r}, norm(v_)))")

    def do_fire(self, s: Step, who: str) -> None:
        w, g = self.w, f"G[{s.target!r}]"
        if s.style == "trigger":
            src = f"G[{s.source!r}]"
            with w.block(f"if {src}.triggered and not {g}.triggered:"):
                w(f"{g}.trigger({src})")
                w(f"log({who!r}, 'fire', ({s.target!r}, 'trigger', {s.source!r}))")
            return
        with w.block(f"if not {g}.triggered:"):
            if s.style == "succeed":
                w(f"{g}.succeed({s.value!r})")
            else:
                w(f"{g}.fail(Boom({s.target!r}))")
                if s.style == "fail_defused":
                    w(f"{g}.defused = True")
            w(f"log({who!r}, 'fire', ({s.target!r}, {s.style!r}))")

    def do_wait(self, s: Step, who: str) -> None:
        w = self.w
        with w.block("try:"):
            w(f"v_ = {self.aw}G[{s.target!r}]")
        with w.block("except Boom as e_:"):
            w(f"log({who!r}, 'signal-failed', ({s.target!r}, str(e_)))")
        with w.block("else:"):
            w(f"log({who!r}, 'signal', ({s.target!r}, norm(v_)))")

    def do_sigstate(self, s: Step, who: str) -> None:
        g = f"G[{s.target!r}]"
        self.w(
            f"log({who!r}, 'sigstate', ({s.target!r}, {g}.triggered, {g}.processed, "
            f"{g}.ok if {g}.triggered else None))"
        )

    def do_start(self, s: Step, who: str) -> None:
        name = s.target
        if s.num:
            if self.kit:
                self.w(f"sim.start_delayed({name}(), {_num(s.num)}, name={name!r})")
            else:
                self.w(f"start_delayed(env, {name}(), {_num(s.num)})")
        elif self.kit:
            self.w(f"PROCS[{name!r}] = sim.start({name}(), name={name!r})")
        else:
            self.w(f"PROCS[{name!r}] = env.process({name}())")
        self.w(f"log({who!r}, 'started', {name!r})")

    def buffer_done(self, s: Step, who: str) -> str:
        t = s.target
        if s.kind in ("cget", "cput"):
            return f"log({who!r}, {s.kind[1:]!r}, ({t!r}, {_num(s.num)}, C[{t!r}].level))"
        if s.kind == "sget":
            return f"log({who!r}, 'get', ({t!r}, norm(v_), len(S[{t!r}].items)))"
        item = _item_literal(s.value)
        return f"log({who!r}, 'put', ({t!r}, {item!r}, len(S[{t!r}].items)))"

    def do_buffer(self, s: Step, who: str) -> None:
        w = self.w
        kind = "get" if s.kind in ("cget", "sget") else "put"
        owner = self.owner(s.kind, s.target)
        var = f"op{w.fresh()}"
        expr = self.buffer_expr(s.kind, s.target, s.num, s.value)
        amount = _num(s.num) if s.kind in ("cget", "cput") else "1"

        if self.kit:  # told to the tracker as it is made (before a with block enters)
            expr = f"reg({expr}, {kind!r}, {s.target!r}, {amount})"

        def body() -> None:
            block = s.style == "with"
            if s.patience is None:
                self.await_op(var, kind, owner, value=s.kind == "sget", block=block)
                w(self.buffer_done(s, who))
                return
            self.first_of(
                [(var, kind, owner), (self.sleep_expr(s.patience), None, None)], block=block
            )
            with w.block("if k_ == 0:"):
                w(self.buffer_done(s, who))
            with w.block("else:"):
                w(f"log({who!r}, 'renege', {s.target!r})")

        if s.style == "with":
            with w.block(f"with {expr} as {var}:"):
                body()
        else:
            w(f"{var} = {expr}")
            body()

    do_cget = do_cput = do_sget = do_sput = do_buffer

    def request_args(self, s: Step) -> str:
        kind = self.res_kind.get(s.target, "Resource")
        if kind == "Resource":
            return ""
        if kind == "PriorityResource":
            return f"priority={s.priority}"
        return f"priority={s.priority}, preempt={s.preempt}"

    def do_request(self, s: Step, who: str) -> None:
        w, r = self.w, s.target
        rx = f"R[{r!r}]"
        req = f"req{w.fresh()}"
        call = f"{rx}.request({self.request_args(s)})"
        if self.kit:  # told to the tracker as it is made (before a with block enters)
            call = f"reg({call}, 'req', {r!r}, 1, {s.priority}, {s.preempt})"
        if s.style == "async_with":
            if self.kit:
                with w.block(f"async with {call} as {req}:"):
                    self.held(s, who, req, rx, explicit=False)
            else:
                # async with: the await is the block's entry; interrupted there, the block
                # (and its exit) never runs -- the withdraw alone undoes the request.
                w(f"{req} = {call}")
                self.await_op(req, "req", rx, value=False)
                with w.block(f"with {req}:"):
                    self.held(s, who, req, rx, explicit=False)
            w(f"log({who!r}, 'left', {r!r})")
        elif s.style == "with":
            with w.block(f"with {call} as {req}:"):
                self.acquire(s, who, req, rx, explicit=False)
            w(f"log({who!r}, 'left', {r!r})")
        else:
            w(f"{req} = {call}")
            self.acquire(s, who, req, rx, explicit=True)

    def acquire(self, s: Step, who: str, req: str, rx: str, explicit: bool) -> None:
        w = self.w
        if s.patience is None:
            self.await_op(req, "req", rx, value=False, block=not explicit)
            self.held(s, who, req, rx, explicit)
            return
        entries = [(req, "req", rx), (self.sleep_expr(s.patience), None, None)]
        self.first_of(entries, block=not explicit)
        with w.block("if k_ == 0:"):
            self.held(s, who, req, rx, explicit)
        with w.block("else:"):
            w(f"log({who!r}, 'renege', {s.target!r})")

    def held(self, s: Step, who: str, req: str, rx: str, explicit: bool) -> None:
        w = self.w
        w(f"log({who!r}, 'granted', {s.target!r})")
        self.steps(s.body, who)
        if explicit:
            if self.kit and s.release == "req":
                w(f"{req}.release()")
            else:
                w(f"{rx}.release({req})")
            w(f"log({who!r}, 'released', {s.target!r})")

    def operand_expr(self, op: Operand) -> str:
        if op.kind == "sleep":
            return self.sleep_expr(op.num, op.value)
        if op.kind == "sig":
            return f"G[{op.target!r}]"
        if op.kind == "join":
            return f"PROCS[{op.target!r}]"
        return self.buffer_expr(op.kind, op.target, op.num, op.value)

    def do_cond(self, s: Step, who: str) -> None:
        w = self.w
        n = w.fresh()
        exprs: list[str] = []
        entries: list[tuple[str, str | None, str | None]] = []
        made: list[str] = []  # the operations made here (op_cancel cancels the losers)
        for i, op in enumerate(s.ops):
            if op.kind in ("sleep", "sig", "join"):
                exprs.append(self.operand_expr(op))
                entries.append((exprs[-1], None, None))
                continue
            var = f"o{n}_{i}"
            kind = "get" if op.kind in ("cget", "sget") else "put"
            if self.kit:
                amount = _num(op.num) if op.kind in ("cget", "cput") else "1"
                w(f"{var} = reg({self.operand_expr(op)}, {kind!r}, {op.target!r}, {amount})")
            else:
                w(f"{var} = {self.operand_expr(op)}")
            exprs.append(var)
            entries.append((var, kind, self.owner(op.kind, op.target)))
            made.append(var)
        shown = tuple(
            i for i, op in enumerate(s.ops) if op.kind in ("sleep", "sig", "join", "sget")
        )
        failed = f"log({who!r}, 'cond-failed', str(e_))"
        if s.style == "first_of":
            with w.block("try:"):
                self.first_of(entries)
            with w.block("except Boom as e_:"):
                w(failed)
            with w.block("else:"):
                w(f"log({who!r}, 'first', (k_, norm(v_) if k_ in {shown!r} else '-'))")
            return
        if s.style == "all_of":
            with w.block("try:"):
                if self.kit:
                    ops = f"ops{w.fresh()}"
                    w(f"{ops} = [{', '.join(exprs)}]")
                    with w.block("try:"):
                        w(f"vals = await sim.all_of(*{ops})")
                    with w.block("except BaseException:"):
                        w(f"ab(*{ops})")
                        w("raise")
                else:
                    parts = ", ".join(f"({e}, {k!r}, {o or 'None'})" for e, k, o in entries)
                    w(f"vals = yield from all_of([{parts}])")
            with w.block("except Boom as e_:"):
                w(failed)
            with w.block("else:"):
                w(
                    f"log({who!r}, 'all', tuple(norm(x) if j in {shown!r} else '-' "
                    "for j, x in enumerate(vals)))"
                )
            return
        ops = f"ops{w.fresh()}"
        w(f"{ops} = [{', '.join(exprs)}]")
        if s.style in ("or", "and"):
            sign = " | " if s.style == "or" else " & "
            cond = sign.join(f"{ops}[{i}]" for i in range(len(exprs)))
            cond = f"({cond})" if self.kit else cond
        elif self.kit:
            cond = f"sim.{s.style}(*{ops})"
        else:
            cond = f"simpy.{s.style}(env, {ops})"
        with w.block("try:"):
            w(f"cv = {self.aw}{cond}")
        with w.block("except Boom as e_:"):
            w(failed)
        with w.block("else:"):
            w(
                f"log({who!r}, 'cond', tuple((j, norm(cv[o]) if j in {shown!r} else '-') "
                f"for j, o in enumerate({ops}) if o in cv))"
            )
            if s.cancel and made:
                with w.block(f"for o in ({', '.join(made)},):"), w.block("if o not in cv:"):
                    w("o.cancel()")
                    if self.kit:
                        w("gone(o)")

    # ------------------------------------------------------------------ the program

    def proc(self, proc: Proc) -> None:
        w, name = self.w, proc.name
        header = f"async def {name}():" if self.kit else f"def {name}():"
        with w.block(header):
            if not self.kit:
                with w.block("if False:"):
                    w("yield  # a generator even if the model gives it nothing to wait for")
            w(f"log({name!r}, 'start')")
            if proc.catch_all:
                with w.block("try:"):
                    self.steps(proc.steps, name)
                with w.block(f"except {self.interrupt_exc} as i_:"):
                    w(f"log({name!r}, 'died', cause(i_.cause))")
                    w(f"return {name + ':int'!r}")
            else:
                self.steps(proc.steps, name)
            w(f"log({name!r}, 'end')")
            if proc.ending == "fail":
                w(f"raise Boom({name!r})")
            else:
                w(f"return {name + ':ok'!r}")
        w("")

    def main(self) -> None:
        w, m, kit = self.w, self.m, self.kit
        with w.block("async def main():" if kit else "def main():"):
            if not kit:
                with w.block("if False:"):
                    w("yield  # a generator even if main never waits")
            w("log('main', 'start')")
            lib, env = ("sim", "") if kit else ("simpy", "env, ")
            for name, kind, units in m.resources:
                w(f"R[{name!r}] = {lib}.{kind}({env}{units})")
            for name, cap, init in m.containers:
                w(f"C[{name!r}] = {lib}.Container({env}{_num(cap)}, {init})")
            for name, kind, room in m.stores:
                w(f"S[{name!r}] = {lib}.{kind}({env}{_num(room)})")
            for name in m.signals:
                w(f"G[{name!r}] = {'sim.Signal()' if kit else 'env.event()'}")
            for proc in m.procs:
                if kit:
                    w(f"PROCS[{proc.name!r}] = sim.start({proc.name}(), name={proc.name!r})")
                else:
                    w(f"PROCS[{proc.name!r}] = env.process({proc.name}())")
            self.steps(m.main, "main")
            if m.until[0] == "signal":
                w("DONE.succeed('fin')")
            w("log('main', 'end')")
            w("return 'main:ok'")
        w("")

    def run(self) -> None:
        w, kind, value = self.w, self.m.until[0], self.m.until[1]
        # how the run ended, comparable across the two: an Interrupt by its cause (a
        # Preempted cause's repr differs), anything else by its text
        said = f"cause(e.cause) if isinstance(e, {self.interrupt_exc}) else str(e)"
        until = {"none": "None", "number": _num(value or 0), "signal": "DONE"}.get(kind, "m")
        if not self.kit:
            with w.block("def run():"):
                w("global env, DONE")
                w("env = simpy.Environment()")
                if kind == "signal":
                    w("DONE = env.event()")
                w("m = env.process(main())")
                with w.block("try:"):
                    w(f"value = env.run(until={until})")
                    if kind in ("signal", "process"):
                        w("LOG.append(('run-value', norm(value)))")
                    w("LOG.append(('end', env.now))")
                with w.block("except Exception as e:"):
                    w(f"LOG.append(('raised', type(e).__name__, {said}))")
                w("return LOG")
        else:
            with w.block("def run(order='simpy', backend='asyncio', tracker=None):"):
                w("global DONE")
                w("TRACK[0] = tracker")
                w("env = sim.Simulation(order=order)")
                with w.block("if tracker is not None:"):
                    w("tracker.attach(env, R, C, S)")
                if kind == "signal":
                    w("DONE = sim.Signal()")
                if kind == "process":
                    with w.block("async def top():"), w.block("async with env:"):
                        w("m = env.start(main(), name='main')")
                        w("return await env.run(m)")
                with w.block("try:"):
                    if kind == "process":
                        w("value = virtualtime.anyio_run(top, backend=backend)")
                    else:
                        w(
                            f"value = env.simulate(main, until={until}, backend=backend, "
                            "end_when_idle=True)"
                        )
                    if kind in ("signal", "process"):
                        w("LOG.append(('run-value', norm(value)))")
                    w("LOG.append(('end', env.now))")
                with w.block("except Exception as e:"):
                    w(f"LOG.append(('raised', type(e).__name__, {said}))")
                w("return LOG")
        w("")
        w("")
        with w.block("if __name__ == '__main__':"):
            w("print(*run(), sep='\\n')")

    def source(self) -> str:
        prelude = _PRELUDE_KIT if self.kit else _PRELUDE_SIMPY
        self.w("")
        self.w("")
        for proc in self.m.procs + self.m.late:
            self.proc(proc)
            self.w("")
        self.main()
        self.w("")
        self.run()
        return prelude.format(seed=self.m.seed) + "\n".join(self.w.lines) + "\n"


def simpy_source(model: Model) -> str:
    """The model as a SimPy 4.1 program; ``run()`` returns its log."""
    return _Render(model, kit=False).source()


def kit_source(model: Model) -> str:
    """The model as a ``virtualtime.sim`` program; ``run(order, backend, tracker)`` returns
    its log."""
    return _Render(model, kit=True).source()


# --------------------------------------------------------------------------- running


class ModelTimeout(BaseException):
    """A program ran longer than its real-time limit (a hang in the kit, not in the model)."""


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`ModelTimeout` after ``seconds`` of real time (main thread only)."""
    if (
        not seconds
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
    ):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise ModelTimeout(f"still running after {seconds} s of real time")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _load(source: str, filename: str) -> dict[str, Any]:
    """Execute a program's source (its functions defined, nothing run); tracebacks show it."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "simpy_models_program"}
    exec(_compiled(source, filename), namespace)
    return namespace


@functools.lru_cache(maxsize=4)
def _compiled(source: str, filename: str) -> Any:
    return compile(source, filename, "exec")  # the kit program runs on each backend, in each order


@dataclass
class SimpyRun:
    """A SimPy program's log, and whether SimPy itself crashed (or the harness did)."""

    log: list[Any]
    crash: bool = False
    error: str | None = None


_SIMPY_CRASHES: Final = ("not allowed to interrupt itself", "cannot be interrupted")


def run_simpy(
    model: Model, *, transform: Callable[[str], str] | None = None, timeout: float | None = 20
) -> SimpyRun:
    """Run the model's SimPy program.  ``crash``: SimPy raised one of its own errors (a
    process preempting its own request, a preempted user that has ended) -- such a model
    says nothing about the kit.  ``error``: anything else unexpected (a harness bug)."""
    source = simpy_source(model)
    if transform is not None:
        source = transform(source)
    ns = _load(source, f"<simpy model {model.seed}>")
    refused: list[str] = []  # SimPy's own refusals, even when another failure ends the run
    interrupt = simpy.events.Process.interrupt

    def watched(self: Any, cause: Any = None) -> None:
        try:
            interrupt(self, cause)
        except RuntimeError as exc:
            refused.append(str(exc))
            raise

    simpy.events.Process.interrupt = watched  # type: ignore[method-assign]
    try:
        with _time_limit(timeout):
            log: list[Any] = ns["run"]()
    except ModelTimeout as exc:
        return SimpyRun(list(ns["LOG"]), error=f"timeout: {exc}")
    finally:
        simpy.events.Process.interrupt = interrupt  # type: ignore[method-assign]
    if any(text in said for said in refused for text in _SIMPY_CRASHES):
        return SimpyRun(log, crash=True)
    last = log[-1] if log else ()
    if last and last[0] == "raised" and last[1] not in ("Boom", "Interrupt"):
        if last[1] == "RuntimeError" and any(text in last[2] for text in _SIMPY_CRASHES):
            return SimpyRun(log, crash=True)
        return SimpyRun(log, error=f"SimPy program raised {last[1]}: {last[2]}")
    return SimpyRun(log)


@dataclass
class KitRun:
    """A kit program's log, the invariant violations its tracker saw, the warnings it drew,
    and an error if it did not return (a timeout, an exception escaping ``run``)."""

    order: str
    backend: str
    log: list[Any]
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    steps: int = 0  # how many times the simulation called the tracker's on_step

    def problems(self) -> list[str]:
        """Everything wrong with this run by itself (not counting a log that differs): the
        invariants it broke, the warnings it drew, and an error -- the run did not return,
        or it ended with an exception the model never raises (a missing API name, the
        kit's own error)."""
        found = [f"invariant: {v}" for v in self.violations]
        found += [f"warning: {w}" for w in self.warnings]
        if self.error is not None:
            found.append(f"error: {self.error}")
        last = self.log[-1] if self.log else ()
        if last and last[0] == "raised" and last[1] not in ("Boom", "Interrupt"):
            found.append(f"error: the run raised {last[1]}: {last[2]}")
        return found


def run_kit(
    model: Model,
    order: str = "simpy",
    backend: str = "asyncio",
    *,
    track: bool = True,
    transform: Callable[[str], str] | None = None,
    timeout: float | None = 20,
) -> KitRun:
    """Run the model's kit program with ``sim.simulate(..., order=, backend=,
    end_when_idle=True)``, with a :class:`Tracker` checking invariants (``track=False``:
    without)."""
    source = kit_source(model)
    if transform is not None:
        source = transform(source)
    ns = _load(source, f"<kit model {model.seed}>")
    tracker = Tracker(model) if track else None
    run = KitRun(order, backend, [])
    said = _Said()
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.addHandler(said)
    propagate, asyncio_logger.propagate = asyncio_logger.propagate, False  # ours to report
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _time_limit(timeout):
                run.log = ns["run"](order=order, backend=backend, tracker=tracker)
        except ModelTimeout as exc:
            run.log, run.error = list(ns["LOG"]), f"timeout: {exc}"
        except Exception as exc:  # escaped the program's own except: the kit's run machinery
            run.log, run.error = list(ns["LOG"]), f"{type(exc).__name__}: {exc}"
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            run.log, run.error = list(ns["LOG"]), f"{type(exc).__name__}: {exc}"
        # The program's functions stay (a coroutine closed later still needs their names);
        # its tables go, and with them the cycles through the processes' exceptions and
        # frames, so that what the run left behind is collected -- and warns -- here.
        for table in ("PROCS", "R", "C", "S", "G"):
            ns[table].clear()
        del ns
        if tracker is not None:
            tracker.release()
        gc.collect(1)  # coroutines never awaited, futures never retrieved: warn here
    asyncio_logger.removeHandler(said)
    asyncio_logger.propagate = propagate
    run.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    run.warnings += [f"asyncio logged: {text}" for text in said.messages]
    if tracker is not None:
        run.violations = tracker.violations
        run.steps = tracker.steps
    return run


class _Said(logging.Handler):
    """What asyncio logs during a kit run ("Future exception was never retrieved", ...)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# --------------------------------------------------------------------------- invariants


@dataclass
class _Rec:
    op: Any
    kind: str  # req, get, put
    owner: str
    amount: float
    priority: int
    preempt: bool
    seq: int
    withdrawn: bool = False
    cancelled: bool = False

    def __str__(self) -> str:
        extra = f" priority={self.priority} preempt={self.preempt}" if self.kind == "req" else ""
        return f"{self.kind}#{self.seq} on {self.owner} (amount {self.amount}{extra})"


def _triggered(op: Any) -> bool:
    return bool(getattr(op, "triggered", False))


def _amount(op: Any) -> float | None:
    """A put's amount (a give-back the kit queued itself): SimPy's name, or the kit's field."""
    for name in ("amount", "_item"):
        value = getattr(op, name, None)
        if isinstance(value, int | float):
            return value
    return None


class Tracker:
    """The kit's invariants, checked while a kit program runs.

    The program tells it which operations it made (``reg``), which the kit withdrew (``ab``)
    and which it cancelled (``gone``); :meth:`check` runs at every log call and, where the
    :class:`~virtualtime.sim.Simulation` has an ``_on_step`` attribute, after every event it
    processes.  It checks: a container's level in ``[0, capacity]``; a store's items at most
    its capacity; a resource's users at most its capacity; conservation -- a container's level
    (a store's item count) plus the give-backs still queued equals the initial level plus what
    completed puts added minus what completed gets took, gets the kit withdrew not counting
    (they give back) -- so an interrupted or withdrawn put or get leaves no trace; and the
    order of service: every queue keeps its documented order (FIFO; a priority resource by
    priority), and nothing is served while an operation ahead of it in its queue still waits
    (not checked for a FilterStore's gets, whose filters may skip).
    """

    def __init__(self, model: Model) -> None:
        self.inits = {n: init for n, _, init in model.containers}
        self.kinds = {n: k for n, k, _ in model.resources} | {n: k for n, k, _ in model.stores}
        self.recs: dict[int, _Rec] = {}
        self.by_owner: dict[str, list[_Rec]] = {}
        self.prev: dict[str, list[Any]] = {}
        self.violations: list[str] = []
        self.seen: set[str] = set()
        self.steps = 0
        self.checks = 0
        self.env: Any = None
        self.resources: dict[str, Any] = {}
        self.containers: dict[str, Any] = {}
        self.stores: dict[str, Any] = {}
        self.last_now = -math.inf

    def attach(self, env: Any, resources: Any, containers: Any, stores: Any) -> None:
        self.env = env
        self.resources, self.containers, self.stores = resources, containers, stores
        if hasattr(env, "_on_step"):
            env._on_step = self.on_step

    def release(self) -> None:
        """Let go of the run's objects (keep only what it found)."""
        self.env = None
        self.recs.clear()
        self.by_owner.clear()
        self.prev.clear()
        self.resources = self.containers = self.stores = {}

    def reg(
        self, op: Any, kind: str, owner: str, amount: float, priority: int, preempt: bool
    ) -> None:
        rec = _Rec(op, kind, owner, amount, priority, preempt, len(self.recs))
        self.recs[id(op)] = rec
        self.by_owner.setdefault(owner, []).append(rec)

    def mark(self, ops: Sequence[Any], *, withdrawn: bool) -> None:
        for op in ops:
            rec = self.recs.get(id(op))
            if rec is not None and rec.op is op:
                if withdrawn:
                    rec.withdrawn = True
                else:
                    rec.cancelled = True

    def on_step(self) -> None:
        self.steps += 1
        self.check()

    def fail(self, now: float, text: str) -> None:
        if text not in self.seen:  # each violation once, at the first time it was seen
            self.seen.add(text)
            self.violations.append(f"t={now}: {text}")

    def check(self) -> None:
        env = self.env
        # Once the run has ended (the kit sets _final) the kit cancels what is left: no
        # program code marks what that withdraws, so the checks stop there.
        if env is None or getattr(env, "_final", None) is not None or len(self.violations) > 20:
            return
        self.checks += 1
        now = env.now
        if now < self.last_now:
            self.fail(now, f"time went back from {self.last_now}")
        self.last_now = now
        for name, res in self.resources.items():
            if res.count > res.capacity or len(res.users) > res.capacity:
                self.fail(now, f"{name}: {res.count} users > capacity {res.capacity}")
            prio = self.kinds.get(name) != "Resource"
            by = _by_priority if prio else _by_seq
            self.queue(now, name, list(res.queue), by, list(res.users))
        for name, tank in self.containers.items():
            level = tank.level
            if not 0 <= level <= tank.capacity:
                self.fail(now, f"{name}: level {level} outside [0, {tank.capacity}]")
            self.ledger(now, name, level, tank.put_queue, self.inits.get(name, 0), True)
            self.queue(now, f"{name}.get", list(tank.get_queue), _by_seq)
            self.queue(now, f"{name}.put", list(tank.put_queue), _by_seq)
        for name, store in self.stores.items():
            count = len(store.items)
            if count > store.capacity:
                self.fail(now, f"{name}: {count} items > capacity {store.capacity}")
            self.ledger(now, name, count, store.put_queue, 0, False)
            if self.kinds.get(name) != "FilterStore":
                self.queue(now, f"{name}.get", list(store.get_queue), _by_seq)
            self.queue(now, f"{name}.put", list(store.put_queue), _by_seq)

    def ledger(
        self, now: float, name: str, size: float, put_queue: Any, init: float, amounts: bool
    ) -> None:
        recs = self.by_owner.get(name, ())
        put = sum(r.amount for r in recs if r.kind == "put" and _triggered(r.op))
        got = sum(
            r.amount for r in recs if r.kind == "get" and _triggered(r.op) and not r.withdrawn
        )
        queued = 0.0
        for op in put_queue:
            if id(op) in self.recs:
                continue
            amount = _amount(op) if amounts else 1
            if amount is None:
                return  # a give-back whose amount cannot be read: no check
            queued += amount
        if size + queued != init + put - got:
            self.fail(
                now,
                f"{name}: holds {size} (+{queued} given back, still queued), but {init} at "
                f"first + {put} put - {got} got = {init + put - got}",
            )

    def queue(
        self,
        now: float,
        key: str,
        ops: list[Any],
        in_order: Callable[[_Rec, _Rec], bool],
        users: Sequence[Any] = (),
    ) -> None:
        """Check one queue: its order, and that nothing was served past a waiting op.

        An op that left the queue since the last look was served if it completed (or, for a
        request, holds the resource); an op ahead of it that is still there must not wait.
        """
        regs = [self.recs[id(op)] for op in ops if id(op) in self.recs]
        for a, b in itertools.pairwise(regs):
            if not in_order(a, b):
                self.fail(now, f"{key}: queue holds {a} ahead of {b}")
        prev = self.prev.get(key)
        self.prev[key] = ops  # the objects themselves: alive, so their ids stay theirs
        if not prev:
            return
        present = {id(op) for op in ops}
        waiting = [id(op) in present for op in prev]
        for pos, op in enumerate(prev):
            rec = self.recs.get(id(op))
            if waiting[pos] or rec is None:
                continue
            if not (_triggered(op) or any(op is user for user in users)):
                continue  # left the queue unserved: withdrawn or cancelled (whenever the kit
                # does it: at the interrupt, or when the process resumes)
            ahead = [
                self.recs[id(p)]
                for p, w in zip(prev[:pos], waiting, strict=False)
                if w and id(p) in self.recs
            ]
            if ahead:
                self.fail(now, f"{key}: {rec} was served while {ahead[0]}, ahead of it, waits")


def _by_seq(a: _Rec, b: _Rec) -> bool:
    return a.seq < b.seq


def _by_priority(a: _Rec, b: _Rec) -> bool:
    """b may follow a: not more urgent, and not an earlier request of the same kind."""
    if b.priority != a.priority:
        return a.priority < b.priority
    return a.preempt != b.preempt or a.seq < b.seq


# --------------------------------------------------------------------------- comparing


def first_difference(left: Sequence[Any], right: Sequence[Any]) -> int | None:
    """The index of the first entry where two logs differ (or where the shorter ends)."""
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return index
    if len(left) != len(right):
        return min(len(left), len(right))
    return None


@dataclass
class Verdict:
    """What one model did: SimPy's log (or its crash), and each kit run."""

    model: Model
    order: str
    simpy: SimpyRun | None
    kit: dict[str, KitRun]

    @property
    def simpy_crash(self) -> bool:
        return self.simpy is not None and self.simpy.crash

    def mismatch(self, backend: str) -> int | None:
        """Where the kit's log on ``backend`` first differs from SimPy's (order="simpy")."""
        if self.simpy is None or self.simpy.crash or self.order != "simpy":
            return None
        return first_difference(self.simpy.log, self.kit[backend].log)

    def backends_differ(self) -> int | None:
        """Where the asyncio and trio logs first differ (None if they agree, or one is
        missing)."""
        if "asyncio" not in self.kit or "trio" not in self.kit:
            return None
        return first_difference(self.kit["asyncio"].log, self.kit["trio"].log)

    def failures(self, *, backends_must_agree: bool = True) -> list[tuple[str, str, str]]:
        """``(kind, backend, text)`` for everything wrong: ``log`` (differs from SimPy),
        ``backends`` (asyncio and trio differ), ``invariant``, ``warning``, ``error``."""
        if self.simpy_crash:
            return []
        found: list[tuple[str, str, str]] = []
        if self.simpy is not None and self.simpy.error is not None:
            found.append(("error", "simpy", self.simpy.error))
        for backend, run in self.kit.items():
            at = self.mismatch(backend)
            if at is not None:
                found.append(("log", backend, f"differs from SimPy at entry {at}"))
            for problem in run.problems():
                kind, _, text = problem.partition(": ")
                found.append((kind, backend, text))
        at = self.backends_differ()
        if at is not None and backends_must_agree:
            found.append(("backends", "", f"asyncio and trio logs differ at entry {at}"))
        return found


def evaluate(
    model: Model,
    order: str = "simpy",
    backends: Sequence[str] = ("asyncio", "trio"),
    *,
    track: bool = True,
    timeout: float | None = 20,
) -> Verdict:
    """Run the model on SimPy (in ``order="simpy"``) and on the kit on each backend."""
    simpy_run = run_simpy(model, timeout=timeout) if order == "simpy" else None
    kit: dict[str, KitRun] = {}
    if simpy_run is None or not simpy_run.crash:
        for backend in backends:
            kit[backend] = run_kit(model, order, backend, track=track, timeout=timeout)
    return Verdict(model, order, simpy_run, kit)


# --------------------------------------------------------------------------- shrinking


def _refers(step: Step, name: str) -> bool:
    if step.kind in ("interrupt", "join", "start") and step.target == name:
        return True
    return step.kind == "fire" and step.source == name


def _forget(model: Model, name: str) -> None:
    """Drop every step (and condition operand) that refers to process or signal ``name``."""
    for steps in step_lists(model):
        for step in steps:
            step.ops = [op for op in step.ops if op.target != name]
        steps[:] = [
            s for s in steps if not _refers(s, name) and not (s.kind == "cond" and not s.ops)
        ]


def prune(model: Model) -> Model:
    """Drop what nothing uses: entities no step names, late processes main never starts."""
    used: set[str] = set()
    for steps in step_lists(model):
        for s in steps:
            used.update({s.target, s.source} | {op.target for op in s.ops})
    started = {s.target for s in model.main if s.kind == "start"}
    model.late = [p for p in model.late if p.name in started]
    model.resources = [r for r in model.resources if r[0] in used]
    model.containers = [c for c in model.containers if c[0] in used]
    model.stores = [s for s in model.stores if s[0] in used]
    model.signals = [g for g in model.signals if g in used]
    return model


def _simpler_steps(step: Step) -> Iterator[Step]:
    """Each way to make one step simpler, one change at a time."""
    r = dataclasses.replace
    if step.catch:
        yield r(step, catch=False)
    if step.patience is not None:
        yield r(step, patience=None)
    if step.kind == "request" and step.style != "with":
        yield r(step, style="with", release="req")
    if step.kind in ("cget", "cput", "sget", "sput") and step.style == "with":
        yield r(step, style="plain")
    if step.kind == "cond" and step.style != "first_of":
        yield r(step, style="first_of", cancel=False)
    if step.kind == "fire" and step.style != "succeed":
        yield r(step, style="succeed", source="")
    if step.kind == "sleep" and step.value is not None:
        yield r(step, value=None)
    if step.kind in ("sleep", "cget", "cput") and step.num not in (0, 1):
        yield r(step, num=1)
    if step.kind == "sleep" and step.num != 0:
        yield r(step, num=0)
    if step.kind == "start" and step.num:
        yield r(step, num=0)
    if step.priority:
        yield r(step, priority=0)
    if not step.preempt:
        yield r(step, preempt=True)
    if step.release != "req":
        yield r(step, release="req")
    if step.cancel:
        yield r(step, cancel=False)
    if step.kind == "sget" and step.value is not None:
        yield r(step, value=None)
    if len(step.ops) > 1:
        for i in range(len(step.ops)):
            yield r(step, ops=step.ops[:i] + step.ops[i + 1 :])
    for i, op in enumerate(step.ops):
        if op.kind == "sleep" and (op.num not in (0, 1) or op.value is not None):
            simpler = dataclasses.replace(op, num=min(op.num, 1), value=None)
            yield r(step, ops=[*step.ops[:i], simpler, *step.ops[i + 1 :]])
    if step.body:
        yield r(step, body=[])


def _candidates(model: Model) -> Iterator[Model]:
    """Simpler models than ``model``, the biggest cuts first."""
    deep = copy.deepcopy
    if model.until[0] != "none":
        yield dataclasses.replace(deep(model), until=("none", None))
    for group in ("procs", "late"):
        for i in reversed(range(len(getattr(model, group)))):
            cand = deep(model)
            gone_proc = getattr(cand, group).pop(i)
            _forget(cand, gone_proc.name)
            yield cand
    lists = step_lists(model)
    for li, steps in enumerate(lists):
        for si in reversed(range(len(steps))):
            cand = deep(model)
            target = step_lists(cand)[li]
            removed = target.pop(si)
            yield cand
            if removed.body:
                cand = deep(model)
                target = step_lists(cand)[li]
                target[si : si + 1] = target[si].body
                yield cand
    for proc_index, proc in enumerate(model.procs + model.late):
        if proc.ending != "return" or not proc.catch_all:
            cand = deep(model)
            mine = (cand.procs + cand.late)[proc_index]
            if mine.ending != "return":
                mine.ending = "return"
            else:
                mine.catch_all = True
            yield cand
    for li, steps in enumerate(lists):
        for si, step in enumerate(steps):
            for simpler in _simpler_steps(step):
                cand = deep(model)
                step_lists(cand)[li][si] = simpler
                yield cand
    for i, (name, kind, units) in enumerate(model.resources):
        simpler_resources = [(name, "Resource", units)] if kind != "Resource" else []
        simpler_resources += [(name, kind, 1)] if units != 1 else []
        for resource in simpler_resources:
            cand = deep(model)
            cand.resources[i] = resource
            yield cand
    for i, (name, cap, init) in enumerate(model.containers):
        if init:
            cand = deep(model)
            cand.containers[i] = (name, cap, 0)
            yield cand
    for i, (name, kind, room) in enumerate(model.stores):
        if kind == "FilterStore":  # (a PriorityStore's items may not suit a Store's order)
            cand = deep(model)
            cand.stores[i] = (name, "Store", room)
            yield cand
        if room != math.inf:
            cand = deep(model)
            cand.stores[i] = (name, kind, math.inf)
            yield cand


def shrink(
    model: Model,
    fails: Callable[[Model], bool],
    *,
    budget: int = 400,
    seconds: float = 60.0,
) -> Model:
    """The smallest model found (greedily) on which ``fails`` still holds.

    Tries the candidates of :func:`_candidates` (drop a process, a step, a feature; smaller
    numbers) and keeps the first that still fails, until none does or ``budget`` tries or
    ``seconds`` of real time are spent.  ``fails(model)`` should hold for ``model`` itself.
    """
    current = prune(copy.deepcopy(model))
    tries = 0
    deadline = time.monotonic() + seconds
    progress = True
    while progress:
        progress = False
        for cand in _candidates(current):
            if tries >= budget or time.monotonic() > deadline:
                return current
            tries += 1
            prune(cand)
            if fails(cand):
                current = cand
                progress = True
                break
    return current


def failing(kind: str, backend: str, order: str = "simpy") -> Callable[[Model], bool]:
    """A predicate for :func:`shrink`: does a model still fail this way?

    ``kind``: ``log`` (the kit's log on ``backend`` differs from SimPy's), ``backends``
    (asyncio's and trio's logs differ), ``invariant``, ``warning`` or ``error`` (on
    ``backend``).  A model SimPy crashes on never counts.
    """

    def fails(model: Model) -> bool:
        if order == "simpy" or kind == "log":
            reference = run_simpy(model, timeout=10)
            if reference.crash or reference.error is not None:
                return False
        if kind == "log":
            run = run_kit(model, order, backend, track=False, timeout=10)
            return run.error is not None or first_difference(reference.log, run.log) is not None
        if kind == "backends":
            one = run_kit(model, order, "asyncio", track=False, timeout=10)
            two = run_kit(model, order, "trio", track=False, timeout=10)
            return first_difference(one.log, two.log) is not None
        run = run_kit(model, order, backend, timeout=10)
        return any(problem.partition(": ")[0] == kind for problem in run.problems())

    return fails


# --------------------------------------------------------------------------- reporting


def _entry(log: Sequence[Any], index: int) -> str:
    return repr(log[index]) if index < len(log) else "(log ended)"


def format_logs(
    left: Sequence[Any], right: Sequence[Any], names: tuple[str, str], *, after: int = 12
) -> str:
    """Two logs, entry by entry: equal entries once, the first difference marked ``>>``."""
    at = first_difference(left, right)
    lines = [f"--- logs: {names[0]} | {names[1]}; first difference: entry {at} ---"]
    width = max(len(n) for n in names)
    end = max(len(left), len(right)) if at is None else min(max(len(left), len(right)), at + after)
    for i in range(end):
        a, b = _entry(left, i), _entry(right, i)
        mark = ">>" if i == at else "  "
        if i < len(left) and i < len(right) and left[i] == right[i]:
            lines.append(f"{mark}{i:4}  {'':{width}}  {a}")
        else:
            lines.append(f"{mark}{i:4}  {names[0]:{width}}  {a}")
            lines.append(f"{'':2}{'':4}  {names[1]:{width}}  {b}")
    if end < max(len(left), len(right)):
        lines.append(f"      ... ({len(left)} and {len(right)} entries in all)")
    return "\n".join(lines)


def format_pair(
    model: Model, left: Sequence[Any], right: Sequence[Any], names: tuple[str, str], title: str
) -> str:
    """Both programs of ``model`` and two of its logs, the first difference marked."""
    procs, steps = model.size()
    return "\n".join(
        [
            f"=== {title} ({procs} processes, {steps} steps)",
            "--- SimPy program ---",
            simpy_source(model).rstrip(),
            "--- kit program ---",
            kit_source(model).rstrip(),
            format_logs(left, right, names),
        ]
    )


def _generic(text: str) -> str:
    """``text`` with numbers and process names made generic (for grouping)."""
    return re.sub(r"\d+(\.\d+)?", "#", text)


def _action(entry: Any) -> str:
    if not isinstance(entry, tuple):
        return "(nothing)"
    if len(entry) == 4:
        return str(entry[2])
    if entry[0] == "raised":
        return f"raised {entry[1]}"
    return str(entry[0])


def signature(model: Model, left: Sequence[Any], right: Sequence[Any]) -> str:
    """A short name for a divergence: the step kinds of its (shrunk) model and the two
    actions where the logs part."""
    kinds = sorted(
        {f"{s.kind}/{s.style}" if s.style else s.kind for steps in step_lists(model) for s in steps}
    )
    at = first_difference(left, right)
    if at is None:
        return f"{'+'.join(kinds)}: same logs"
    a = _action(left[at]) if at < len(left) else "(end of log)"
    b = _action(right[at]) if at < len(right) else "(end of log)"
    if a == b:  # the same action at different times, or with different details
        a, b = (_generic(_entry(log, at))[:60] for log in (left, right))
    return f"{'+'.join(kinds) or 'main only'}: {a} vs {b}"


def explain(
    verdict: Verdict,
    kind: str,
    backend: str,
    *,
    shrink_it: bool = True,
    budget: int = 300,
    seconds: float = 30.0,
) -> tuple[str, str]:
    """``(signature, text)`` for one failure of ``verdict``: the (shrunk) pair of programs
    and the two logs that differ, or the violations the kit run reported."""
    model = verdict.model
    if shrink_it:
        model = shrink(model, failing(kind, backend, verdict.order), budget=budget, seconds=seconds)
    order = verdict.order
    if kind == "backends":
        left = run_kit(model, order, "asyncio", track=False).log
        right = run_kit(model, order, "trio", track=False).log
        names = ("asyncio", "trio")
    elif kind == "log":
        left = run_simpy(model).log
        right = run_kit(model, order, backend, track=False).log
        names = ("SimPy", f"kit {backend}")
    else:
        run = run_kit(model, order, backend)
        left = right = run.log
        names = (f"kit {backend}", f"kit {backend}")
        extra = "\n".join(run.problems()[:10])
        title = f"model {model.seed}: {kind} on {backend}, order={order!r}\n{extra}"
        first = extra.splitlines()[0].partition(": ")[2] if extra else "?"
        return f"{kind} {backend}: {_generic(first)[:100]}", format_pair(
            model, left, right, names, title
        )
    title = f"model {model.seed}: {kind} on {backend or 'both'}, order={order!r}"
    return f"{kind}: {signature(model, left, right)}", format_pair(model, left, right, names, title)


SHRINK_SECONDS: Final = 5.0
SHRUNK_CHUNKS: Final = 3
"""Failing chunks (per kind of test) whose first failure a test shrinks; later ones show it
unshrunk."""

_shrunk: dict[str, int] = {}


def chunk_report(verdicts: list[Verdict], test: str, *, backends_must_agree: bool = True) -> str:
    """For a test's chunk of models: every failing seed, and the first failure as a pair of
    programs (shrunk to a minimal one in the first few failing chunks); "" if none failed."""
    lines: list[str] = []
    first: tuple[Verdict, str, str] | None = None
    for verdict in verdicts:
        for kind, backend, text in verdict.failures(backends_must_agree=backends_must_agree):
            lines.append(f"seed {verdict.model.seed}: {kind} {backend}: {text}")
            if first is None:
                first = (verdict, kind, backend)
    if first is None:
        return ""
    verdict, kind, backend = first
    _shrunk[test] = done = _shrunk.get(test, 0) + 1
    shrink_it = done <= SHRUNK_CHUNKS
    _, pair = explain(verdict, kind, backend, shrink_it=shrink_it, seconds=SHRINK_SECONDS)
    note = "shrunk" if shrink_it else "not shrunk (bench/simpy_campaign.py --shrink does it)"
    header = f"{len(lines)} failures in order={verdict.order!r}; the first, {note}:"
    return "\n".join([header, *lines[:40], "", pair])
