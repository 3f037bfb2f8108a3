"""The machine facts (virtualtime/_shared/_machine/), asked of real threads, sockets, processes.

Nothing here sleeps to wait: threads and children say when they are ready through events and
pipes; where the kernel changes a state asynchronously (a killed child becoming a zombie, a
thread settling into its wait) the test polls with a bounded loop and fails clearly.  Racy
facts are asked many times over.
"""

from __future__ import annotations

import hashlib
import os
import queue
import select
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tty
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from virtualtime import InvalidTypeError, InvalidValueError
from virtualtime._shared import _machine as machine
from virtualtime._shared._machine import _common as machine_offers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux facts")

loose: Any = machine  # to call with arguments of the wrong type
DEADLINE = 10.0  # real seconds a bounded poll may take before the test fails


def poll_until(what: str, condition: Callable[[], object]) -> None:
    """Ask again until ``condition()`` holds (a kernel state that changes asynchronously)."""
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"{what}: not seen within {DEADLINE} s")
        os.sched_yield()


@contextmanager
def running(target: Callable[[threading.Event, threading.Event], None]) -> Iterator[int]:
    """Run ``target(started, stop)`` in a thread until the block ends; yield its native id."""
    started, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=target, args=(started, stop), daemon=True)
    thread.start()
    assert started.wait(DEADLINE), "the thread did not start"
    assert thread.native_id is not None
    try:
        yield thread.native_id
    finally:
        stop.set()
        thread.join(DEADLINE)
        assert not thread.is_alive()


def pure_python(started: threading.Event, stop: threading.Event) -> None:
    started.set()
    n = 0
    while not stop.is_set():
        n += 1


def hashing(started: threading.Event, stop: threading.Event) -> None:
    data = b"x" * (8 << 20)  # hashlib releases the GIL for data over 2 KiB
    started.set()
    while not stop.is_set():
        hashlib.sha256(data).digest()


def querying(started: threading.Event, stop: threading.Event) -> None:
    db = sqlite3.connect(":memory:")  # sqlite3 releases the GIL while the query runs
    started.set()
    while not stop.is_set():
        db.execute(
            "with recursive r(i) as (select 1 union all select i + 1 from r where i < 200000)"
            " select count(*) from r"
        ).fetchall()
    db.close()


# ---------------------------------------------------------------------------------------------
# Threads


@pytest.mark.parametrize("work", [pure_python, hashing, querying])
def test_a_thread_doing_work_is_working_at_every_look(
    work: Callable[[threading.Event, threading.Event], None],
) -> None:
    # A pure-Python loop waits for the GIL while we hold it (futex sleep, state S): the look
    # itself releases the GIL and sees it woken.  hashlib and sqlite3 run without the GIL.
    watch = machine.ThreadWatch()
    with running(work) as tid:
        answers = [watch.working([tid]) for _ in range(100)]
    watch.close()
    assert answers == [True] * 100


def test_several_gil_waiters_watched_together_are_seen_working() -> None:
    # One release of the GIL wakes one waiter, maybe not the one being read; watched
    # together, whichever was woken is in the look (its state, or its clock read around it).
    # (Watched alone while the others are not watched, one is missed in ~5 % of looks: the
    # limit the module's notes state.)
    watch = machine.ThreadWatch()
    with running(pure_python) as a, running(pure_python) as b, running(pure_python) as c:
        together = [watch.busy([a, b, c]) for _ in range(100)]
    watch.close()
    assert all(found for found in together), together


def blocked_on(wait: Callable[[], object]) -> Callable[[threading.Event, threading.Event], None]:
    def target(started: threading.Event, stop: threading.Event) -> None:
        started.set()
        wait()

    return target


def test_threads_blocked_on_a_queue_an_event_or_a_timed_wait_are_not_working() -> None:
    jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
    event = threading.Event()
    readable, writable = os.pipe()
    waits: list[Callable[[], object]] = [
        jobs.get,
        event.wait,
        lambda: event.wait(60),  # a timed wait (a futex with a timeout, like a GIL waiter's)
        lambda: select.select([readable], [], [], 60),  # a real-time wait in a C call
    ]
    watch = machine.ThreadWatch()
    try:
        with (
            running(blocked_on(waits[0])) as t0,
            running(blocked_on(waits[1])) as t1,
            running(blocked_on(waits[2])) as t2,
            running(blocked_on(waits[3])) as t3,
        ):
            tids = [t0, t1, t2, t3]
            # Each thread needs a moment to get from started.set() into its wait.
            poll_until("the threads settle", lambda: watch.working(tids) is False)
            answers = [watch.busy(tids) for _ in range(100)]
            states = {machine.thread_state(tid) for tid in tids}
            jobs.put(None)
            event.set()
            os.write(writable, b"x")
    finally:
        watch.close()
        os.close(readable)
        os.close(writable)
    assert answers == [()] * 100
    assert states == {"S"}


def test_a_thread_that_ran_between_two_looks_is_working_at_the_next_look_only() -> None:
    jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
    done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def worker(started: threading.Event, stop: threading.Event) -> None:
        started.set()
        while (n := jobs.get()) >= 0:
            done.put(sum(range(n)))

    watch = machine.ThreadWatch()
    with running(worker) as tid:
        poll_until("the worker settles", lambda: watch.working([tid]) is False)
        results = []
        for _ in range(20):
            jobs.put(10_000)
            done.get(timeout=DEADLINE)
            # Finished and blocked again, but its CPU clock moved since the last look.
            results.append(watch.working([tid]))
            poll_until("the worker settles again", lambda: watch.working([tid]) is False)
        jobs.put(-1)
    watch.close()
    assert results == [True] * 20


def test_a_thread_that_has_exited_is_gone_and_not_working() -> None:
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    tid = thread.native_id
    assert tid is not None
    # join() returns once the Python side is done; the kernel tears the thread down after.
    poll_until("the thread's end", lambda: machine.thread_state(tid) == machine.GONE)
    assert machine.thread_cpu_ns(tid) is None
    watch = machine.ThreadWatch()
    assert watch.busy([tid]) == ()
    watch.close()


def test_cpu_clock_and_thread_list_of_this_process() -> None:
    me = threading.get_native_id()
    first = machine.thread_cpu_ns(me)
    sum(range(100_000))
    second = machine.thread_cpu_ns(me)
    assert first is not None
    assert second is not None
    assert second > first
    assert machine.thread_state(me) == "R"
    threads = machine.threads_of()
    assert threads is not None
    assert me in threads
    assert os.getpid() in threads


def test_the_state_is_read_after_the_last_parenthesis_of_the_name() -> None:
    # The command name may hold spaces and parentheses: "1 (a) b) (c) S 1 ...".
    assert machine_offers._state_of(b"42 (a) b) (c) S 1 42 42 0") == "S"
    assert machine_offers._state_of(b"42 (x) R 1") == "R"
    assert machine_offers._state_of(b"") == machine.GONE
    assert machine_offers._state_of(None) == machine.GONE


# ---------------------------------------------------------------------------------------------
# Processes


def child(code: str, *, stdin: int | None = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=stdin, stdout=subprocess.PIPE, close_fds=True
    )


def test_a_child_process_busy_or_waiting_and_then_killed() -> None:
    busy = child("print('go', flush=True)\nwhile True: pass")
    idle = child("import sys; print('go', flush=True); sys.stdin.read()")
    watch = machine.ProcessWatch()
    try:
        assert busy.stdout is not None
        assert idle.stdout is not None
        assert idle.stdin is not None
        assert busy.stdout.readline() == b"go\n"
        assert idle.stdout.readline() == b"go\n"
        assert [watch.busy([busy.pid]) for _ in range(50)] == [(busy.pid,)] * 50
        poll_until("the idle child settles", lambda: watch.working([idle.pid]) is False)
        assert [watch.busy([busy.pid, idle.pid]) for _ in range(50)] == [(busy.pid,)] * 50
        assert machine.process_exit(busy.pid) is None
        assert machine.process_state(idle.pid) == "S"

        busy.kill()
        poll_until("the killed child's exit", lambda: machine.process_exit(busy.pid))
        ended = machine.process_exit(busy.pid)
        assert ended == machine.ProcessExit(busy.pid, -9)
        assert ended is not None
        assert ended.killed_by == 9
        assert machine.process_state(busy.pid) == "Z"  # not reaped: the owner still can
        assert watch.busy([busy.pid, idle.pid]) == ()
        assert busy.wait() == -9  # process_exit left it to its owner

        idle.stdin.close()
        assert idle.wait() == 0
        # Reaped: gone, and its fate is no longer known.
        assert machine.process_exit(idle.pid) == machine.ProcessExit(idle.pid, None)
        assert machine.process_state(idle.pid) == machine.GONE
        assert machine.process_cpu_ns(idle.pid) is None
        assert watch.busy([idle.pid]) == ()
    finally:
        watch.close()
        for process in (busy, idle):
            process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()


def test_the_exit_of_a_process_that_is_not_our_child_is_read_from_procfs() -> None:
    # The child forks a grandchild that exits with 7 and stays a zombie (its parent never
    # reaps it): ours to ask about, not ours to wait for.
    parent = child(
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(7)\n"
        "print(pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    try:
        assert parent.stdout is not None
        assert parent.stdin is not None
        grandchild = int(parent.stdout.readline())
        poll_until("the grandchild's exit", lambda: machine.process_exit(grandchild))
        assert machine.process_exit(grandchild) == machine.ProcessExit(grandchild, 7)
        cpu = machine.process_cpu_ns(grandchild)  # a zombie still has its clock
        assert cpu is not None
        assert cpu > 0
        parent.stdin.close()
        assert parent.wait() == 0
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()


def test_a_process_whose_only_busy_thread_is_not_the_main_one_is_working() -> None:
    process = child(
        "import sys, threading\n"
        "def spin():\n"
        "    while True: pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "print('go', flush=True)\n"
        "sys.stdin.read()\n"
    )
    watch = machine.ProcessWatch()
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"go\n"
        answers = [watch.working([process.pid]) for _ in range(50)]
        threads = machine.threads_of(process.pid)
    finally:
        watch.close()
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    assert answers == [True] * 50
    assert threads is not None
    assert len(threads) == 2


# ---------------------------------------------------------------------------------------------
# Sockets


@contextmanager
def tcp_pair(host: str = "127.0.0.1") -> Iterator[tuple[socket.socket, socket.socket]]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, 0), family=family) as listener:
        client = socket.create_connection(listener.getsockname()[:2])
        server, _ = listener.accept()
    with client, server:
        yield client, server


def wait_readable(sock: socket.socket) -> None:
    ready, _, _ = select.select([sock], [], [], DEADLINE)
    assert ready, "nothing arrived"


def test_bytes_sent_over_loopback_tcp_and_not_read_are_counted_on_both_ends() -> None:
    with tcp_pair() as (client, server):
        for size in range(1, 101):
            client.sendall(b"q" * size)
            wait_readable(server)
            poll_until("the bytes arrive", lambda: machine.unread_bytes(server) == size)  # noqa: B023
            peer = machine.tcp_peer(client)
            assert peer is not None
            assert peer.inode == machine.socket_inode(server)
            assert peer.unread == size  # what the peer program has not read yet
            assert peer.uid == os.getuid()
            assert peer.state == 1
            assert machine.unacknowledged_bytes(server) == 0  # the server sent nothing
            assert server.recv(size) == b"q" * size
            assert machine.unread_bytes(server) == 0
            peer = machine.tcp_peer(client)
            assert peer is not None
            assert peer.unread == 0


def test_tcp_info_counts_bytes_and_sees_the_peer_close() -> None:
    with tcp_pair() as (client, server):
        before = machine.tcp_info(server)
        client.sendall(b"x" * 1000)
        wait_readable(server)
        poll_until(
            "the byte counter moves",
            lambda: (info := machine.tcp_info(server)) is not None and info.bytes_received == 1000,
        )
        sent = machine.tcp_info(client)
        assert server.recv(1000) == b"x" * 1000  # closing with unread bytes would reset
        server.close()
        poll_until(
            "the peer's close",
            lambda: (info := machine.tcp_info(client)) is not None and info.state == 8,
        )
        closed = machine.tcp_info(client)
    assert before is not None
    assert before.bytes_received == 0
    assert before.state_name == "ESTABLISHED"
    assert sent is not None
    assert sent.bytes_sent == 1000
    assert sent.notsent_bytes == 0
    assert sent.size >= 232  # Linux 6.1's struct; fields of newer kernels are left out
    assert closed is not None
    assert closed.state_name == "CLOSE_WAIT"


def test_tcp_facts_of_what_is_not_a_tcp_connection_are_none() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        assert machine.unread_bytes(listener) is None
        assert machine.tcp_peer(listener) is None
        assert machine.tcp_info(listener) is not None  # a listener has TCP_INFO (state 10)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        assert machine.tcp_info(udp) is None
        assert machine.tcp_peer(udp) is None
    with socket.socket() as unconnected:
        assert machine.tcp_peer(unconnected) is None
        assert machine.unix_peer_pid(unconnected) is None
    readable, writable = os.pipe()
    try:
        assert machine.tcp_info(readable) is None
        assert machine.socket_inode(readable) is None
        assert machine.unix_peer_inode(readable) is None
        assert machine.unix_peer_pid(readable) is None
        assert machine.tcp_peer(readable) is None
        assert machine.peer_pids(readable) is None
        assert machine.both_ends_ours(readable) is None
    finally:
        os.close(readable)
        os.close(writable)


@pytest.mark.parametrize("host", ["::1", "dual"])
def test_the_peer_of_an_ipv6_or_dual_stack_connection_is_found(host: str) -> None:
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6; the test needs ::1")
    if host == "dual":  # an IPv6 client of an IPv4 server, through a v4-mapped address
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.socket(socket.AF_INET6)
            client.connect(("::ffff:127.0.0.1", listener.getsockname()[1]))
            server, _ = listener.accept()
        pair = (client, server)
    else:
        with socket.create_server(("::1", 0), family=socket.AF_INET6) as listener:
            client = socket.create_connection(listener.getsockname()[:2])
            server, _ = listener.accept()
        pair = (client, server)
    with pair[0], pair[1]:
        client.sendall(b"abc")
        wait_readable(server)
        for lookup in (machine.tcp_peer, lambda s: machine.tcp_peer(s.fileno())):
            peer = lookup(client)
            assert peer is not None
            assert peer.inode == machine.socket_inode(server)
        assert machine.both_ends_ours(client) is True


def test_the_procfs_fallback_finds_the_same_peer_as_netlink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tcp_pair() as (client, server):
        client.sendall(b"12345")
        wait_readable(server)
        through_netlink = machine.tcp_peer(client)
        monkeypatch.setattr(machine_offers, "_AF_NETLINK", None)
        through_procfs = machine.tcp_peer(client)
        assert machine.both_ends_ours(client) is True
    assert through_netlink is not None
    assert through_netlink == through_procfs
    assert through_netlink.unread == 5


def test_a_unix_socketpair_counts_unread_and_untaken_bytes_and_knows_its_peer() -> None:
    a, b = socket.socketpair()
    with a, b:
        assert machine.unacknowledged_bytes(a) == 0
        a.sendall(b"x" * 100)
        assert machine.unread_bytes(b) == 100
        untaken = machine.unacknowledged_bytes(a)
        assert untaken is not None
        assert untaken >= 100
        b.recv(50)
        assert machine.unread_bytes(b) == 50
        assert machine.unacknowledged_bytes(a) == untaken  # freed only once read completely
        b.recv(50)
        assert machine.unacknowledged_bytes(a) == 0
        assert machine.unix_peer_inode(a) == machine.socket_inode(b)
        assert machine.unix_peer_inode(b) == machine.socket_inode(a)
        assert machine.unix_peer_pid(a) == os.getpid()
        assert machine.both_ends_ours(a) is True
        assert machine.peer_pids(a) == frozenset({os.getpid()})


def test_the_peer_process_of_a_loopback_connection_is_the_child_server() -> None:
    server = child(
        "import socket, sys\n"
        "listener = socket.create_server(('127.0.0.1', 0))\n"
        "print(listener.getsockname()[1], flush=True)\n"
        "connection, _ = listener.accept()\n"
        "print('accepted', flush=True)\n"
        "sys.stdin.read()\n"
    )
    try:
        assert server.stdout is not None
        assert server.stdin is not None
        port = int(server.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as client:
            assert server.stdout.readline() == b"accepted\n"
            client.sendall(b"hello")
            poll_until("the bytes reach the child's socket", lambda: _peer_unread(client) == 5)
            start = time.perf_counter()
            pids = machine.peer_pids(client)
            cost = time.perf_counter() - start
            ours = machine.both_ends_ours(client)
            peer = machine.tcp_peer(client)
        server.stdin.close()
        assert server.wait(DEADLINE) == 0
    finally:
        server.kill()
        server.wait()
        assert server.stdout is not None
        server.stdout.close()
    assert pids == frozenset({server.pid})
    assert ours is False
    assert peer is not None
    assert peer.inode > 0
    assert cost < 1.0  # a scan of every process's descriptors: once per connection


def _peer_unread(sock: socket.socket) -> int | None:
    peer = machine.tcp_peer(sock)
    return None if peer is None else peer.unread


def test_the_peer_of_a_socketpair_end_handed_to_a_child_is_the_child() -> None:
    # SO_PEERCRED names whoever created the pair -- us -- even after the end moved on: the
    # pitfall peer_pids avoids by finding the end itself.
    ours, theirs = socket.socketpair()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys; os.write(int(sys.argv[1]), b'go'); sys.stdin.read()",
            str(theirs.fileno()),
        ],
        stdin=subprocess.PIPE,
        pass_fds=[theirs.fileno()],
    )
    theirs.close()
    try:
        with ours:
            wait_readable(ours)
            assert ours.recv(2) == b"go"
            stale = machine.unix_peer_pid(ours)
            pids = machine.peer_pids(ours)
            both = machine.both_ends_ours(ours)
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(DEADLINE) == 0
    finally:
        process.kill()
        process.wait()
    assert stale == os.getpid()
    assert pids == frozenset({process.pid})
    assert both is False


# ---------------------------------------------------------------------------------------------
# Pipes and terminals


def test_a_pipe_counts_its_bytes_at_either_end() -> None:
    readable, writable = os.pipe()
    try:
        os.write(writable, b"z" * 77)
        assert machine.unread_bytes(readable) == 77
        assert machine.unread_bytes(writable) == 77
        assert machine.unacknowledged_bytes(readable) is None
        assert machine.terminal_unread_bytes(readable) is None
        os.read(readable, 70)
        assert machine.unread_bytes(readable) == 7
    finally:
        os.close(readable)
        os.close(writable)


def test_a_pty_counts_bytes_still_on_their_way_through_the_kernel() -> None:
    # Bytes written to one side reach the other through a kernel work queue; FIONREAD alone
    # misses them a few percent of the time, right after the write.
    master, slave = os.openpty()
    try:
        tty.setraw(slave)
        for _ in range(300):
            os.write(slave, b"hello")
            assert machine.terminal_unread_bytes(master) == 5
            assert os.read(master, 5) == b"hello"
            os.write(master, b"hi")
            assert machine.terminal_unread_bytes(slave) == 2
            assert os.read(slave, 2) == b"hi"
        assert machine.terminal_unread_bytes(master) == 0
    finally:
        os.close(master)
        os.close(slave)


# ---------------------------------------------------------------------------------------------
# Degrading, and bad input


def test_without_procfs_the_facts_it_gives_are_unknown_and_the_clocks_still_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(machine_offers, "_PROC", "/nonexistent-procfs")
    me = threading.get_native_id()
    assert machine.thread_state(me) is None
    assert machine.threads_of() is None
    assert machine.process_state(os.getpid()) is None
    assert machine.pids_holding(1) is None
    assert machine.ProcessWatch().working([os.getpid()]) is None
    assert machine.thread_cpu_ns(me) is not None
    assert machine.process_cpu_ns(os.getpid()) is not None
    # The CPU clocks alone say "working" when a clock moved; a still clock may be a thread
    # waiting for the GIL (nothing woke it), so "not working" is unknown.
    asked: queue.SimpleQueue[bool] = queue.SimpleQueue()
    hashed: queue.SimpleQueue[None] = queue.SimpleQueue()

    def hash_when_asked(started: threading.Event, stop: threading.Event) -> None:
        started.set()
        while asked.get():
            hashlib.sha256(b"x" * 100_000).digest()
            hashed.put(None)

    watch = machine.ThreadWatch()
    with running(hash_when_asked) as tid:
        answers = []
        for _ in range(20):
            asked.put(True)
            hashed.get(timeout=DEADLINE)  # it ran since the last look
            answers.append(watch.working([tid]))
        asked.put(False)
    event = threading.Event()
    with running(blocked_on(event.wait)) as tid:
        blocked = [watch.working([tid]) for _ in range(20)]
        event.set()
    watch.close()
    assert answers[1:] == [True] * 19  # the first look has no earlier reading to compare
    assert blocked[1:] == [None] * 19  # the first look may still see it start
    with tcp_pair() as (client, _server):
        assert machine.both_ends_ours(client) is None  # the peer inode is known; whose, not


def test_without_the_ioctls_or_netlink_the_facts_are_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(machine_offers, "_FIONREAD", None)
    monkeypatch.setattr(machine_offers, "_OUTQ", None)
    monkeypatch.setattr(machine_offers, "_TCP_INFO", None)
    monkeypatch.setattr(machine_offers, "_AF_NETLINK", None)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x")
        assert machine.unread_bytes(b) is None
        assert machine.unacknowledged_bytes(a) is None
        assert machine.unix_peer_inode(a) is None
        assert machine.both_ends_ours(a) is None
        assert machine.peer_pids(a) == frozenset({os.getpid()})  # SO_PEERCRED, as a fallback
    with tcp_pair() as (client, _server):
        assert machine.tcp_info(client) is None
        assert machine.tcp_peer(client) is None


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: loose.thread_state("1"), InvalidTypeError, "tid must be an int, got '1'"),
        (lambda: machine.thread_state(True), InvalidTypeError, "tid must be an int, got True"),
        (lambda: machine.thread_cpu_ns(0), InvalidValueError, "tid must be a positive id, got 0"),
        (lambda: machine.process_exit(-5), InvalidValueError, "pid must be a positive id, got -5"),
        (lambda: loose.pids_holding(1.5), InvalidTypeError, "inode must be an int, got 1.5"),
        (lambda: machine.unread_bytes(-1), InvalidValueError, "file must be an open descriptor"),
        (lambda: loose.unread_bytes("x"), InvalidTypeError, "or have a fileno() method, got 'x'"),
        (lambda: loose.ThreadWatch().busy([1, None]), InvalidTypeError, "got None"),
        (lambda: machine.ProcessWatch().busy([0]), InvalidValueError, "pid must be a positive"),
    ],
)
def test_bad_input_is_refused_with_the_rule(
    call: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        call()
    assert message in str(caught.value)


def test_a_watch_refuses_bad_input_before_it_changes_what_it_remembers() -> None:
    watch = machine.ThreadWatch()
    event = threading.Event()
    with running(blocked_on(event.wait)) as tid:
        poll_until("the thread settles", lambda: watch.working([tid]) is False)
        remembered = dict(watch._last)
        with pytest.raises(InvalidTypeError):
            watch.busy([tid, typing.cast(Any, "2")])
        event.set()
    watch.close()
    assert remembered
    assert watch._last == {}
    assert remembered != {}


def test_whether_procfs_exists_is_known_before_any_loop_asks() -> None:
    # A loop's idle path must not stat anything (anyio's blockbuster turns a blocking call on
    # a loop's thread into an error that kills the loop): the answer for the real /proc is
    # known from the import, in a fresh interpreter.
    code = "import virtualtime._shared._machine._common as m; print(m._proc_seen)"
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert shown == f"{{'/proc': {sys.platform.startswith('linux')}}}"
