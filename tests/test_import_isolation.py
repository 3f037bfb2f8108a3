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
