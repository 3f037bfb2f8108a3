"""Bad input to the shared checks: configure's hooks, huge numbers, absurd rates."""

from __future__ import annotations

from typing import Any

import pytest

import virtualtime
from virtualtime import InvalidTypeError, InvalidValueError


@pytest.mark.parametrize("name", ["on_create", "on_close"])
@pytest.mark.parametrize("hook", [5, "print", 1.5])
def test_configure_refuses_a_hook_that_cannot_be_called_before_the_block(
    name: str, hook: object
) -> None:
    hooks: dict[str, Any] = {name: hook}
    with pytest.raises(InvalidTypeError, match=f"{name} must be None or a callable"):
        virtualtime.configure(**hooks)  # refused at the call, not at `with`


def test_configure_refuses_a_bad_option_at_the_call() -> None:
    with pytest.raises(InvalidValueError, match="start"):
        virtualtime.configure(start=-1)
    with virtualtime.configure(start=5) as options:  # a good one still works
        assert options.start == 5.0
        loop = virtualtime.new_event_loop()
        try:
            assert loop.time() == 5.0
        finally:
            loop.close()


@pytest.mark.parametrize("value", [10**400, -(10**5000), 2**200], ids=["e400", "-e5000", "2e200"])
def test_a_huge_int_is_named_by_size_in_the_message(value: int) -> None:
    with pytest.raises(InvalidValueError, match=r"start .*an int of (about )?\d+ digits") as info:
        virtualtime.new_event_loop(start=value)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("rate", [1e308, 1e13, 10**13])
def test_a_rate_past_a_trillion_is_refused(rate: float) -> None:
    with pytest.raises(InvalidValueError, match="rate must be at most 1e"):
        virtualtime.new_event_loop(rate=rate)
    with pytest.raises(InvalidValueError, match="rate must be finite, got an int of 401 digits"):
        virtualtime.new_event_loop(rate=10**400)


def test_a_rate_of_a_trillion_is_accepted() -> None:
    loop = virtualtime.new_event_loop(rate=1e12)
    loop.close()
