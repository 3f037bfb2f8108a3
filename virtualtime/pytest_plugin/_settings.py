"""A test's virtual-time settings: the marker, the options and ini values, the merge rule.

Owns what the plugin reads about one test before anything runs: the ``virtualtime`` marker and
its help line, the session's switches (``--virtualtime`` / ``virtualtime = true``) and default
horizon (``--virtualtime-max-time`` / ``virtualtime_max_time``), the merge of a test's marks
into one :class:`_Settings` (cached on the item), the checks that make a bad mark a collection
error naming the test, the option and the rule -- and the small questions every other module
asks about a test: is it async, does pytest-asyncio or anyio run it.

Read this module to change what a mark may say; the modules that act on a test start from
:func:`_settings`.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Final, NoReturn

import pytest

from .._options import check_names, check_option
from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import NEVER, TICKS_PER_SECOND

MARKER: Final = "virtualtime"

_MARKER_HELP: Final = (
    "virtualtime(enabled=True, /, **options): run this async test (pytest-asyncio or anyio) "
    "in virtual time; options are max_time (the virtual horizon, default 1 day; None: none) "
    "and virtualtime.VirtualEventLoop options (start, autojump, history, ...); "
    "virtualtime(False) opts out of --virtualtime."
)


DEFAULT_MAX_TIME: Final = 86400.0
"""The virtual horizon of a test when nothing sets ``max_time``: one virtual day."""

_MAX_TIME: Final = "max_time"
"""The one marker option that is the plugin's own, not a loop option."""

_NO_MAX_TIME: Final = ("none", "off", "inf", "infinity")

_HORIZON: Final = NEVER / TICKS_PER_SECOND
"""The horizon of virtual time in seconds: a test's ``max_time`` must be shorter."""


@dataclasses.dataclass(frozen=True)
class _Settings:
    """Whether a test runs in virtual time, with which loop options, and its horizon."""

    virtual: bool
    options: tuple[tuple[str, Any], ...] = ()
    max_time: float | None = DEFAULT_MAX_TIME

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)


_NOT_VIRTUAL: Final = _Settings(virtual=False)

_SETTINGS_KEY: Final = pytest.StashKey[_Settings]()
_GLOBAL_KEY: Final = pytest.StashKey[bool]()
_MAX_TIME_KEY: Final = pytest.StashKey["float | None"]()
"""The session's default virtual horizon (``--virtualtime-max-time`` / ini), read once."""
_SEEDS_KEY: Final = pytest.StashKey["tuple[int, ...] | None"]()
"""The seeds the command line asks for (``--virtualtime-seeds`` / ``--virtualtime-seed``)."""


def _global_switch(config: pytest.Config) -> bool:
    """``--virtualtime`` or ``virtualtime = true`` in the ini file."""
    try:
        return config.stash[_GLOBAL_KEY]
    except KeyError:
        pass
    value = bool(config.getoption("virtualtime", False)) or bool(config.getini("virtualtime"))
    config.stash[_GLOBAL_KEY] = value
    return value


def _fail(nodeid: str, problem: str) -> NoReturn:
    # ``from None``: a problem found while handling another exception is reported once.
    raise pytest.fail.Exception(
        f"{nodeid}: @pytest.mark.{MARKER}: {problem}", pytrace=False
    ) from None


def _check_option(nodeid: str, name: str, value: Any) -> None:
    """One marker option, checked by the options catalogue (or, for max_time, here)."""
    if name == _MAX_TIME:
        try:
            _check_max_time(value)
        except (TypeError, ValueError) as exc:
            problem = f"bad option {name}={value!r}: {exc}"
        else:
            return
        _fail(nodeid, problem)
    try:
        check_names({name: value}, "asyncio")
    except InvalidTypeError as exc:
        _fail(nodeid, f"{exc}; the marker also takes {_MAX_TIME}")
    try:
        check_option(name, value)
    except (InvalidTypeError, InvalidValueError) as exc:
        problem = f"bad option {name}={value!r}: {exc}"
    else:
        return
    _fail(nodeid, problem)


def _check_max_time(value: object) -> float | None:
    """A test's virtual horizon in seconds, or None for none; a clear error otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() in _NO_MAX_TIME:
            return None
        from .._shared._units import parse_time

        seconds = parse_time(value)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(
            f"max_time must be seconds (a number or a duration such as '36h'), or None for no "
            f"horizon, got {value!r}"
        )
    elif value == math.inf:
        return None
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
    if seconds != seconds or seconds <= 0:
        raise InvalidValueError(
            f"max_time must be > 0 virtual seconds (None turns the horizon off), got {value!r}"
        )
    if seconds >= _HORIZON:
        raise InvalidValueError(
            f"max_time must be shorter than the horizon of virtual time ({_HORIZON:.4g} s; "
            f"None turns the test's horizon off), got {_shown(value)}"
        )
    return seconds


def _shown(value: object) -> str:
    """``repr(value)``; a huge int (whose repr may even be refused) by its size instead."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an int of about {value.bit_length() * 30103 // 100000 + 1} digits"
    return repr(value)


def _default_max_time(config: pytest.Config) -> float | None:
    """``--virtualtime-max-time``, else the ini option ``virtualtime_max_time``, else a day."""
    try:
        return config.stash[_MAX_TIME_KEY]
    except KeyError:
        pass
    given = config.getoption("virtualtime_max_time", None)
    where = "--virtualtime-max-time"
    if given is None:
        given = config.getini("virtualtime_max_time") or None
        where = "virtualtime_max_time (ini)"
    value = DEFAULT_MAX_TIME
    if given is not None:
        try:
            value = _check_max_time(str(given))  # type: ignore[assignment]
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None
    config.stash[_MAX_TIME_KEY] = value
    return value


def _command_line_seeds(config: pytest.Config) -> tuple[int, ...] | None:
    """The seeds every virtual test runs under: ``--virtualtime-seeds N`` gives 0 to N-1,
    ``--virtualtime-seed S`` just S; None when neither is given.  Giving both is a usage
    error (raised the first time this is asked, from ``pytest_configure``)."""
    try:
        return config.stash[_SEEDS_KEY]
    except KeyError:
        pass
    count = config.getoption("virtualtime_seeds", None)
    one = config.getoption("virtualtime_seed", None)
    if count is not None and one is not None:
        raise pytest.UsageError(
            "--virtualtime-seeds N runs each virtual test under seeds 0 to N-1 and "
            "--virtualtime-seed S under S only (a replay): give one of them"
        )
    seeds = tuple(range(count)) if count is not None else (one,) if one is not None else None
    config.stash[_SEEDS_KEY] = seeds
    return seeds


def _command_line_perturb(config: pytest.Config) -> str:
    """``--virtualtime-perturb``: what the command line's seeds reorder ("timers")."""
    return str(config.getoption("virtualtime_perturb", None) or "timers")


def _read_settings(node: pytest.Item) -> _Settings:
    """Apply the merge rule to ``node``'s marks (validating them) and the global switch."""
    enabled: bool | None = None
    options: dict[str, Any] = {}
    for mark in _marks_closest_first(node):
        if len(mark.args) > 1:
            _fail(
                node.nodeid,
                f"takes at most one positional argument (enabled: True or False), "
                f"got {mark.args!r}; pass loop options as keywords",
            )
        if mark.args and not isinstance(mark.args[0], bool):
            _fail(
                node.nodeid,
                f"the positional argument must be True or False (whether the test runs in "
                f"virtual time), got {mark.args[0]!r}; pass loop options as keywords",
            )
        for name, value in mark.kwargs.items():
            _check_option(node.nodeid, name, value)
            options.setdefault(name, value)
        if enabled is None:
            enabled = mark.args[0] if mark.args else True
    if enabled is None:
        enabled = _global_switch(node.config)
    if not enabled:
        return _NOT_VIRTUAL
    if (
        options.get("perturb") == "ready"
        and options.get("seed") is None
        and _command_line_seeds(node.config) is None
    ):
        _fail(
            node.nodeid,
            "perturb='ready' needs a seed (the seed decides the order of the ready task "
            "steps): add seed=<an int >= 0> to the mark, or run with --virtualtime-seeds N",
        )
    if _MAX_TIME in options:
        max_time = _check_max_time(options.pop(_MAX_TIME))
    else:
        max_time = _default_max_time(node.config)
    return _Settings(virtual=True, options=tuple(sorted(options.items())), max_time=max_time)


def _marks_closest_first(node: pytest.Item) -> list[pytest.Mark]:
    """The node's virtualtime marks: ``pytest.param`` marks, function, class, module.

    pytest lists a parameter's marks after the function's own; for this plugin a mark given
    to one parameter set is the most specific, so it comes first.
    """
    marks = list(node.iter_markers(MARKER))
    callspec = getattr(node, "callspec", None)
    param_marks = [m for m in getattr(callspec, "marks", ()) if m.name == MARKER]
    if not param_marks:
        return marks
    return param_marks + [m for m in marks if not any(m is p for p in param_marks)]


def _settings(item: pytest.Item) -> _Settings:
    """The (cached) settings of a collected test."""
    try:
        return item.stash[_SETTINGS_KEY]
    except KeyError:
        pass
    settings = _read_settings(item)
    item.stash[_SETTINGS_KEY] = settings
    return settings


def _own_mark(item: pytest.Item) -> bool:
    return any(mark.name == MARKER for mark in getattr(item, "own_markers", ()))


def _test_function(item: pytest.Item) -> Any:
    func = getattr(item, "obj", None)
    hypothesis = getattr(func, "hypothesis", None)
    inner = getattr(hypothesis, "inner_test", None)
    return inner if inner is not None else func


def _is_async_test(item: pytest.Item) -> bool:
    return inspect.iscoroutinefunction(_test_function(item))


def _is_pytest_asyncio_test(item: pytest.Item) -> bool:
    return (
        item.config.pluginmanager.has_plugin("asyncio")
        and item.get_closest_marker("asyncio") is not None
        and _is_async_test(item)
    )


def _is_anyio_test(item: pytest.Item) -> bool:
    return item.config.pluginmanager.has_plugin("anyio") and "anyio_backend" in getattr(
        item, "fixturenames", ()
    )
