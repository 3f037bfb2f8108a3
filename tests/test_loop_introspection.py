"""The virtual loop describes itself as a stock loop does: signatures, autospec, help.

Several of the loop's methods are stand-ins made per loop for speed -- compiled callers for
``call_soon``, ``call_later`` and ``get_debug``, ``functools.partial`` objects for
``create_future`` (and ``get_debug`` on the pure-Python path).  ``inspect.signature``,
``help()``, ``unittest.mock.create_autospec`` and pytest-mock's ``spy`` must still see the
stock method's parameters.  Each check runs on both paths, compiled and pure Python, in a
fresh interpreter (``VIRTUALTIME_PURE_PYTHON`` is read at import).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

SIGNATURES = r"""
import asyncio
import importlib.util
import inspect
import json

import virtualtime
from virtualtime._engine import _compiled


def shape(sig):
    return [(p.name, p.kind.name, repr(p.default)) for p in sig.parameters.values()]


loop = virtualtime.new_event_loop()
stock = asyncio.SelectorEventLoop()
problems, compared, ours = [], [], []
for name in sorted(dir(loop)):
    attr = getattr(loop, name)
    if name.startswith("_") or not callable(attr):
        continue
    try:
        got = shape(inspect.signature(attr))
    except (TypeError, ValueError) as exc:
        problems.append(f"{name}: {exc}")
        continue
    reference = getattr(stock, name, None)
    if reference is None:  # a method of ours alone (peek, step, drive, ...): it has one
        ours.append(name)
        continue
    compared.append(name)
    want = shape(inspect.signature(reference))
    extra = [p for p in got if p not in want]
    if [p for p in got if p[0] != "priority"] != want or extra not in (
        [],
        [("priority", "KEYWORD_ONLY", "0")],
    ):
        problems.append(f"{name}: {got} != stock {want}")
loop.close()
stock.close()
print(json.dumps({
    "compiled": _compiled.COMPILED,
    "built": importlib.util.find_spec("virtualtime._engine._cwake") is not None,
    "problems": problems,
    "compared": compared,
    "ours": ours,
}))
"""

AUTOSPEC = r"""
import asyncio
import inspect
import json
import pydoc
from unittest import mock

import virtualtime
from virtualtime._engine import _compiled

CALLS = {
    "call_soon()": lambda m: m.call_soon(),
    "call_soon(cb, 1, context=None)": lambda m: m.call_soon(print, 1, context=None),
    "call_soon(cb, when=1)": lambda m: m.call_soon(print, when=1),
    "call_later(1)": lambda m: m.call_later(1),
    "call_later(1, cb, 2, context=None)": lambda m: m.call_later(1, print, 2, context=None),
    "call_later(delay=1, callback=cb)": lambda m: m.call_later(delay=1, callback=print),
    "get_debug()": lambda m: m.get_debug(),
    "get_debug(1)": lambda m: m.get_debug(1),
    "create_future()": lambda m: m.create_future(),
    "create_future(loop=1)": lambda m: m.create_future(loop=1),
}


def verdicts(loop):
    spec = mock.create_autospec(loop, instance=True)
    out = {}
    for call, make in CALLS.items():
        try:
            make(spec)
        except TypeError:
            out[call] = "refused"
        else:
            out[call] = "accepted"
    return out


def patched(loop):
    out = {}
    for name in ("call_soon", "call_later", "get_debug", "create_future"):
        with mock.patch.object(loop, name, autospec=True):
            out[name] = [p.name for p in inspect.signature(getattr(loop, name)).parameters.values()]
    return out


loop = virtualtime.new_event_loop()
stock = asyncio.SelectorEventLoop()
result = {
    "compiled": _compiled.COMPILED,
    "virtual": verdicts(loop),
    "stock": verdicts(stock),
    "patched virtual": patched(loop),
    "patched stock": patched(stock),
    "help": pydoc.plain(pydoc.render_doc(loop.call_later)),
}
loop.close()
stock.close()
print(json.dumps(result))
"""


def _run(program: str, pure: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUALTIME_PURE_PYTHON"}
    if pure:
        env["VIRTUALTIME_PURE_PYTHON"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    assert result["compiled"] is (not pure and result.get("built", result["compiled"]))
    return result


PATHS = [pytest.param(False, id="compiled"), pytest.param(True, id="pure")]


@pytest.mark.parametrize("pure", PATHS)
def test_every_public_loop_method_has_the_stock_signature(pure: bool) -> None:
    result = _run(SIGNATURES, pure)
    assert result["problems"] == []
    # The stand-ins and the overrides are among those compared with the stock loop.
    for name in (
        "call_soon",
        "call_later",
        "call_at",
        "get_debug",
        "create_future",
        "create_task",
        "run_in_executor",
        "call_soon_threadsafe",
        "shutdown_default_executor",
        "run_until_complete",
        "close",
    ):
        assert name in result["compared"]
    assert {"peek", "step", "evolve", "run_until", "fast_forward", "settle"} <= set(result["ours"])


@pytest.mark.parametrize("pure", PATHS)
def test_an_autospec_of_the_loop_refuses_what_the_stock_loop_refuses(pure: bool) -> None:
    result = _run(AUTOSPEC, pure)
    assert result["virtual"] == result["stock"]
    assert set(result["stock"].values()) == {"accepted", "refused"}  # the check discriminates
    stock_patched = result["patched stock"]
    for name, parameters in result["patched virtual"].items():
        extra = ["priority"] if name == "call_later" else []
        assert parameters == stock_patched[name] + extra, name
    # help() shows the parameters (with annotations on the pure path; 3.15 puts a long
    # signature on several lines).
    shown = r"call_later\(\s*delay\b.*callback\b.*\*args\b.*context\b.*priority\b"
    assert re.search(shown, result["help"], re.DOTALL)
