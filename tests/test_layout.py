"""The parts of virtualtime, and which part may import which (checked by an AST walk).

Every module of the package belongs to one part (PACKAGES and MODULES below), and a part may
import only the parts ALLOWED lists for it.  The table is the architecture written down: read
it to see where a module belongs, and change it (deliberately, in review) when the design
changes -- a new module that belongs to no part fails here until somebody places it.

What counts as an import: every ``import`` and ``from ... import`` that can run, at module
level or inside a function (a lazy import is still a dependency, only a later one).  Imports
under ``if TYPE_CHECKING:`` are left out: they never run, so they create no dependency and no
cycle; they only let annotations name another part's types.

The rule in words (lower parts never import higher ones):

* ``shared`` -- time arithmetic (ticks), durations for people, the error family, the version,
  the process's other threads (for both backends' outside work).  Imports nothing of ours:
  everything may use it.
* ``clocks`` -- the clocks outside the loop (``patch_time``: ``time.monotonic()``,
  ``time.time()``, ``datetime.now()``; the in-place C hooks).  Serves the asyncio engine and
  trio alike, so it imports neither.
* ``options`` -- the options catalogue (``LoopOptions``, ``configure``): every entry point of
  the engine and of trio builds one.  It checks ``wall_start`` with the clocks' own rule.
* ``engine`` -- the virtual event loop on asyncio, its timers, outside work, the runner, the
  policy and the driving verbs.  Uses ``clocks`` for ``patch_time``.
* ``trio`` -- the trio clock.  A sibling of the engine, never importing it.
* ``trace`` -- traces and timelines.  Reads the engine's history records.
* ``api`` -- the front doors: the package's ``__init__`` (the curated names) and ``anyio_run``
  (which picks the engine or trio).
* ``sim``, ``testing`` (the pytest plugin), ``experiment`` -- built on the parts above.
* ``cli`` -- the command line, on top of everything (it runs experiments and draws traces).
"""

from __future__ import annotations

import ast
import functools
import graphlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "virtualtime"

# A package and everything under it belongs to the part.
PACKAGES: dict[str, str] = {
    "virtualtime._shared": "shared",
    "virtualtime._clocks": "clocks",
    "virtualtime._engine": "engine",
    "virtualtime.trio": "trio",
    "virtualtime.trace": "trace",
    "virtualtime.sim": "sim",
    "virtualtime.pytest_plugin": "testing",
    "virtualtime.experiment": "experiment",
    "virtualtime.cli": "cli",
}

# Single modules (exact names).
MODULES: dict[str, str] = {
    "virtualtime": "api",
    "virtualtime._anyio": "api",
    "virtualtime.__main__": "cli",
    "virtualtime._version": "shared",
    "virtualtime._shared._time": "shared",
    "virtualtime._shared._units": "shared",
    "virtualtime._shared._errors": "shared",
    "virtualtime._options": "options",
    "virtualtime._clocks._patch": "clocks",
    "virtualtime._clocks._hook": "clocks",
    "virtualtime._clocks._cclocks": "clocks",
    "virtualtime._engine._loop": "engine",
    "virtualtime._engine._timers": "engine",
    "virtualtime._engine._cwake": "engine",
    "virtualtime._engine._outside": "engine",
    "virtualtime._engine._runner": "engine",
    "virtualtime._engine._policy": "engine",
    "virtualtime._engine._control": "engine",
}

ALLOWED: dict[str, set[str]] = {
    "shared": set(),
    "clocks": {"shared"},
    "options": {"shared", "clocks"},
    "engine": {"shared", "clocks", "options"},
    "trio": {"shared", "clocks", "options"},
    "trace": {"shared", "engine"},
    "api": {"shared", "clocks", "options", "engine", "trio", "trace"},
    "sim": {"shared", "engine", "trace", "api"},
    "testing": {"shared", "clocks", "options", "engine", "trio", "api"},
    "experiment": {"shared", "options", "engine", "trio", "trace", "api", "sim"},
    "cli": {"shared", "clocks", "options", "engine", "trio", "trace", "api", "sim", "experiment"},
}


def part_of(module: str) -> str | None:
    if module in MODULES:
        return MODULES[module]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        part = PACKAGES.get(".".join(parts[:n]))
        if part is not None:
            return part
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def our_modules() -> dict[str, Path]:
    found = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}
    # Compiled helpers are modules too (their source is C; the stub says what they export).
    found.update({module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.c"))})
    return found


def runtime_imports(path: Path, module: str) -> tuple[tuple[int, str], ...]:
    """(line, imported module of ours) for every import that can run, lazy ones included."""
    return tuple((line, target) for line, target, _lazy in _imports(path, module))


def eager_imports(path: Path, module: str) -> set[str]:
    """The modules of ours that ``module`` imports while it is being imported itself."""
    return {target for _line, target, lazy in _imports(path, module) if not lazy}


@functools.cache
def _imports(path: Path, module: str) -> tuple[tuple[int, str, bool], ...]:
    return tuple(_walk(path, module))


def _walk(path: Path, module: str) -> Iterator[tuple[int, str, bool]]:
    """(line, imported module of ours, inside a function?) for every import that can run."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    known = set(our_modules())

    def visit(node: ast.AST, lazy: bool) -> Iterator[tuple[int, str, bool]]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (item for child in node.orelse for item in visit(child, lazy))
            return
        lazy = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "virtualtime":
                    yield node.lineno, alias.name, lazy
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "virtualtime":
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    # `from . import trio` imports a module; `from ._loop import X` a name.
                    yield node.lineno, sub if sub in known else target, lazy
        for child in ast.iter_child_nodes(node):
            yield from visit(child, lazy)

    yield from visit(tree, False)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def test_the_table_is_a_hierarchy() -> None:
    # Acyclic (a static order exists), and it names only parts that exist.
    assert set(ALLOWED) == set(PACKAGES.values()) | set(MODULES.values())
    assert all(allowed <= set(ALLOWED) for allowed in ALLOWED.values())
    order = list(graphlib.TopologicalSorter(ALLOWED).static_order())
    assert order[0] == "shared"
    assert order[-1] == "cli"


def test_every_module_belongs_to_a_part() -> None:
    homeless = sorted(m for m in our_modules() if part_of(m) is None)
    assert homeless == [], f"place these in a part of tests/test_layout.py: {homeless}"


def test_every_part_has_a_module() -> None:
    # Parts that other branches add (experiment, the cli package) may be absent; the rest not.
    present = {part_of(m) for m in our_modules()}
    assert set(ALLOWED) - present <= {"experiment"}


def violations() -> list[str]:
    found = []
    for module, path in our_modules().items():
        if path.suffix != ".py":
            continue
        source = part_of(module)
        assert source is not None
        for line, target in runtime_imports(path, module):
            destination = part_of(target)
            if destination is None:
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {target}, in no part")
            elif destination != source and destination not in ALLOWED[source]:
                found.append(
                    f"{path.relative_to(ROOT)}:{line}: {source} imports {destination} "
                    f"({target}); allowed: {sorted(ALLOWED[source]) or 'nothing'}"
                )
    return found


def test_parts_import_only_the_parts_below_them() -> None:
    assert violations() == []


def test_no_import_cycle_at_import_time() -> None:
    # Between parts the table already rules out cycles, lazy ones included (the old
    # _loop <-> _patch pair).  Inside a part, no two modules may import each other while they
    # are being imported, so no import order can leave a module half-initialised.
    graph: dict[str, set[str]] = {}
    modules = our_modules()
    for module, path in modules.items():
        if path.suffix == ".py":
            graph[module] = {t for t in eager_imports(path, module) if t != module}
    # Importing one's own ancestor package (``from .. import __version__``) is no cycle of
    # code: a package is always initialised before its modules.
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


def test_the_walk_sees_a_forbidden_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check can fail: a clocks module importing the engine (the cycle this layout broke).
    clocks = next(m for m in our_modules() if part_of(m) == "clocks" and m.count(".") >= 1)
    engine = next(m for m in sorted(our_modules()) if part_of(m) == "engine" and "loop" in m)
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        f"    import {engine}\n"  # type-only: allowed
        "def later():\n"
        f"    import {engine}\n",  # lazy, but it runs: counted
        encoding="utf-8",
    )
    imports = list(runtime_imports(fake, clocks))
    assert imports == [(5, engine)]
    assert eager_imports(fake, clocks) == set()
    assert part_of(imports[0][1]) not in ALLOWED[part_of(clocks) or ""]
