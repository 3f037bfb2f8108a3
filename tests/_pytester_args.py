"""The plugins a pytester session of the plugin's tests turns off, shared by their modules.

A session run by ``pytester`` loads every plugin installed here; these would change what the
tests look at: pytest's cache, looptime's plugins (they fake the same loop clock), and
hypothesis's (it adds a header and its own warnings).
"""

from __future__ import annotations

from typing import Final

NEIGHBOURS_OFF: Final = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:looptime_plugin",
    "-p",
    "no:looptime_chronometers",
    "-p",
    "no:looptime_timeproxies",
)
"""The cache and looptime's plugins, off."""

HYPOTHESIS_OFF: Final = ("-p", "no:hypothesispytest")

STRICT: Final = ("--strict-markers", "--strict-config")
