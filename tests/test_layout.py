"""The code keeps to the layout in tests/layout.py: its parts, their order, the map.

``tests/layout.py`` holds the table (which part a module belongs to, which parts it may
import) and the walk that finds every import; these tests hold the code to it:

* no import reaches a part that its own part may not import -- no arrow up, lazy imports and
  lookups by name included;
* no circle between modules, lazy imports included, and a module importing its own
  package's face is part of a circle as soon as the face imports it back;
* the engine does not know that another backend exists;
* every module's docstring says what it holds, and closes by naming its part and what that
  part may import; a module over ``MAX_LINES`` says why it must be one room;
* the map in docs/design.md is the one the table draws today.

Each rule is shown to fail on a made-up module, so a green run means something.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import layout
from layout import (
    ALLOWED,
    MAX_LINES,
    ONE_ROOM,
    PARTS,
    ROOT,
    cycle_in,
    docstring,
    eager_imports,
    import_graph,
    last_paragraph,
    line_count,
    our_modules,
    part_line,
    part_of,
    runtime_imports,
    violations,
)


def test_the_table_is_a_hierarchy() -> None:
    # Acyclic (a static order exists), in the order it is written, naming only its parts.
    names = [part.name for part in PARTS]
    assert len(set(names)) == len(names)
    assert all(allowed <= set(names) for allowed in ALLOWED.values())
    for index, part in enumerate(PARTS):
        assert set(part.imports) <= set(names[:index]), f"{part.name} imports a later part"
    order = list(graphlib.TopologicalSorter(ALLOWED).static_order())
    assert order[0] == "shared"
    assert order[-1] == "cli"


def test_every_module_belongs_to_a_part() -> None:
    homeless = sorted(m for m in our_modules() if part_of(m) is None)
    assert homeless == [], f"place these in a part of tests/layout.py: {homeless}"


def test_every_part_has_a_module() -> None:
    present = {part_of(m) for m in our_modules()}
    assert present == set(ALLOWED)


def test_parts_import_only_the_parts_below_them() -> None:
    assert violations() == []


def test_no_import_circle_lazy_imports_included() -> None:
    circle = cycle_in(import_graph(lazy=True))
    assert circle is None, f"import circle: {' -> '.join(circle or [])}"


def test_the_engine_does_not_know_another_backend_exists() -> None:
    # Not by import, not by name: the verbs find another backend's clock through the
    # registry in _shared/_drivers, which that backend fills when it is imported.
    found = []
    for module, path in our_modules().items():
        if part_of(module) != "engine" or path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]
            if any(name == "trio" or name.startswith("trio.") for name in names):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert found == []


def test_every_module_says_what_it_holds_and_which_part_it_is() -> None:
    wrong = []
    for module, path in our_modules().items():
        text = docstring(path)
        part = part_of(module)
        if not text or part is None:
            wrong.append(f"{module}: no docstring")
        elif len(text.strip().splitlines()) < 3:
            wrong.append(f"{module}: say what the module holds, then its part")
        elif last_paragraph(text) != part_line(part):
            wrong.append(f"{module}: its docstring should end with {part_line(part)!r}")
    assert wrong == [], "run: python tests/layout.py --write\n" + "\n".join(wrong)


def test_a_long_module_says_why_it_is_one_room() -> None:
    long = [
        f"{path.relative_to(ROOT)} ({line_count(path)} lines)"
        for path in our_modules().values()
        if line_count(path) > MAX_LINES and ONE_ROOM not in (docstring(path) or "")
    ]
    assert long == [], f"split these, or say why in a paragraph starting {ONE_ROOM!r}"


def test_the_design_page_shows_todays_map() -> None:
    page = layout.DESIGN_PAGE.read_text(encoding="utf-8")
    shown = layout.page_map(page)
    assert shown is not None, "docs/design.md lost the map's markers"
    assert shown == layout.draw_map(), "run: python tests/layout.py --write"


# ------------------------------------------------------------- the rules can fail


def _fake(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "fake.py"
    path.write_text(source, encoding="utf-8")
    return path


def test_the_walk_sees_an_import_reaching_up(tmp_path: Path) -> None:
    # A clocks module importing the engine, lazily: counted.  Type-only: not counted.
    clocks = next(m for m in our_modules() if part_of(m) == "clocks" and m.count(".") >= 2)
    engine = next(m for m in sorted(our_modules()) if part_of(m) == "engine" and "loop" in m)
    fake = _fake(
        tmp_path,
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        f"    import {engine}\n"
        "def later():\n"
        f"    import {engine}\n",
    )
    imports = list(runtime_imports(fake, clocks))
    assert imports == [(5, engine)]
    assert eager_imports(fake, clocks) == set()
    assert part_of(imports[0][1]) not in ALLOWED["clocks"]


def test_the_walk_sees_a_module_looked_up_by_name(tmp_path: Path) -> None:
    # sys.modules.get("virtualtime.trio") is a dependency on that module; a docstring that
    # names it is prose.
    engine = next(m for m in sorted(our_modules()) if part_of(m) == "engine" and "loop" in m)
    fake = _fake(
        tmp_path,
        '"""Names virtualtime.trio in prose only: virtualtime.trio"""\n'
        "import sys\n"
        "def later():\n"
        '    return sys.modules.get("virtualtime.trio")\n',
    )
    assert list(runtime_imports(fake, engine)) == [(4, "virtualtime.trio")]
    assert "trio" not in ALLOWED["engine"]


def test_a_lazy_circle_inside_a_part_fails(tmp_path: Path) -> None:
    # Take an import a -> b inside one part; make b import a back inside a function.
    graph = import_graph(lazy=True)
    a, b = next(
        (a, b)
        for a in sorted(graph)
        for b in sorted(graph[a])
        if part_of(a) == part_of(b) and not a.startswith(b + ".")
    )
    fake = _fake(tmp_path, f"def later():\n    import {a}\n")
    graph[b] = graph[b] | {target for _line, target in runtime_imports(fake, b)}
    circle = cycle_in(graph)
    assert circle is not None
    assert {a, b} <= set(circle)


def test_importing_ones_own_package_face_is_a_circle(tmp_path: Path) -> None:
    # A face imports its modules; one of them importing a name from the face closes a circle.
    graph = import_graph(lazy=True)
    face, member = next(
        (face, member)
        for face, path in sorted(our_modules().items())
        if path.name == "__init__.py"
        for member in sorted(graph[face])
        if member.startswith(face + ".")
    )
    fake = _fake(tmp_path, "def later():\n    from . import something\n")
    graph[member] = graph[member] | {t for _line, t in runtime_imports(fake, member)}
    circle = cycle_in(graph)
    assert circle is not None
    assert {face, member} <= set(circle)


def test_the_docstring_and_map_checks_can_fail(tmp_path: Path) -> None:
    fake = _fake(tmp_path, '"""Holds things.\n\nMore about them.\n"""\n')
    assert docstring(fake) is not None
    assert last_paragraph(docstring(fake) or "") != part_line("engine")
    rewritten = layout._with_part_line(fake, "engine")
    fake.write_text(rewritten, encoding="utf-8")
    assert last_paragraph(docstring(fake) or "") == part_line("engine")
    assert max(len(line) for line in rewritten.splitlines()) <= layout.DOC_WIDTH
    assert layout._with_part_line(fake, "engine") == rewritten  # rewriting twice changes nothing
    page = "before\n" + layout.draw_map() + "\nafter\n"
    assert layout.page_map(page) == layout.draw_map()
    assert layout.page_map(page.replace("engine --", "engine  --")) != layout.draw_map()
