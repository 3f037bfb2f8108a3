"""trio is an optional extra: importing virtualtime (or its anyio-only parts) never loads it.

Each check runs in a fresh interpreter, since this test process has long imported trio.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest


def modules_after_import(*names: str) -> set[str]:
    """Names in ``sys.modules`` of a fresh interpreter after importing ``names``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(names)!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(result.stdout))


def is_trio(name: str) -> bool:
    return name == "trio" or name.startswith("trio.")


ANYIO_ONLY = ["virtualtime", "virtualtime._anyio"]
if importlib.util.find_spec("virtualtime.sim") is not None:
    ANYIO_ONLY.append("virtualtime.sim")


@pytest.mark.parametrize("module", ANYIO_ONLY)
def test_importing_does_not_load_trio(module: str) -> None:
    loaded = modules_after_import(module)
    assert module in loaded
    assert sorted(filter(is_trio, loaded)) == []


def test_the_trio_module_does_load_trio() -> None:
    # The check above can fail: virtualtime.trio is where trio gets imported.
    assert "trio" in modules_after_import("virtualtime.trio")


@pytest.mark.parametrize("missing", ["trio", "sniffio"])
def test_every_public_part_imports_without_an_undeclared_module(missing: str) -> None:
    # As on a base install (trio is an extra; sniffio is no dependency of ours, only trio's):
    # the module is made unimportable in a fresh interpreter.  virtualtime.trio alone needs
    # trio, and says how to get it.
    code = (
        "import importlib, sys\n"
        f"sys.modules[{missing!r}] = None\n"
        "for name in ('virtualtime', 'virtualtime.sim', 'virtualtime.trace', "
        "'virtualtime.experiment', 'virtualtime.cli', 'virtualtime.pytest_plugin'):\n"
        "    importlib.import_module(name)\n"
        "print('imported')\n"
    )
    if missing == "trio":
        code += (
            "try:\n"
            "    import virtualtime.trio\n"
            "except ModuleNotFoundError as error:\n"
            "    print('refused:', error.name, error)\n"
        )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "imported"
    if missing == "trio":
        assert lines[1].startswith("refused: trio "), lines
        assert "pip install 'async-virtualtime[trio]'" in lines[1]
