"""The front door's word on trio before ``virtualtime.trio`` is imported.

The driving verbs reach another backend's clock through the registry of drivers
(:mod:`virtualtime._shared._drivers`), which ``virtualtime.trio`` fills when it is imported.
A program that runs trio with trio's own clock (or ``MockClock``) and calls
``virtualtime.now()`` may never have imported it, and would then hear that no event loop is
running -- true of asyncio, and no help.  This module, imported with the package, registers a
stand-in for trio that stays silent unless trio itself is loaded; then it hands the question to
``virtualtime.trio``, whose import replaces the stand-in and whose answer names the clock trio
runs with.  ``import virtualtime`` still imports neither trio nor ``virtualtime.trio``.

Part of ``api``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net`` (see tests/layout.py).
"""

from __future__ import annotations

import sys

from ._shared import _drivers

__all__: list[str] = []


def _trio_stand_in(what: str) -> _drivers.Driver | None:
    """No trio loaded, no trio run here; otherwise ask ``virtualtime.trio`` (imported now)."""
    if "trio" not in sys.modules:
        return None
    from .trio import _verbs

    return _verbs.find_driver(what)


if "trio" not in _drivers.registered():
    _drivers.register("trio", _trio_stand_in)
