"""One error family: everything virtualtime raises on purpose is a ``VirtualTimeError``.

Each error class is also the builtin callers already catch (``ValueError``, ``TypeError``,
``RuntimeError``); and no module of the package (the sim kit, experiments and traces
included) raises a bare builtin error -- an AST walk over the package finds any that slip
back in.
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
    FellBehindError,
    InvalidTypeError,
    InvalidValueError,
    RunawayError,
    UsageError,
    VirtualTimeError,
    experiment,
)

PACKAGE = Path(virtualtime.__file__).parent

BARE: frozenset[str] = frozenset(
    {
        "ValueError",
        "TypeError",
        "RuntimeError",
        "Exception",
        "LookupError",
        "KeyError",
        "OverflowError",
    }
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
        (FellBehindError, RuntimeError),
    ],
)
def test_each_error_is_a_virtualtime_error_and_its_builtin(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, VirtualTimeError)
    assert issubclass(error, builtin)
    assert not issubclass(VirtualTimeError, builtin)


def _bare_raises(source: str, where: str) -> list[str]:
    """Every ``raise`` of a bare builtin error in ``source``: ``raise ValueError(...)``,
    ``raise ValueError`` and ``raise builtins.ValueError(...)`` alike."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(raised, ast.Attribute) and isinstance(raised.value, ast.Name):
            name = raised.attr if raised.value.id == "builtins" else None
        else:
            name = raised.id if isinstance(raised, ast.Name) else None
        if name in BARE:
            found.append(f"{where}:{node.lineno}: raise {name}")
    return found


def test_the_walk_finds_every_shape_of_a_bare_raise() -> None:
    source = (
        "import builtins\n"
        "def f(x):\n"
        "    if x == 1:\n"
        "        raise ValueError(f'x must be 0, got {x}')\n"
        "    if x == 2:\n"
        "        raise TypeError\n"
        "    if x == 3:\n"
        "        raise builtins.RuntimeError('no')\n"
        "    if x == 4:\n"
        "        raise OverflowError('too large') from None\n"
        "    try:\n"
        "        pass\n"
        "    except KeyError:\n"
        "        raise\n"  # re-raising what was caught is not a new error
        "    raise InvalidValueError('fine')\n"
    )
    assert _bare_raises(source, "m.py") == [
        "m.py:4: raise ValueError",
        "m.py:6: raise TypeError",
        "m.py:8: raise RuntimeError",
        "m.py:10: raise OverflowError",
    ]


def test_no_module_raises_a_bare_builtin_error() -> None:
    found = []
    walked = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if str(relative) in PENDING:
            continue
        walked.add(relative.parts[0])
        found.extend(_bare_raises(path.read_text(encoding="utf-8"), str(relative)))
    assert {"sim", "experiment", "trace", "_engine", "_shared"} <= walked
    assert found == [], "raise a virtualtime error (see virtualtime/_shared/_errors.py) instead"


def test_make_rng_refuses_none_as_its_seed_naming_it() -> None:
    """A replication's generator is made from a known seed only (issue 34 item 12): None is
    an InvalidTypeError naming ``seed``, not numpy's fresh entropy."""
    with pytest.raises(InvalidTypeError, match=r"^seed must be a non-negative integer, got None$"):
        experiment.make_rng(None, (0,))  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match=r"^seed must be a non-negative integer, got -1$"):
        experiment.make_rng(-1, (0,))
    again = experiment.make_rng(7, "0.2").random(3).tolist()
    assert experiment.make_rng(7, (0, 2)).random(3).tolist() == again


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
