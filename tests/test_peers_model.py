"""The connection model with no loop: given what the kernel says of a peer, may time move?

``virtualtime._shared._peers.Connections`` is the question both backends ask about each
connection to a peer outside the run.  These tests drive real sockets against real peers --
a process on this machine, a thread of this process -- and ask it directly, the way
``TimerQueue`` is tested without a loop.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from virtualtime._shared import _machine, _peers
from virtualtime._shared._machine import _peer as machine_peer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux facts")

# A peer process: a line protocol on a plain asyncio loop (no timers unless asked).
#   "sleep N": answers after an asyncio sleep of N ms (its loop then has a timer);
#   "burn N": answers after N ms of CPU work;  "sink": reads, never answers;
#   "ask PORT": asks the listener at PORT (its "database") and answers what it says.
_PEER = r"""
import asyncio, sys, time
async def handle(reader, writer):
    while line := await reader.readline():
        verb, _, arg = line.decode().strip().partition(" ")
        if verb == "sleep":
            await asyncio.sleep(int(arg) / 1000)
        elif verb == "burn":
            end = time.perf_counter() + int(arg) / 1000
            while time.perf_counter() < end:
                pass
        elif verb == "sink":
            continue
        elif verb == "ask":
            r, w = await asyncio.open_connection("127.0.0.1", int(arg))
            w.write(b"?\n")
            await w.drain()
            await r.readline()
        writer.write(b"ok\n")
        await writer.drain()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def peer() -> Iterator[int]:
    child = subprocess.Popen(
        [sys.executable, "-c", _PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    try:
        yield int(child.stdout.readline())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
        child.stdout.close()


def _ask(conns: _peers.Connections, sock: socket.socket) -> float | None:
    return conns.pending(sock.fileno(), client=True, real_now=time.monotonic())


def _settle(conns: _peers.Connections, sock: socket.socket, limit: float = 5.0) -> list[object]:
    """Ask until the answer is None (or ``limit`` real seconds pass); every answer, in order."""
    answers: list[object] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        answer = _ask(conns, sock)
        answers.append(answer)
        if answer is None:
            return answers
        time.sleep(min(answer, 0.05))  # real-time: the model's recheck, as a loop waits it
    return answers


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def test_an_owed_answer_from_a_peer_sleeping_on_its_timer_holds_until_it_comes(peer: int) -> None:
    conns = _peers.Connections()
    with _connect(peer) as sock:
        sock.sendall(b"sleep 200\n")
        start = time.monotonic()
        held = []
        while time.monotonic() - start < 0.15:
            held.append(_ask(conns, sock))
            time.sleep(0.01)  # real-time: looking again while the peer sleeps
        assert None not in held  # asleep, but it owes us and may wake up to answer
        assert sock.recv(16) == b"ok\n"
        conns.answered(sock.fileno())
        # Answered: once the peer has gone back to sleep (it may still be finishing the step
        # that sent the answer -- CI, 3.13), nothing holds time any more.
        assert _settle(conns, sock)[-1] is None
    conns.close()


def test_a_message_the_peer_reads_and_never_answers_is_forgiven(peer: int) -> None:
    conns = _peers.Connections()
    with _connect(peer) as sock:
        sock.sendall(b"sink\n")
        answers = _settle(conns, sock)
        # The peer's loop has no timer: it cannot wake by itself, and waits on nobody.
        assert answers[-1] is None
        assert len(answers) < 50
    conns.close()


def test_a_peer_working_on_the_cpu_holds_time_until_it_answers(peer: int) -> None:
    conns = _peers.Connections()
    with _connect(peer) as sock:
        sock.sendall(b"burn 150\n")
        seen = [_ask(conns, sock) for _ in range(20)]
        assert None not in seen
        assert sock.recv(16) == b"ok\n"
        conns.answered(sock.fileno())
        assert _settle(conns, sock)[-1] is None
    conns.close()


def test_a_peer_waiting_on_its_own_database_still_owes_us(peer: int) -> None:
    # The peer asks a "database" (a listener here that reads and answers later); while its
    # question is out, the peer sleeps with no timer -- but it is not done.
    with socket.create_server(("127.0.0.1", 0)) as database:
        conns = _peers.Connections()
        with _connect(peer) as sock:
            sock.sendall(f"ask {database.getsockname()[1]}\n".encode())
            inbound, _ = database.accept()
            with inbound:
                assert inbound.recv(16) == b"?\n"
                held = [_ask(conns, sock) for _ in range(30)]
                assert None not in held
                inbound.sendall(b"!\n")
                assert sock.recv(16) == b"ok\n"
        conns.close()


def test_a_peer_in_this_process_blocked_on_its_read_is_done_at_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        accepted: list[socket.socket] = []

        def serve() -> None:
            conn, _ = server.accept()
            accepted.append(conn)
            while conn.recv(64):  # reads, never answers, until we close
                pass

        thread = threading.Thread(target=serve)
        thread.start()
        conns = _peers.Connections(others_working=lambda: False)
        try:
            with _connect(server.getsockname()[1]) as sock:
                sock.sendall(b"a message nobody answers\n")
                assert _settle(conns, sock)[-1] is None
        finally:
            thread.join(5)
            for conn in accepted:
                conn.close()
        conns.close()


def test_without_the_kernels_facts_an_owed_answer_waits_for_an_event(
    peer: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A peer on another machine (here: the facts switched off) -- only our own side is known.
    # Both where _peers asks (the package's face) and where the machine's own readers ask.
    for where in (_machine, machine_peer):
        monkeypatch.setattr(where, "tcp_peer", lambda sock: None)
        monkeypatch.setattr(where, "both_ends_ours", lambda sock: None)
    conns = _peers.Connections()
    with _connect(peer) as sock:
        sock.sendall(b"sink\n")
        assert _ask(conns, sock) == math.inf  # it owes us an answer; only data ends that
        sock.sendall(b"sleep 0\n")
        assert sock.recv(16) == b"ok\n"
        conns.answered(sock.fileno())
        grace = _ask(conns, sock)
        assert grace is not None
        assert 0 < grace <= _peers.GRACE  # more of an answer may follow, for a moment
        time.sleep(_peers.GRACE)  # real-time: the grace itself
        assert _ask(conns, sock) is None
    conns.close()
