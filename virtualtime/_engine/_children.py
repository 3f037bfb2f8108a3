"""Is a child process still outside work?  The outside-work model's look at subprocesses.

A child started through the loop (``asyncio.create_subprocess_*``, anyio's ``open_process``)
holds virtual time while something waits for it -- its exit or its output -- and keeps the
loop alive while it runs; these helpers of :mod:`virtualtime._engine._outside` read that from
the subprocess transport, under every child watcher.  The private asyncio fields they read are
named where they are read, and pinned by ``tests/test_canaries.py``.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__: list[str] = []


def _child_live(transport: Any) -> bool:
    """Still running, or its output is still being read (a grandchild may hold the pipe)."""
    if _child_running(transport):
        return True
    try:
        return not transport.is_closing() and _reader_waiting(transport)
    except Exception:  # a transport torn down under us
        return False


def _reader_waiting(transport: Any) -> bool:
    protocol = getattr(transport, "_protocol", None)
    for reader in (getattr(protocol, "stdout", None), getattr(protocol, "stderr", None)):
        # asyncio-private: a StreamReader's _waiter is set while a task awaits data.
        if (
            reader is not None
            and getattr(reader, "_waiter", None) is not None
            and not (reader.at_eof())
        ):
            return True
    return False


def _child_running(transport: Any) -> bool:
    # Until the child has been reaped it may still exit (or answer): a transport already
    # closed -- close() kills the child -- still waits for that exit.
    try:
        return transport.get_pid() is not None and transport.get_returncode() is None
    except Exception:  # a transport torn down under us
        return False


def _child_awaited(transport: Any) -> bool:
    """A running child whose exit or output a task waits for."""
    if not _child_live(transport):
        return False
    if not _child_running(transport):
        return True  # exited, but a task still reads what its pipe holds
    # asyncio-private: base_subprocess.BaseSubprocessTransport keeps proc.wait()'s futures in
    # _exit_waiters; the streams protocol keeps its readers as .stdout/.stderr, and a
    # StreamReader's _waiter is set while a task awaits data.
    if getattr(transport, "_exit_waiters", None):
        return True
    protocol = getattr(transport, "_protocol", None)
    if not isinstance(protocol, asyncio.subprocess.SubprocessStreamProtocol):
        return True  # a protocol of the user's own: assume it waits for the child
    # anyio's Process.wait() waits on an asyncio.Event of its protocol subclass ("exited");
    # an Event keeps its waiting futures in _waiters.
    exited = getattr(protocol, "exited", None)
    if getattr(exited, "_waiters", None):
        return True
    for reader in (protocol.stdout, protocol.stderr):
        if reader is not None and getattr(reader, "_waiter", None) is not None:
            return True
    stdin = protocol.stdin
    if stdin is not None:
        waiter = getattr(getattr(stdin, "_protocol", None), "_drain_waiters", None)
        if waiter:
            return True
    return False
