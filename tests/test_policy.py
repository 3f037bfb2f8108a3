"""virtualtime.EventLoopPolicy: the legacy path, on every Python that still has policies.

On 3.14+ asyncio itself warns when a policy is installed or read; these tests check that the
virtual policy warns exactly as asyncio's own policies do there, and not at all before 3.14.
The suite turns warnings into errors, so every policy call that may warn is wrapped.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import virtualtime
from virtualtime._engine._policy import EventLoopPolicy

DEPRECATED = sys.version_info >= (3, 14)


def _quietly(call: Callable[[], Any]) -> Any:
    """Call ``call`` with asyncio's 3.14+ policy deprecation silenced (fixture plumbing)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".*asyncio\..*policy", category=DeprecationWarning
        )
        return call()


@pytest.fixture
def restore_policy() -> Iterator[None]:
    """Put back whatever policy was installed before the test."""
    previous = _quietly(asyncio.get_event_loop_policy)
    try:
        yield
    finally:
        _quietly(lambda: asyncio.set_event_loop_policy(previous))


def _recorded(call: Callable[[], object]) -> list[tuple[type[Warning], str, str]]:
    """Every warning ``call`` raises: category, message and the file it is attributed to."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.category, str(w.message), w.filename) for w in caught]


def test_creating_the_policy_never_warns() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = EventLoopPolicy(start=10.0)
    assert policy.options == {"start": 10.0}


def test_the_policy_is_an_asyncio_policy() -> None:
    policy = EventLoopPolicy()
    base = _quietly(lambda: asyncio.AbstractEventLoopPolicy)
    assert isinstance(policy, base)


@pytest.mark.usefixtures("restore_policy")
def test_installing_it_warns_exactly_as_installing_asyncios_own_policy() -> None:
    stock = _quietly(lambda: asyncio.DefaultEventLoopPolicy())
    ours = EventLoopPolicy()
    theirs_warnings = _recorded(lambda: asyncio.set_event_loop_policy(stock))
    our_warnings = _recorded(lambda: asyncio.set_event_loop_policy(ours))
    assert our_warnings == theirs_warnings
    if DEPRECATED:
        assert len(our_warnings) == 1
        category, message, filename = our_warnings[0]
        assert category is DeprecationWarning
        assert "asyncio.set_event_loop_policy" in message
        assert filename == __file__, "asyncio attributes the warning to the caller"
    else:
        assert our_warnings == []


@pytest.mark.usefixtures("restore_policy")
def test_using_the_installed_policy_adds_no_warning() -> None:
    _quietly(lambda: asyncio.set_event_loop_policy(EventLoopPolicy(start=100.0)))

    async def main() -> tuple[float, float, type[asyncio.AbstractEventLoop]]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        await asyncio.sleep(3600)
        return before, loop.time(), type(loop)

    caught = _recorded(lambda: asyncio.run(main()))
    assert caught == []
    before, after, kind = asyncio.run(main())
    assert kind is virtualtime.VirtualEventLoop
    assert (before, after) == (100.0, 3700.0)


@pytest.mark.skipif(not DEPRECATED, reason="policies are deprecated from 3.14 on")
@pytest.mark.usefixtures("restore_policy")
def test_on_314_and_later_installing_it_raises_asyncios_deprecation() -> None:
    policy = EventLoopPolicy()
    with pytest.warns(DeprecationWarning, match=r"asyncio\.set_event_loop_policy") as record:
        asyncio.set_event_loop_policy(policy)
    assert len(record) == 1


@pytest.mark.skipif(DEPRECATED, reason="3.14+ warns, as asyncio does")
@pytest.mark.usefixtures("restore_policy")
def test_before_314_installing_and_reading_it_is_silent() -> None:
    policy = EventLoopPolicy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.set_event_loop_policy(policy)
        assert asyncio.get_event_loop_policy() is policy


@pytest.mark.usefixtures("restore_policy")
def test_every_loop_asyncio_creates_is_virtual_with_the_options() -> None:
    _quietly(lambda: asyncio.set_event_loop_policy(EventLoopPolicy(start=5.0, history=10)))
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, virtualtime.VirtualEventLoop)
        assert loop.time() == 5.0
        loop.run_until_complete(asyncio.sleep(1.5))
        assert loop.time() == 6.5
        assert len(loop.history) == 1
    finally:
        loop.close()

    with asyncio.Runner() as runner:
        assert isinstance(runner.get_loop(), virtualtime.VirtualEventLoop)
        assert runner.run(asyncio.sleep(2, result="done")) == "done"
        assert runner.get_loop().time() == 7.0


@pytest.mark.usefixtures("restore_policy")
def test_set_event_loop_policy_none_brings_back_real_loops() -> None:
    _quietly(lambda: asyncio.set_event_loop_policy(EventLoopPolicy()))
    _quietly(lambda: asyncio.set_event_loop_policy(None))
    loop = asyncio.new_event_loop()
    try:
        assert not isinstance(loop, virtualtime.VirtualEventLoop)
    finally:
        loop.close()


def test_unknown_options_are_named() -> None:
    with pytest.raises(TypeError, match=r"'strat'.*start"):
        EventLoopPolicy(strat=1.0)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"start": -1.0}, ValueError, "start"),
        ({"rate": float("nan")}, ValueError, "rate"),
        ({"autojump": "yes"}, TypeError, "autojump"),
        ({"history": -3}, ValueError, "history"),
    ],
)
def test_bad_option_values_fail_when_the_policy_is_created(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        EventLoopPolicy(**options)


def test_options_are_a_copy_and_repr_shows_them() -> None:
    policy = EventLoopPolicy(start=1.0, rate=2.0)
    policy.options["start"] = 99.0
    assert policy.options["start"] == 1.0
    loop = policy.new_event_loop()
    try:
        assert loop.time() == 1.0
    finally:
        loop.close()
    assert repr(policy) == "virtualtime.EventLoopPolicy(start=1.0, rate=2.0)"


def test_each_new_loop_is_a_fresh_loop() -> None:
    policy = EventLoopPolicy()
    first, second = policy.new_event_loop(), policy.new_event_loop()
    try:
        assert first is not second
        assert isinstance(first, virtualtime.VirtualEventLoop)
    finally:
        first.close()
        second.close()
