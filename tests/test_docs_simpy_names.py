"""docs/coming-from-simpy.md maps every public name of SimPy: its "Every SimPy name" section
names each class, function and constant SimPy's modules define, and each public attribute of
``Environment``, ``Event``, ``Process`` and ``RealtimeEnvironment``."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import simpy

DOC = Path(__file__).parent.parent / "docs" / "coming-from-simpy.md"
MODULES = (
    "simpy",
    "simpy.core",
    "simpy.events",
    "simpy.exceptions",
    "simpy.resources.base",
    "simpy.resources.resource",
    "simpy.resources.container",
    "simpy.resources.store",
    "simpy.rt",
    "simpy.util",
)
CLASSES = (simpy.Environment, simpy.Event, simpy.Process, simpy.rt.RealtimeEnvironment)


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Every SimPy name")
    return text[start : text.index("\n## ", start + 1)]


def _a_constant(name: str, value: object) -> bool:
    """A module's public constant (not a type variable, a flag or a module)."""
    if not name.isupper() or len(name) == 1 or isinstance(value, bool | type):
        return False
    return not inspect.ismodule(value) and "TypeVar" not in type(value).__name__


def simpy_names() -> set[str]:
    names: set[str] = set(simpy.__all__)
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if name.startswith("_"):
                continue
            defined_here = getattr(value, "__module__", None) == module_name
            if (inspect.isclass(value) or inspect.isfunction(value)) and defined_here:
                names.add(name)
            elif _a_constant(name, value):
                names.add(name)  # PENDING, URGENT, NORMAL
    for cls in CLASSES:
        names.update(n for n in vars(cls) if not n.startswith("_"))
    return names


def test_every_public_simpy_name_is_mapped() -> None:
    section = _section()
    mentioned = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", section))
    missing = sorted(simpy_names() - mentioned)
    assert missing == []


def test_the_check_sees_a_name_that_is_missing() -> None:
    assert "Environment" in simpy_names()
    assert "subscribe_at" in simpy_names()
    assert "strict" in simpy_names()  # RealtimeEnvironment.strict
    assert "trigger" in simpy_names()  # Event.trigger
    assert "no_such_name" not in set(re.findall(r"[A-Za-z_]+", _section()))
