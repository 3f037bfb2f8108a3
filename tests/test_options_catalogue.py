"""One options catalogue: every entry point accepts the same names and refuses the same values.

The entry points are the loop and its factory, ``virtualtime.run``, the policy, ``anyio_run``
(both backends), the trio clock and ``virtualtime.trio.run``, :func:`virtualtime.configure`,
the pytest marker and the ``virtualtime run`` flags.  Each must give the options catalogue's
own verdict -- the same exception class and the same message -- before creating anything.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import io
import math
import sys
import threading
from collections.abc import Callable
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest

import virtualtime
import virtualtime.trio
from virtualtime import LoopOptions
from virtualtime._options import ASYNCIO_ONLY, OPTION_NAMES, TRIO_OPTION_NAMES

BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"start": -1.0}, ValueError),
    ({"start": math.nan}, ValueError),
    ({"start": "0"}, TypeError),
    ({"start": 1e30}, ValueError),  # past the horizon
    ({"autojump": 1}, TypeError),
    ({"autojump_threshold": -0.1}, ValueError),
    ({"rate": -2}, ValueError),
    ({"rate": math.inf}, ValueError),
    ({"rate_strict": "yes"}, TypeError),
    ({"rate_strict": None}, TypeError),
    ({"rate_strict": 0}, ValueError),
    ({"rate_strict": math.nan}, ValueError),
    ({"deadlock_timeout": -1}, ValueError),
    ({"deadlock_timeout": "soon"}, TypeError),
    ({"patch_time": "yes"}, TypeError),
    ({"wall_start": "2030-01-01"}, TypeError),
    ({"wall_start": datetime.date(2030, 1, 1)}, TypeError),
    ({"autojmp": False}, TypeError),  # an unknown name
]
BAD_ASYNCIO_ONLY: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"history": -1}, ValueError),
    ({"history": 2.5}, TypeError),
    ({"max_rounds_per_instant": 0}, ValueError),
    ({"seed": -1}, ValueError),
    ({"seed": True}, TypeError),
    ({"seed": 1.5}, TypeError),
    ({"perturb": "x"}, ValueError),
    ({"perturb": 1}, TypeError),
]
BAD_TOGETHER: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"perturb": "ready"}, ValueError),  # without a seed
    ({"perturb": "ready", "seed": None}, ValueError),
]


async def _nothing() -> None:
    return None


def _loop(**options: Any) -> None:
    virtualtime.VirtualEventLoop(**options).close()


def _factory(**options: Any) -> None:
    virtualtime.new_event_loop(**options).close()


def _run(**options: Any) -> None:
    virtualtime.run(_nothing(), **options)


def _anyio_asyncio(**options: Any) -> None:
    virtualtime.anyio_run(_nothing, backend="asyncio", **options)


def _anyio_trio(**options: Any) -> None:
    virtualtime.anyio_run(_nothing, backend="trio", **options)


def _clock(**options: Any) -> None:
    virtualtime.trio.VirtualClock(**options)


def _trio_run(**options: Any) -> None:
    virtualtime.trio.run(_nothing, **options)


def _configure(**options: Any) -> None:
    with virtualtime.configure(**options):
        pass


def _policy(**options: Any) -> None:
    virtualtime.EventLoopPolicy(**options)


ASYNCIO_ENTRY_POINTS: dict[str, Callable[..., None]] = {
    "VirtualEventLoop": _loop,
    "new_event_loop": _factory,
    "run": _run,
    "anyio_run(asyncio)": _anyio_asyncio,
    "configure": _configure,
}
if sys.version_info < (3, 16):
    ASYNCIO_ENTRY_POINTS["EventLoopPolicy"] = _policy
TRIO_ENTRY_POINTS: dict[str, Callable[..., None]] = {
    "VirtualClock": _clock,
    "trio.run": _trio_run,
    "anyio_run(trio)": _anyio_trio,
}


def verdict(call: Callable[[], object]) -> tuple[type[BaseException], str] | None:
    try:
        call()
    except Exception as exc:
        return type(exc), str(exc)
    return None


def expected(options: dict[str, Any], backend: str = "asyncio") -> tuple[type[Exception], str]:
    result = verdict(lambda: LoopOptions.of(options, backend=backend))  # type: ignore[arg-type]
    assert result is not None
    return result  # type: ignore[return-value]


@pytest.mark.parametrize(("options", "builtin"), BAD + BAD_ASYNCIO_ONLY + BAD_TOGETHER, ids=repr)
@pytest.mark.parametrize("entry", sorted(ASYNCIO_ENTRY_POINTS))
def test_every_asyncio_entry_point_refuses_alike(
    entry: str, options: dict[str, Any], builtin: type[Exception]
) -> None:
    kind, message = expected(options)
    assert issubclass(kind, builtin)
    assert issubclass(kind, virtualtime.VirtualTimeError)
    assert verdict(lambda: ASYNCIO_ENTRY_POINTS[entry](**options)) == (kind, message)


@pytest.mark.parametrize(("options", "builtin"), BAD, ids=repr)
@pytest.mark.parametrize("entry", sorted(TRIO_ENTRY_POINTS))
def test_every_trio_entry_point_refuses_alike(
    entry: str, options: dict[str, Any], builtin: type[Exception]
) -> None:
    kind, message = expected(options, "trio")
    assert issubclass(kind, builtin)
    assert verdict(lambda: TRIO_ENTRY_POINTS[entry](**options)) == (kind, message)


@pytest.mark.parametrize("name", ASYNCIO_ONLY)
@pytest.mark.parametrize("entry", sorted(TRIO_ENTRY_POINTS))
def test_the_trio_entry_points_refuse_the_asyncio_only_options_alike(entry: str, name: str) -> None:
    value = 10
    kind, message = expected({name: value}, "trio")
    assert f"option {name} exists only on the asyncio loop" in message
    assert verdict(lambda: TRIO_ENTRY_POINTS[entry](**{name: value})) == (kind, message)


GOOD: dict[str, Any] = {
    "start": 5.0,
    "autojump": True,
    "autojump_threshold": 0.0,
    "rate": 0.0,
    "rate_strict": True,
    "history": 3,
    "deadlock_timeout": 0.5,
    "max_rounds_per_instant": 1000,
    "patch_time": False,
    "wall_start": datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
    "seed": 7,
    "perturb": "ready",
}


def test_the_catalogue_names_are_the_loops_and_the_clocks() -> None:
    assert set(GOOD) == set(OPTION_NAMES)
    assert set(TRIO_OPTION_NAMES) == set(OPTION_NAMES) - set(ASYNCIO_ONLY)
    assert set(ASYNCIO_ONLY) == {"history", "max_rounds_per_instant", "seed", "perturb"}


@pytest.mark.parametrize("entry", sorted(ASYNCIO_ENTRY_POINTS))
def test_every_asyncio_entry_point_accepts_every_option(entry: str) -> None:
    assert verdict(lambda: ASYNCIO_ENTRY_POINTS[entry](**GOOD)) is None


@pytest.mark.parametrize("entry", sorted(TRIO_ENTRY_POINTS))
def test_every_trio_entry_point_accepts_every_shared_option(entry: str) -> None:
    shared = {name: GOOD[name] for name in TRIO_OPTION_NAMES}
    assert verdict(lambda: TRIO_ENTRY_POINTS[entry](**shared)) is None


@pytest.mark.parametrize(("options", "builtin"), BAD + BAD_ASYNCIO_ONLY, ids=repr)
def test_the_pytest_marker_reports_the_catalogues_message(
    options: dict[str, Any], builtin: type[Exception]
) -> None:
    from virtualtime.pytest_plugin._settings import _check_option

    _, message = expected(options)
    [(name, value)] = options.items()
    with pytest.raises(pytest.fail.Exception) as caught:
        _check_option("test_x", name, value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("flag", "text", "options"),
    [
        ("--start", "1e30", {"start": 1e30}),
        ("--rate", "-2", {"rate": -2.0}),
        ("--rate", "inf", {"rate": math.inf}),
    ],
)
def test_the_command_line_flags_report_the_catalogues_message(
    tmp_path: Path, flag: str, text: str, options: dict[str, Any]
) -> None:
    from virtualtime.cli import EXIT_USAGE, main

    _, message = expected(options)
    script = tmp_path / "s.py"
    script.write_text("print('never')\n", encoding="utf-8")
    err = io.StringIO()
    with redirect_stderr(err):
        status = main(["run", flag, text, str(script)])
    assert status == EXIT_USAGE
    assert message in err.getvalue()


def test_a_built_options_object_is_passed_on_unchanged() -> None:
    options = LoopOptions.of({"start": 7.0, "history": 2})
    assert options.given() == {"start": 7.0, "history": 2}
    loop = virtualtime.new_event_loop(options)
    try:
        assert (loop.time(), loop.ticks) == (7.0, 7_000_000_000)
    finally:
        loop.close()
    clock = virtualtime.trio.VirtualClock(LoopOptions.of({"start": 7.0}, backend="trio"))
    assert clock.current_time() == 7.0
    with pytest.raises(TypeError, match="option history exists only on the asyncio loop"):
        virtualtime.trio.VirtualClock(options)
    with pytest.raises(TypeError, match="not both"):
        virtualtime.new_event_loop(options, start=1.0)


def test_settable_options_are_checked_by_the_catalogue_too() -> None:
    loop = virtualtime.new_event_loop()
    clock = virtualtime.trio.VirtualClock()
    try:
        for obj in (loop, clock):
            for name, value in (("rate", -1), ("autojump", 1), ("autojump_threshold", -1)):
                _, message = expected({name: value})
                with pytest.raises(virtualtime.VirtualTimeError) as caught:
                    setattr(obj, name, value)
                assert str(caught.value) == message
    finally:
        loop.close()


# ---------------------------------------------------------------- the configure() seam


def test_configure_sets_the_options_of_loops_and_clocks_made_inside() -> None:
    made: list[object] = []
    closed: list[object] = []
    with virtualtime.configure(start=100.0, on_create=made.append, on_close=closed.append):
        loop = virtualtime.new_event_loop(start=5.0, autojump=False)
        clock = virtualtime.trio.VirtualClock()
        assert (loop.time(), loop.autojump, clock.current_time()) == (100.0, False, 100.0)
        loop.close()
        loop.close()  # told once
    assert made == [loop, clock]
    assert closed == [loop]
    after = virtualtime.new_event_loop()
    try:
        assert after.time() == 0.0  # the context is over
    finally:
        after.close()
    assert made == [loop, clock]


def test_configure_keeps_the_larger_history_and_nests() -> None:
    outer: list[object] = []
    inner: list[object] = []
    with (
        virtualtime.configure(history=5, rate=0.0, on_create=outer.append),
        virtualtime.configure(start=2.0, on_create=inner.append),
    ):
        small = virtualtime.new_event_loop(history=2)
        large = virtualtime.new_event_loop(history=50)

    async def sleeps() -> None:
        for _ in range(10):
            await asyncio.sleep(1)

    counts = []
    for loop in (small, large):
        try:
            loop.run_until_complete(sleeps())
            counts.append((loop.start_time, len(loop.history)))
        finally:
            loop.close()
    assert counts == [(2.0, 5), (2.0, 10)]
    assert outer == inner == [small, large]


def test_configure_reaches_this_context_not_other_threads_unless_asked() -> None:
    starts: dict[str, float] = {}

    def in_a_thread(key: str) -> None:
        loop = virtualtime.new_event_loop()
        starts[key] = loop.time()
        loop.close()

    with virtualtime.configure(start=9.0):
        thread = threading.Thread(target=in_a_thread, args=("thread",))
        thread.start()
        thread.join()
        contextvars.copy_context().run(in_a_thread, "copied context")
    with virtualtime.configure(start=9.0, all_threads=True):
        thread = threading.Thread(target=in_a_thread, args=("all_threads",))
        thread.start()
        thread.join()
    assert starts == {"thread": 0.0, "copied context": 9.0, "all_threads": 9.0}


def test_configure_checks_its_options_at_once() -> None:
    kind, message = expected({"rate": -1})
    with pytest.raises(kind) as caught, virtualtime.configure(rate=-1):
        pytest.fail("not reached")  # pragma: no cover
    assert str(caught.value) == message
    with pytest.raises(TypeError, match="all_threads must be True or False"):  # noqa: SIM117
        with virtualtime.configure(all_threads=1):  # type: ignore[arg-type]
            pass  # pragma: no cover
