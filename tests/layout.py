"""The parts of virtualtime, which part may import which, and the map of the package.

This is the architecture written down.  Every module of the package belongs to one part
(:data:`PARTS`, by the longest matching name), and a part may import only the parts its entry
lists -- the parts below it.  ``tests/test_layout.py`` checks the code against this table by
walking every import; ``docs/design.md`` shows the map this module draws from the table and
from the modules' own docstrings.  Change the table deliberately, in review, when the design
changes; then run::

    .venv/bin/python tests/layout.py --write

which redraws the map in ``docs/design.md`` and rewrites the last paragraph of every module's
docstring (``Part of ...: may import ...``) to match the table.  The test fails until the two
agree, so the page and the docstrings cannot drift from the code.

What counts as an import: every ``import`` and ``from ... import`` that can run, at module
level or inside a function (a lazy import is still a dependency, only a later one), and a
string naming one of our modules (``sys.modules.get("virtualtime.trio")`` reaches that module as
surely as an import does).  Imports under ``if TYPE_CHECKING:`` never run: they let annotations
name another part's types and create no dependency.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import graphlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "virtualtime"
DESIGN_PAGE = ROOT / "docs" / "design.md"

MAX_LINES = 800
"""A module longer than this says, in a docstring paragraph starting ``One room:``, why."""

ONE_ROOM = "One room:"


@dataclasses.dataclass(frozen=True)
class Part:
    """One layer of the package: where it lives, what it holds, what it may import."""

    name: str
    modules: tuple[str, ...]  # packages (with everything under them) or single modules
    holds: str
    imports: tuple[str, ...]


PARTS: tuple[Part, ...] = (
    Part(
        "shared",
        ("virtualtime._shared", "virtualtime._version"),
        "time in ticks, durations for people, the error family, the version; what the "
        "machine says about threads, processes and connections (both backends' outside "
        "work); the registry through which another backend's clock answers the verbs",
        (),
    ),
    Part(
        "clocks",
        ("virtualtime._clocks",),
        "the clocks outside the loop: patch_time (time.monotonic, time.time, "
        "datetime.now) and its in-place C hooks, for either backend",
        ("shared",),
    ),
    Part(
        "options",
        ("virtualtime._options",),
        "the options catalogue (LoopOptions, configure) every entry point builds",
        ("shared", "clocks"),
    ),
    Part(
        "engine",
        ("virtualtime._engine",),
        "the virtual event loop on asyncio: timers, outside work, the runner, the policy, "
        "the driving verbs; it does not know another backend exists",
        ("shared", "clocks", "options"),
    ),
    Part(
        "trio",
        ("virtualtime.trio",),
        "the trio clock and virtualtime.trio.run; a sibling of the engine, never importing it",
        ("shared", "clocks", "options"),
    ),
    Part(
        "trace",
        ("virtualtime.trace",),
        "recorded spans, Chrome traces, timelines; reads the engine's history records",
        ("shared", "engine"),
    ),
    Part(
        "net",
        ("virtualtime.net",),
        "deterministic simulation testing: simulated hosts, links and faults behind the "
        "loop's network seam, per-host clocks, seeded exploration, shrinking and replay",
        ("shared", "clocks", "options", "engine", "trace"),
    ),
    Part(
        "api",
        ("virtualtime", "virtualtime._anyio"),
        "the front door: the curated names, and anyio_run (which picks a backend)",
        ("shared", "clocks", "options", "engine", "trio", "trace", "net"),
    ),
    Part(
        "sim",
        ("virtualtime.sim",),
        "the simulation kit: processes, resources, stores, timers, clocks, vehicles",
        ("shared", "engine", "trace", "api"),
    ),
    Part(
        "testing",
        ("virtualtime.pytest_plugin",),
        "the pytest plugin: the marker, the fixture, the loop factories, the horizon watch",
        ("shared", "clocks", "options", "engine", "trio", "api", "net"),
    ),
    Part(
        "experiment",
        ("virtualtime.experiment",),
        "replications and sweeps, their executors, results and plots",
        ("shared", "options", "engine", "trio", "trace", "api", "sim"),
    ),
    Part(
        "cli",
        ("virtualtime.cli", "virtualtime.__main__"),
        "the command line: virtualtime run, trace, experiment",
        (
            "shared",
            "clocks",
            "options",
            "engine",
            "trio",
            "trace",
            "net",
            "api",
            "sim",
            "experiment",
        ),
    ),
)

ALLOWED: dict[str, set[str]] = {part.name: set(part.imports) for part in PARTS}
_PART_BY_NAME: dict[str, Part] = {part.name: part for part in PARTS}
_OWNER: dict[str, str] = {module: part.name for part in PARTS for module in part.modules}


def part_of(module: str) -> str | None:
    """The part a module belongs to: that of its longest listed ancestor (or itself)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        owner = _OWNER.get(".".join(parts[:n]))
        if owner is not None:
            return owner
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def our_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name: the ``.py`` files and the C sources."""
    found = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}
    # Compiled helpers are modules too (their source is C; the stub says what they export).
    found.update({module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.c"))})
    return found


# ------------------------------------------------------------------------------- imports


def runtime_imports(path: Path, module: str) -> tuple[tuple[int, str], ...]:
    """(line, module of ours) for every import that can run, lazy ones and names included."""
    return tuple((line, target) for line, target, _lazy in _imports(path, module))


def eager_imports(path: Path, module: str) -> set[str]:
    """The modules of ours that ``module`` imports while it is being imported itself."""
    return {target for _line, target, lazy in _imports(path, module) if not lazy}


@functools.cache
def _imports(path: Path, module: str) -> tuple[tuple[int, str, bool], ...]:
    return tuple(_walk(path, module))


def _walk(path: Path, module: str) -> Iterator[tuple[int, str, bool]]:
    """(line, module of ours, inside a function?) for every dependency that can run."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    known = set(our_modules())
    docstrings = _docstring_nodes(tree)

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
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in known
            and node.value not in (module, "virtualtime")  # the package's name: a prefix
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value, True  # looked up by name: a dependency all the same
        for child in ast.iter_child_nodes(node):
            yield from visit(child, lazy)

    yield from visit(tree, False)


def _docstring_nodes(tree: ast.Module) -> set[int]:
    """The ids of the string constants that are docstrings (prose, not lookups)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(lazy: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (all of them, or only at import time)."""
    graph: dict[str, set[str]] = {}
    for module, path in our_modules().items():
        if path.suffix != ".py":
            continue
        if lazy:
            targets = {target for _line, target in runtime_imports(path, module)}
        else:
            targets = eager_imports(path, module)
        graph[module] = targets - {module}
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None.

    A module importing its own package's face is a circle as soon as that face imports the
    module back, lazily or not: which of the two runs first decides what the other sees.
    """
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return list(reversed(error.args[1]))
    return None


def violations() -> list[str]:
    """Every import of a part its part may not import (an arrow reaching up or sideways)."""
    found = []
    for module, path in our_modules().items():
        if path.suffix != ".py":
            continue
        source = part_of(module)
        assert source is not None, module
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


# ---------------------------------------------------------------------- what modules say


def docstring(path: Path) -> str | None:
    """A module's docstring; for a C module, the comment that opens its source."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".c":
        match = re.match(r"\s*/\*(.*?)\*/", text, re.S)
        if match is None:
            return None
        lines = [line.strip().removeprefix("*").strip() for line in match[1].splitlines()]
        return "\n".join(lines).strip()
    return ast.get_docstring(ast.parse(text))


def last_paragraph(text: str) -> str:
    """The closing paragraph of a docstring, its lines joined: where the part is named."""
    return " ".join(text.strip().split("\n\n")[-1].split())


def part_line(part: str) -> str:
    """The sentence that closes every module's docstring: its part and what it may import."""
    allowed = [name for name in _PART_BY_NAME if name in ALLOWED[part]]  # the table's order
    if not allowed:
        return f"Part of ``{part}``: imports nothing of virtualtime's (see tests/layout.py)."
    names = ", ".join(f"``{name}``" for name in allowed)
    return f"Part of ``{part}``: may import {names} (see tests/layout.py)."


def summary(path: Path) -> str:
    """The first sentence of a module's docstring: what it holds."""
    text = (docstring(path) or "").strip()
    paragraph = " ".join(text.split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


# ------------------------------------------------------------------------------- the map

MAP_START = "<!-- the map: drawn by `python tests/layout.py --write` from its table -->"
MAP_END = "<!-- end of the map -->"
MAP_WIDTH = 100
DOC_WIDTH = 96


def draw_map() -> str:
    """The map of the package for docs/design.md: each part, what it may import, its modules."""
    out = [MAP_START, "", "```text", "virtualtime/", ""]
    modules = our_modules()
    for part in PARTS:
        allowed = [name for name in _PART_BY_NAME if name in ALLOWED[part.name]]
        out.append(f"{part.name} -- may import: {', '.join(allowed) or 'nothing of ours'}")
        out.extend(_wrap(part.holds, "    "))
        members = sorted(
            (str(path.relative_to(PACKAGE_DIR)), path)
            for name, path in modules.items()
            if part_of(name) == part.name
        )
        width = max(len(shown) for shown, _ in members)
        for shown, path in members:
            lead = f"  {shown.ljust(width)}  "
            said = _wrap(_plain(summary(path)), " " * len(lead), max(MAP_WIDTH, len(lead) + 40))
            out.append(lead + said[0].lstrip() if said else lead.rstrip())
            out.extend(said[1:])
        out.append("")
    out[-1:] = ["```", "", MAP_END]
    return "\n".join(out)


def _plain(text: str) -> str:
    """Docstring markup as plain text: ``x`` and :func:`~a.x` become x."""
    text = re.sub(
        r":\w+:`~?([^`]+)`", lambda m: m[1].rpartition(".")[2] if "~" in m[0] else m[1], text
    )
    return text.replace("``", "")


def _wrap(text: str, indent: str, width: int = MAP_WIDTH) -> list[str]:
    lines: list[str] = []
    line = indent
    for word in text.split():
        if len(line) + len(word) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += word + " "
    if line.strip():
        lines.append(line.rstrip())
    return lines


def page_map(page: str) -> str | None:
    """The map as it stands in the design page (None: the markers are missing)."""
    start = page.find(MAP_START)
    end = page.find(MAP_END)
    if start < 0 or end < start:
        return None
    return page[start : end + len(MAP_END)]


# ---------------------------------------------------------------------------- rewriting


def _with_part_line(path: Path, part: str) -> str:
    """The module's source with its docstring closed by :func:`part_line`."""
    text = path.read_text(encoding="utf-8")
    wanted = part_line(part)
    if path.suffix == ".c":
        match = re.match(r"(\s*/\*)(.*?)(\s*\*/)", text, re.S)
        if match is None:
            raise SystemExit(f"{path}: no opening comment to close with the part line")
        body = re.sub(r"\s*\n[ \t]*\*?[ \t]*Part of ``.*", "", match[2], flags=re.S)
        indents = re.findall(r"\n([ \t]*\*?[ \t]*)\S", body)
        indent = indents[-1] if indents else "   "
        said = "\n".join(_wrap(wanted, indent, DOC_WIDTH))
        return f"{match[1]}{body.rstrip()}\n\n{said}{match[3]}{text[match.end() :]}"
    tree = ast.parse(text)
    node = tree.body[0] if tree.body else None
    if not (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ):
        raise SystemExit(f"{path}: no docstring; write one that says what the module holds")
    lines = text.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno or node.lineno
    source = "".join(lines[start:end])
    quote = '"""' if '"""' in source else "'''"
    opening, closing = source.index(quote), source.rindex(quote)
    inner = source[opening + 3 : closing]
    inner = re.sub(r"\s*Part of ``[^`]*``:.*$", "", inner.rstrip(), flags=re.S)
    said = "\n".join(_wrap(wanted, "", DOC_WIDTH))
    rebuilt = f"{source[: opening + 3]}{inner.rstrip()}\n\n{said}\n{quote}{source[closing + 3 :]}"
    return "".join(lines[:start]) + rebuilt + "".join(lines[end:])


def write() -> None:
    for module, path in our_modules().items():
        part = part_of(module)
        if part is None:
            raise SystemExit(f"{module} belongs to no part: place it in PARTS")
        new = _with_part_line(path, part)
        if new != path.read_text(encoding="utf-8"):
            path.write_text(new, encoding="utf-8")
    page = DESIGN_PAGE.read_text(encoding="utf-8")
    old = page_map(page)
    if old is None:
        raise SystemExit(f"{DESIGN_PAGE}: put {MAP_START!r} and {MAP_END!r} where the map goes")
    DESIGN_PAGE.write_text(page.replace(old, draw_map()), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/layout.py --write")
    write()
