"""Examples are golden tests: each runs under ``virtualtime run`` and prints its ``.out`` file.

Virtual time makes exact output possible, so every example's stdout is compared character
for character with the checked-in expectation.  Regenerate one deliberately with
``virtualtime run --quiet examples/NAME.py > examples/NAME.out``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def test_there_are_examples() -> None:
    assert len(SCRIPTS) >= 1


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_has_a_covers_and_scenario_docstring(script: Path) -> None:
    doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8")))
    assert doc is not None, f"{script.name} has a module docstring"
    assert "Covers:" in doc
    assert "Scenario:" in doc


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_output_matches_its_golden_file(script: Path) -> None:
    expected = script.with_suffix(".out")
    assert expected.is_file(), f"{expected.name} is checked in"
    result = subprocess.run(
        [sys.executable, "-m", "virtualtime", "run", "--quiet", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=EXAMPLES.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected.read_text(encoding="utf-8")


SIMPY_PORTS = sorted(EXAMPLES.glob("simpy_*.py"))


@pytest.mark.parametrize("script", SIMPY_PORTS, ids=lambda p: p.stem)
def test_the_simpy_ports_run_in_simpys_order(script: Path) -> None:
    # A port of a SimPy program runs in SimPy's order, so it prints SimPy's output for any
    # seed (tests/test_simpy_ports_seeds.py), not only for the published one.
    tree = ast.parse(script.read_text(encoding="utf-8"))
    runs = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "simulate"
    ]
    assert runs, f"{script.name} calls sim.simulate"
    for run in runs:
        orders = [k.value for k in run.keywords if k.arg == "order"]
        assert len(orders) == 1, f"{script.name}, line {run.lineno}: no order= given"
        assert isinstance(orders[0], ast.Constant), f"{script.name}, line {run.lineno}"
        assert orders[0].value == "simpy", f"{script.name}, line {run.lineno}"


@pytest.mark.parametrize("script", SIMPY_PORTS, ids=lambda p: p.stem)
def test_the_simpy_ports_print_simpys_output_on_virtualtimes_trio_clock_too(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # order="simpy" is kept on trio as on asyncio, so each port gives SimPy's published
    # output there as well.
    import functools
    import runpy

    from virtualtime import sim

    assert len(SIMPY_PORTS) == 7
    monkeypatch.setattr(sim, "simulate", functools.partial(sim.simulate, backend="trio"))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out == script.with_suffix(".out").read_text(encoding="utf-8")
