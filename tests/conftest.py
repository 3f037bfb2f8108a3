"""Shared test helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import virtualtime


@pytest.fixture
def loop() -> Iterator[virtualtime.VirtualEventLoop]:
    """A fresh autojump virtual loop, closed after the test."""
    vloop = virtualtime.new_event_loop()
    try:
        yield vloop
    finally:
        vloop.close()


@pytest.fixture
def manual_loop() -> Iterator[virtualtime.VirtualEventLoop]:
    """A fresh manual-mode virtual loop (time moves only when driven), closed afterwards."""
    vloop = virtualtime.new_event_loop(autojump=False)
    try:
        yield vloop
    finally:
        for task in asyncio.all_tasks(vloop):
            task.cancel()
        if not vloop.is_closed():
            vloop.run_until_complete(asyncio.sleep(0))
        vloop.close()
