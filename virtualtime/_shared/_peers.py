"""Connections to peers outside a run: is an answer still coming?  Both backends ask here.

The asyncio loop's model of outside work (:mod:`virtualtime._engine._outside`) and trio's clock
(:mod:`virtualtime.trio`) hold virtual time still while a peer may still answer, and let it
move the moment nothing can come.  For a connection they ask :meth:`Connections.pending` --
the same question, with the same facts behind it, from :mod:`._machine`.

What decides, in order
----------------------
For a connected TCP socket whose other end is **on this machine** (loopback or any local
address: :func:`~._machine.tcp_peer` finds the other end's socket, and the process holding it
is looked up once per connection):

1. **Bytes in flight.**  What we sent that the peer program has not read yet (its receive
   queue), what it wrote that has not reached us, what we wrote that the kernel has not sent:
   the answer is on its way, or the peer has yet to see the question.  Pending.
2. **The peer is working.**  Any thread of the peer process runnable, running, in disk wait,
   or its CPU clock moved since the last look (:class:`~._machine.ProcessWatch`); for a peer
   in this process (a server in another thread), another thread of ours working (the threads
   blocked on its socket are found from their system calls and epoll sets).  It may be
   writing the rest of an answer -- the body after the headers -- or the next one.  Pending.
3. **An answer is owed.**  We are the client of this connection and sent bytes after its last
   answer arrived; the peer read them and sleeps.  A server that answers after a real
   ``time.sleep`` or an ``await asyncio.sleep`` on its own loop looks exactly like that, and so
   does a broker that took a fire-and-forget message (an MQTT QoS 0 publish) and will never
   answer it.  The kernel tells them apart by what the peer does next: the first wakes up and
   answers; the second wakes up (a periodic tick -- redis and mosquitto wake every 100 ms)
   and goes back to sleep without a word, or cannot wake at all (every thread blocked with no
   timeout: :func:`~._machine.wakes_by_itself`).  So the debt stands until the peer has been
   seen asleep, then awake (its CPU clock moved), then asleep again with nothing sent -- or
   asleep with no way to wake -- and then it is forgiven, unless the peer is waiting on a
   question of its own (:func:`~._machine.awaits_others`: a query to its database).  (The
   price: a peer whose own loop ticks while it waits on its own timer to answer -- uvicorn
   wakes every 0.1 s -- looks done after its first tick.  See ``docs/loop.md``.)
4. Otherwise the peer has finished: time may move at once.  No real-time grace.

For a peer on **another machine** (or where the kernel cannot say: not Linux, no procfs and no
sock_diag), only our own side is known: an owed answer is pending until it arrives (the
timer's real-time allowance bounds the wait), bytes waiting to be sent are pending, and for
:data:`GRACE` real seconds after data arrived more may follow.

Connected **Unix** sockets: what we sent and the peer has not read (``SIOCOUTQ``), and a peer
process found through ``unix_diag`` that is working, are pending; nothing else.

A connection is known by its descriptor *and* its socket inode, so a descriptor number reused
by a new socket starts afresh, while a socket whose reading was paused and resumed (anyio's
streams unregister and re-register it) keeps what was learnt about it.

Nothing here imports asyncio or trio.  Not thread-safe: one run asks.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import math
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from typing import Final

from . import _machine

__all__ = ["GRACE", "Connections"]

GRACE: Final = 0.02
"""Real seconds after data arrived from a peer on another machine during which more may follow."""

_real_monotonic: Final = time.monotonic

_RECHECK: Final = 0.0005
"""Real seconds before a connection that is pending by the kernel's facts is looked at again
(those facts change without an event: a peer goes back to sleep); it doubles up to
:data:`_RECHECK_MAX` while nothing moves."""
_RECHECK_MAX: Final = 0.05

# Where the other end is (decided once per connection).
_REMOTE: Final = 0  # another machine, or the machine cannot say
_PROCESS: Final = 1  # another process of this machine
_THREAD: Final = 2  # this process (another thread's socket)

# The debt of an owed answer from a local peer (rule 3).
_OWED: Final = 0  # sent after its last answer; not yet seen asleep
_ASLEEP: Final = 1  # seen asleep with our bytes read
_WOKE: Final = 2  # seen awake (or its CPU clock moved) since
_FORGIVEN: Final = 3  # seen asleep again with nothing sent: no answer is coming


class _Conn:
    """What one run has learnt about one connection."""

    __slots__ = (
        "backoff",
        "clock",
        "debt",
        "family",
        "inode",
        "last_data",
        "peer_fd",
        "peer_inode",
        "peer_tids",
        "pids",
        "received",
        "sent",
        "sent_at_answer",
        "settled",
        "where",
    )

    def __init__(self, inode: int, family: int) -> None:
        self.inode = inode
        self.family = family
        self.settled = False
        """A look found the exchange over and the peer asleep, and nothing moved since."""
        self.where = -1  # unknown until first asked
        self.pids: tuple[int, ...] = ()
        self.received = 0
        """Bytes received from the peer, at the last look."""
        self.sent = 0
        """Bytes we sent, at the last look."""
        self.sent_at_answer = 0
        """Bytes we had sent when the peer's last answer arrived."""
        self.last_data = -math.inf
        """Real time data last arrived (for the remote grace)."""
        self.debt = _FORGIVEN
        self.backoff = _RECHECK
        """Real seconds before the next look while the facts hold time (doubles to a cap)."""
        self.peer_inode = 0
        self.peer_fd = -1
        self.peer_tids: tuple[int, ...] = ()
        """For a peer in this process: the threads serving it when it was first seen asleep."""
        """For a peer in this process: the descriptor of its end."""
        self.clock: int | None = None
        """The peer's CPU time when it was first seen asleep owing an answer."""


def _sent(info: _machine.TcpInfo) -> int:
    if info.bytes_sent is not None:
        return info.bytes_sent
    return (info.bytes_acked or 0) + info.unacked_segments


class Connections:
    """One run's connections to peers outside it, and whether each may still answer.

    ``others_working`` answers, for a peer in this process, whether another thread of the
    process is working now (``None``: the machine cannot tell); the asyncio loop passes its
    thread watch.  Call :meth:`close` when the run ends.
    """

    __slots__ = ("_conns", "_others_working", "_processes")

    def __init__(self, others_working: Callable[[], bool | None] | None = None) -> None:
        self._conns: dict[int, _Conn] = {}
        # Made when a connection to another process is first judged (most runs have none),
        # so a run without one opens nothing and registers no finalizer.
        self._processes: _machine.ProcessWatch | None = None
        self._others_working = others_working

    def __len__(self) -> int:
        return len(self._conns)

    def _conn(self, fd: int) -> _Conn | None:
        try:
            info = os.fstat(fd)
        except OSError:
            self._conns.pop(fd, None)
            return None
        inode = info.st_ino if stat.S_ISSOCK(info.st_mode) else -1
        conn = self._conns.get(fd)
        if conn is None or conn.inode != inode:
            family = -1
            if inode >= 0:
                try:
                    probe = socket.socket(fileno=fd)
                except OSError:
                    inode = -1
                else:
                    family = probe.family
                    probe.detach()
            conn = self._conns[fd] = _Conn(inode, family)
        return conn

    def close(self) -> None:
        """The run ended: let go of everything (procfs files included)."""
        self._conns.clear()
        if self._processes is not None:
            self._processes.close()

    # ------------------------------------------------------------------ facts in

    def answered(self, fd: int) -> None:
        """Data from the peer just arrived on ``fd`` (a hint from a loop that sees events).

        It orders the answer after everything we had sent, exactly; without the hint a look
        that finds both counters moved orders them by the kernel's millisecond timestamps.
        It also asks the kernel to acknowledge what arrived at once (Linux ``TCP_QUICKACK``,
        re-armed at each answer: the kernel drops the mode by itself).  Our acknowledgement
        is otherwise delayed by 40 ms or more, and until it goes the peer's side shows bytes
        in flight (pending, by rule 1), and a peer that writes its answer in two small pieces
        without ``TCP_NODELAY`` waits for it before the second.  Only the timing of
        acknowledgements changes, never data.
        """
        _acknowledge_now(fd)
        conn = self._conn(fd)
        if conn is None or conn.inode < 0:
            return
        info = _machine.tcp_info(fd)
        if info is None or info.bytes_received is None:
            return
        self._note(conn, info, answer_last=True)
        # A look may have counted these bytes already, ordered before our last question (a
        # tie in milliseconds); the event says they are an answer to it.
        conn.sent_at_answer = conn.sent
        conn.debt = _FORGIVEN

    def _note(self, conn: _Conn, info: _machine.TcpInfo, *, answer_last: bool | None) -> bool:
        """Bring ``conn``'s counters up to ``info``; an answer arrived if bytes came in.

        Returns whether a counter moved since the last look.
        """
        received = info.bytes_received if info.bytes_received is not None else conn.received
        sent = _sent(info)
        moved = received != conn.received or sent != conn.sent
        if received != conn.received:
            if answer_last is None:
                # Both moved since the last look (or only the answer did): which came last?
                # The kernel's timestamps are in milliseconds; a tie counts as the request
                # last -- the safe side (an answer stays owed until the peer shows it is done).
                answer_last = sent == conn.sent or (
                    info.last_data_received_ms < info.last_data_sent_ms
                )
            conn.sent_at_answer = sent if answer_last else conn.sent
            conn.received = received
            conn.last_data = _real_monotonic()
            conn.backoff = _RECHECK
        if sent <= conn.sent_at_answer:
            conn.debt = _FORGIVEN
        elif sent != conn.sent:
            conn.debt = _OWED  # a new question: the peer has yet to read it
            conn.backoff = _RECHECK
        conn.sent = sent
        return moved

    # ------------------------------------------------------------------ the question

    def pending(self, fd: int, *, client: bool, real_now: float) -> float | None:
        """May the peer on the other end of ``fd`` still answer?

        ``None``: no (time may move, as far as this connection goes); else the real seconds
        after which to look again without an event (``inf``: only an event can change it).
        ``client``: we connected (an owed answer counts only then; a server owes, it is not
        owed).  ``fd`` must be a connected stream socket.
        """
        conn = self._conn(fd)
        if conn is None or conn.inode < 0:
            return None
        if conn.family == socket.AF_UNIX:
            return self._unix_pending(fd, conn)
        info = _machine.tcp_info(fd)
        if info is None:
            return None
        if info.notsent_bytes:
            return math.inf  # the loop waits to write it (an event comes)
        if self._note(conn, info, answer_last=None) or not conn.settled:
            conn.settled = False
            peer = _machine.tcp_peer(fd)
        elif conn.where == _PROCESS:
            # Nothing moved since a look found the exchange over and the peer asleep: no bytes
            # can be in flight, only the peer itself may have started working (or dying).
            return self._again(conn) if self._peer_working(conn) else None
        else:
            peer = _machine.tcp_peer(fd)
        if conn.where < 0:
            if peer is not None and not peer.inode:
                # In the peer's accept queue, not yet accepted (no process holds its end):
                # the peer is about to take it.  Where it lives is known once it has.
                return self._again(conn)
            self._locate(fd, conn)
        if conn.where == _REMOTE:
            return self._remote_pending(conn, client, real_now)
        if peer is None:
            return None  # the other end is gone (closed and torn down): EOF is ours to read
        conn.peer_inode = peer.inode
        if peer.unread or peer.unacknowledged or info.unacked_segments:
            return self._again(conn)  # bytes on the way, one direction or the other
        working = self._peer_working(conn)
        if working is None:
            return self._remote_pending(conn, client, real_now)
        if not client or conn.debt == _FORGIVEN:
            if working:
                return self._again(conn)
            conn.settled = True
            return None
        return self._debt(conn, working)

    def _again(self, conn: _Conn) -> float:
        """Look again soon, then less often (the facts change without an event)."""
        wait = conn.backoff
        conn.backoff = min(wait * 2, _RECHECK_MAX)
        return wait

    def _debt(self, conn: _Conn, working: bool) -> float | None:
        """Rule 3: an owed answer from a local peer that shows no other sign of coming."""
        if working:
            if conn.debt == _ASLEEP and self._woke(conn, working=True):
                conn.debt = _WOKE
            return self._again(conn)
        if conn.debt == _OWED:
            conn.debt = _ASLEEP
            conn.backoff = _RECHECK
            if conn.where == _THREAD:
                conn.peer_tids = self._peer_threads(conn)
            conn.clock = self._peer_clock(conn)
        elif conn.debt == _ASLEEP and self._woke(conn, working=False):
            conn.debt = _WOKE  # it ran since (a tick too short for a look to catch it running)
        # Asleep.  It is done if it cannot wake by itself, or has woken since and slept again
        # without a word -- unless it is waiting on somebody else (its database) itself.
        if conn.debt == _WOKE or self._peer_wakes(conn) is False:
            if not self._peer_awaits(conn):
                conn.debt = _FORGIVEN
                conn.sent_at_answer = conn.sent
                conn.settled = True
                return None
            conn.debt = _ASLEEP
        return self._again(conn)

    def _woke(self, conn: _Conn, *, working: bool) -> bool:
        """Has the peer itself run since it was seen asleep (``working``: it works now)?

        For a peer in another thread, "working" is any other thread's work -- a server's poll
        loop, a heartbeat -- so only the clocks of the threads serving it speak for it; when
        those are unknown (it was not blocked on the socket when it fell asleep: a handler in
        ``time.sleep``) it cannot be seen waking, and only "cannot wake" forgives it.
        """
        if conn.where == _THREAD:
            return bool(conn.peer_tids) and self._peer_clock(conn) != conn.clock
        return working or self._peer_clock(conn) != conn.clock

    def _peer_clock(self, conn: _Conn) -> int | None:
        """The CPU time the peer has used: its process's, or its threads' in this process."""
        if conn.where == _THREAD:
            # The threads seen serving it when it fell asleep: one that is awake now is not
            # blocked on the socket, and would drop out of a fresh look.
            clocks = [_machine.thread_cpu_ns(tid) for tid in conn.peer_tids]
        else:
            clocks = [_machine.process_cpu_ns(pid) for pid in conn.pids]
        return None if None in clocks else sum(clocks)  # type: ignore[arg-type]

    def _peer_threads(self, conn: _Conn) -> tuple[int, ...]:
        """The threads of this process serving the other end (blocked on it), if any."""
        if conn.peer_fd < 0:
            return ()
        return _machine.threads_waiting_on(conn.peer_fd) or ()

    def _peer_wakes(self, conn: _Conn) -> bool | None:
        if conn.where == _THREAD:
            tids = self._peer_threads(conn)
            if tids:
                return _machine.threads_wake_by_themselves(tids)
            own = {threading.get_native_id()}
            return _machine.wakes_by_itself(os.getpid(), ignore=own)
        answers = [_machine.wakes_by_itself(pid) for pid in conn.pids]
        return True if True in answers else (None if None in answers else False)

    def _peer_awaits(self, conn: _Conn) -> bool:
        ignore = (conn.inode, conn.peer_inode)
        pids = (os.getpid(),) if conn.where == _THREAD else conn.pids
        return any(_machine.awaits_others(pid, ignore) is not False for pid in pids)

    def _remote_pending(self, conn: _Conn, client: bool, real_now: float) -> float | None:
        if client and conn.sent > conn.sent_at_answer:
            return math.inf  # we spoke since its last answer: it owes us one
        left = conn.last_data + GRACE - real_now
        return left if left > 0 else None

    def _unix_pending(self, fd: int, conn: _Conn) -> float | None:
        if _machine.unacknowledged_bytes(fd):
            return self._again(conn)  # the peer has not read everything we sent
        if conn.where < 0:
            self._locate(fd, conn)
        if conn.where == _PROCESS and self._peer_working(conn):
            return self._again(conn)
        return None

    def _locate(self, fd: int, conn: _Conn) -> None:
        """Find where the other end is (once per connection: it reads procfs)."""
        conn.where = _REMOTE
        ours = _machine.both_ends_ours(fd)
        if ours is None:
            return
        if ours:
            conn.where = _THREAD
            peer = _machine.tcp_peer(fd)
            if peer is not None and peer.inode:
                found = _machine.own_descriptor(peer.inode)
                conn.peer_fd = -1 if found is None else found
            return
        pids = _machine.peer_pids(fd)
        if pids:
            conn.where = _PROCESS
            conn.pids = tuple(sorted(pids - {os.getpid()}))

    def _peer_working(self, conn: _Conn) -> bool | None:
        if conn.where == _THREAD:
            if self._others_working is None:
                return None
            return self._others_working()
        # Working now: another process cannot be waiting for a GIL of ours, and its clock
        # having moved since the last look is mostly the answer we have just read.
        processes = self._processes
        if processes is None:
            processes = self._processes = _machine.ProcessWatch()
        return processes.working(conn.pids, since_last=False)


_TCP_QUICKACK: Final = getattr(socket, "TCP_QUICKACK", None)


def _acknowledge_now(fd: int) -> None:
    """Set ``TCP_QUICKACK`` on ``fd`` (nothing for a socket that is not TCP, or off Linux)."""
    if _TCP_QUICKACK is None:
        return
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)
    except OSError:
        pass  # not TCP (a Unix connection): nothing to acknowledge
    finally:
        sock.detach()
