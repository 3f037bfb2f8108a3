"""One error family: everything virtualtime raises on purpose is a ``VirtualTimeError``.

Each error class is also the builtin callers already catch (``ValueError``, ``TypeError``,
``RuntimeError``); and no module outside ``sim`` (which has its own test) raises a bare
builtin error -- an AST walk over the package finds any that slip back in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import trio

import virtualtime
import virtualtime.trio
from virtualtime import (
    DeadlockError,
    InvalidTypeError,
    InvalidValueError,
    RunawayError,
    UsageError,
    VirtualTimeError,
)

PACKAGE = Path(virtualtime.__file__).parent

BARE: frozenset[str] = frozenset(
    {"ValueError", "TypeError", "RuntimeError", "Exception", "LookupError", "KeyError"}
)

PENDING: dict[str, str] = {}
"""Files owned by other work this session; empty this once they join the family."""


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (InvalidValueError, ValueError),
        (InvalidTypeError, TypeError),
        (UsageError, RuntimeError),
        (DeadlockError, RuntimeError),
        (RunawayError, RuntimeError),
    ],
)
def test_each_error_is_a_virtualtime_error_and_its_builtin(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, VirtualTimeError)
    assert issubclass(error, builtin)
    assert not issubclass(VirtualTimeError, builtin)


def _bare_raises(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            if isinstance(func, ast.Name) and func.id in BARE:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: raise {func.id}(...)")
    return found


def test_no_module_outside_sim_raises_a_bare_builtin_error() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "sim" or str(relative) in PENDING:
            continue
        found.extend(_bare_raises(path))
    assert found == [], "raise a virtualtime error (see virtualtime/_shared/_errors.py) instead"


def test_the_trio_guard_raises_family_errors() -> None:
    clock = virtualtime.trio.VirtualClock()

    async def nested() -> None:
        await virtualtime.trio.RunGuard(clock, trio.sleep).guarded_main(0)

    with pytest.raises(UsageError, match="already guarding another run"):
        virtualtime.trio.run(nested, clock=clock)
    with pytest.raises(UsageError, match="the running trio clock is not"):
        trio.run(virtualtime.trio.RunGuard(clock, trio.sleep).guarded_main, 0)
    with pytest.raises(InvalidTypeError, match=r"clock must be a virtualtime\.trio\.VirtualClock"):
        virtualtime.trio.RunGuard(object(), trio.sleep)  # type: ignore[arg-type]


def test_verbs_in_the_wrong_place_are_usage_errors() -> None:
    async def inside() -> None:
        virtualtime.run(asyncio_sleep())

    async def asyncio_sleep() -> None:
        return None

    with pytest.raises(UsageError, match="cannot be called from a running event loop"):
        virtualtime.run(inside())
    with pytest.raises(UsageError, match="needs a running virtual event loop"):
        virtualtime.now()
    loop = virtualtime.new_event_loop()
    try:
        with pytest.raises(InvalidValueError, match="t must not be in the past"):
            loop.run_until(-1)
    finally:
        loop.close()


def test_the_drive_seam_refuses_an_unknown_verb() -> None:
    async def main() -> None:
        loop = asyncio_loop()
        with pytest.raises(InvalidValueError, match="verb must be one of"):
            await loop.drive("jump")  # type: ignore[call-overload]
        assert await loop.drive("evolve", 2.5) == 2.5
        assert loop.ticks == 2_500_000_000

    def asyncio_loop() -> virtualtime.VirtualEventLoop:
        import asyncio

        loop = asyncio.get_running_loop()
        assert isinstance(loop, virtualtime.VirtualEventLoop)
        return loop

    virtualtime.run(main())
