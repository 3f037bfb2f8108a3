"""The version is written once, in ``virtualtime/_version.py``; everything else reads it."""

from __future__ import annotations

import ast
import importlib.metadata
import tomllib
from pathlib import Path

import virtualtime
from virtualtime import _version

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_reads_the_version_from_version_py() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"], "pyproject.toml must not spell the version out"
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    assert (module, name) == ("virtualtime._version", "__version__")


def test_version_py_is_a_plain_literal_that_setuptools_can_read_without_importing() -> None:
    tree = ast.parse((ROOT / "virtualtime" / "_version.py").read_text(encoding="utf-8"))
    assigned = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    value = assigned["__version__"]
    assert isinstance(value, ast.Constant)
    assert value.value == _version.__version__


def test_every_reader_agrees() -> None:
    assert virtualtime.__version__ == _version.__version__
    # The installed metadata was built from the same file (an editable install included).
    assert importlib.metadata.version("async-virtualtime") == _version.__version__


def test_the_package_writes_no_version_of_its_own() -> None:
    tree = ast.parse((ROOT / "virtualtime" / "__init__.py").read_text(encoding="utf-8"))
    assigned = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    ]
    assert "__version__" not in assigned
    assert virtualtime.__version__ is _version.__version__
