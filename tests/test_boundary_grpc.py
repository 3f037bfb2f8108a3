"""The boundary with grpc.aio: a call in flight is outside work, and its deadline is real time.

gRPC runs a call in its C core, on sockets the loop never sees, and tells the loop through a
socketpair when an operation has finished; its deadlines live on the real clock.  Each case
runs a real gRPC server on 127.0.0.1 -- in another process, or in a thread of this one --
whose handlers take real time (``time.sleep`` there is the peer's own work), while a task of
the virtual loop has a long timer pending: virtual time must not run away while the call is
in flight, the answer must arrive, and a timer must fire only after as much real time as its
delay.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc._cython import cygrpc

import virtualtime
from virtualtime._engine._foreign import _tasks_made, calls_in_flight

_SERVICE = "vt.Peer"

# The peer: four methods, one of each kind, each taking the real time the request asks for.
# Requests and answers are raw bytes (no generated code): "<seconds>" or "<count>,<seconds>".
_PEER = """
import sys, time
from concurrent import futures
import grpc

def nap(request, context):
    time.sleep(float(request))  # real-time: the peer's own work before it answers
    return request

def drip(request, context):
    count, pause = request.split(b",")
    for i in range(int(count)):
        time.sleep(float(pause))  # real-time: the peer's work between two messages
        yield b"%d" % i

def gather(requests, context):
    parts = list(requests)
    time.sleep(float(parts[-1]))  # real-time: the peer's own work before it answers
    return b",".join(parts)

def echo(requests, context):
    for request in requests:
        time.sleep(float(request))  # real-time: the peer's work before each echo
        yield request

def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Nap": grpc.unary_unary_rpc_method_handler(nap),
        "Drip": grpc.unary_stream_rpc_method_handler(drip),
        "Gather": grpc.stream_unary_rpc_method_handler(gather),
        "Echo": grpc.stream_stream_rpc_method_handler(echo),
    })
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port
"""

_PEER_MAIN = """
server, port = serve()
print(port, flush=True)
sys.stdin.read()  # until the test closes our stdin
server.stop(None)
"""


def _peer_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"SERVICE": _SERVICE}
    exec(_PEER, namespace)
    return namespace


@pytest.fixture(scope="module")
def process_peer() -> Iterator[str]:
    """A gRPC server in another process; its address."""
    code = f"SERVICE = {_SERVICE!r}\n" + _PEER + _PEER_MAIN
    peer = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert peer.stdout is not None
    assert peer.stdin is not None
    try:
        port = int(peer.stdout.readline())
        yield f"127.0.0.1:{port}"
    finally:
        peer.stdin.close()
        peer.wait(timeout=10)
        peer.stdout.close()


@pytest.fixture(scope="module")
def thread_peer() -> Iterator[str]:
    """A gRPC server in threads of this process; its address."""
    server, port = _peer_namespace()["serve"]()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait()


def _method(name: str) -> str:
    return f"/{_SERVICE}/{name}"


class _Watch:
    """Real and virtual time around one call, and a long timer that must not fire meanwhile."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.sleeper = asyncio.ensure_future(asyncio.sleep(1000))
        self.virtual = self.loop.time()
        self.real = time.monotonic()  # real-time: how long the call really took

    def finish(self) -> tuple[float, float]:
        """(virtual seconds, real seconds) since the start; the long timer must still wait."""
        virtual = self.loop.time() - self.virtual
        real = time.monotonic() - self.real
        assert not self.sleeper.done(), f"virtual time ran away: +{virtual} s in {real:.3f} s"
        self.sleeper.cancel()
        return virtual, real


def _run(address: str, body: Callable[[grpc.aio.Channel], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with grpc.aio.insecure_channel(address) as channel:
            return await body(channel)

    return virtualtime.run(main())


# ------------------------------------------------------------ no runaway while a call is in flight


@pytest.mark.parametrize("peer", ["process_peer", "thread_peer"])
def test_a_unary_call_holds_virtual_time_until_its_answer(
    peer: str, request: pytest.FixtureRequest
) -> None:
    address: str = request.getfixturevalue(peer)

    async def body(channel: grpc.aio.Channel) -> list[tuple[bytes, float, float]]:
        nap = channel.unary_unary(_method("Nap"))
        results = []
        for _ in range(3):
            watch = _Watch()
            answer = await nap(b"0.3")
            results.append((answer, *watch.finish()))
        return results

    for answer, virtual, real in _run(address, body):
        assert answer == b"0.3"
        assert real >= 0.3
        assert 0 <= virtual <= real


def test_a_call_holds_virtual_time_under_a_task_factory_too(thread_peer: str) -> None:
    # Tasks a factory makes are not numbered by the loop: every idle round then looks.
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, /, **kwargs: Any) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def body(channel: grpc.aio.Channel) -> tuple[bytes, float, float]:
        asyncio.get_running_loop().set_task_factory(factory)
        watch = _Watch()
        answer = await channel.unary_unary(_method("Nap"))(b"0.3")
        return (answer, *watch.finish())

    answer, virtual, real = _run(thread_peer, body)
    assert answer == b"0.3"
    assert 0 <= virtual <= real


def test_a_timer_due_during_a_call_fires_after_as_much_real_time(process_peer: str) -> None:
    async def body(channel: grpc.aio.Channel) -> tuple[float, float, float, float]:
        loop = asyncio.get_running_loop()
        start = time.monotonic()  # real-time: when the short timer really fired

        async def short() -> tuple[float, float]:
            await asyncio.sleep(0.1)
            return loop.time(), time.monotonic() - start

        timer = asyncio.ensure_future(short())
        answer = await channel.unary_unary(_method("Nap"))(b"0.4")
        assert answer == b"0.4"
        virtual_at, real_at = await timer
        return virtual_at, real_at, loop.time(), time.monotonic() - start

    virtual_at, real_at, virtual_end, real_end = _run(process_peer, body)
    assert virtual_at == 0.1  # the timer's own instant, exactly
    assert 0.1 <= real_at < real_end
    assert virtual_end == 0.1  # and time stood still again for the rest of the call
    assert real_end >= 0.4


def test_streaming_calls_of_every_kind_hold_virtual_time(process_peer: str) -> None:
    async def body(channel: grpc.aio.Channel) -> dict[str, tuple[Any, float, float]]:
        results: dict[str, tuple[Any, float, float]] = {}

        watch = _Watch()
        drops = [m async for m in channel.unary_stream(_method("Drip"))(b"3,0.1")]
        results["unary-stream"] = (drops, *watch.finish())

        async def parts() -> AsyncIterator[bytes]:
            for part in (b"a", b"b", b"0.3"):
                yield part

        watch = _Watch()
        joined = await channel.stream_unary(_method("Gather"))(parts())
        results["stream-unary"] = (joined, *watch.finish())

        async def naps() -> AsyncIterator[bytes]:
            for part in (b"0.1", b"0.2"):
                yield part

        watch = _Watch()
        echoed = [m async for m in channel.stream_stream(_method("Echo"))(naps())]
        results["stream-stream"] = (echoed, *watch.finish())
        return results

    results = _run(process_peer, body)
    assert results["unary-stream"][0] == [b"0", b"1", b"2"]
    assert results["stream-unary"][0] == b"a,b,0.3"
    assert results["stream-stream"][0] == [b"0.1", b"0.2"]
    for kind, (_, virtual, real) in results.items():
        assert real >= 0.3, kind
        assert 0 <= virtual <= real, kind


# ------------------------------------------------------------ deadlines


def test_a_grpc_deadline_is_real_time(process_peer: str) -> None:
    # gRPC's C core keeps the deadline on the real clock: the call ends after 0.2 real
    # seconds, whatever virtual time does, and virtual time does not move meanwhile.
    async def body(channel: grpc.aio.Channel) -> list[tuple[grpc.StatusCode, float, float]]:
        nap = channel.unary_unary(_method("Nap"))
        results = []
        for _ in range(2):
            watch = _Watch()
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await nap(b"1.0", timeout=0.2)
            results.append((error.value.code(), *watch.finish()))
        return results

    for code, virtual, real in _run(process_peer, body):
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 0.2 <= real < 0.9
        assert virtual == 0.0


def test_a_grpc_deadline_stays_real_time_under_patched_clocks(process_peer: str) -> None:
    # With patch_time, time.time() on the loop's thread is virtual; grpc.aio turns timeout=
    # into a deadline with it, and its C core compares that with the real clock: an hour of
    # virtual time first would put the deadline an hour in the past or future.  grpc is one
    # of the modules that keep real clocks.
    async def main() -> grpc.StatusCode:
        await asyncio.sleep(3600)
        async with grpc.aio.insecure_channel(process_peer) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await channel.unary_unary(_method("Nap"))(b"1.0", timeout=0.2)
        return error.value.code()

    start = time.monotonic()  # real-time: how long the deadline really took
    assert virtualtime.run(main(), patch_time=True) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - start < 0.9


def test_asyncio_timeout_around_a_call_is_a_virtual_deadline(process_peer: str) -> None:
    # The loop's own timeout fires at its virtual instant, exactly, after as much real time
    # as it says (the rule for timers while outside work is pending); the call is cancelled.
    async def body(channel: grpc.aio.Channel) -> tuple[float, float, bool]:
        loop = asyncio.get_running_loop()
        call = channel.unary_unary(_method("Nap"))(b"1.0")
        start = time.monotonic()  # real-time: when the timeout really fired
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await call
        return loop.time(), time.monotonic() - start, call.cancelled()

    virtual, real, cancelled = _run(process_peer, body)
    assert virtual == 0.2
    assert 0.2 <= real < 0.9
    assert cancelled


# ------------------------------------------------------------ a server in the virtual loop


def test_a_grpc_aio_server_in_the_loop_serves_in_virtual_time() -> None:
    # A server waiting for requests owes the loop nothing, and its handler runs in the loop:
    # the handler's hour-long sleep is a jump, and the client (a thread here, blocked in
    # gRPC's C core) gets the answer at once.
    async def nap(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        await asyncio.sleep(3600)
        return b"%.1f" % asyncio.get_running_loop().time()

    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            _SERVICE, {"Nap": grpc.unary_unary_rpc_method_handler(nap)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        answer: asyncio.Future[bytes] = loop.create_future()

        def client() -> None:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                reply = channel.unary_unary(_method("Nap"))(b"", timeout=30)
            loop.call_soon_threadsafe(answer.set_result, reply)

        start = time.monotonic()  # real-time: how long the hour took
        caller = futures.ThreadPoolExecutor(1)
        caller.submit(client)
        try:
            reply = await answer
        finally:
            caller.shutdown(wait=False)
        real = time.monotonic() - start
        await server.stop(None)
        return reply, real

    reply, real = virtualtime.run(main())
    assert reply == b"3600.0"
    assert real < 3


# ------------------------------------------------------------ canaries


def test_canary_grpc_runs_each_kind_of_call_in_tasks_with_these_coroutines() -> None:
    # _foreign._call_codes: the call classes' coroutines in grpc.aio._call, and the compiled
    # _AioCall's status waiter.
    from grpc.aio import _call

    for cls, name in (
        (_call.UnaryUnaryCall, "_invoke"),
        (_call.UnaryStreamCall, "_send_unary_request"),
        (_call.StreamUnaryCall, "_conduct_rpc"),
        (_call.StreamStreamCall, "_prepare_rpc"),
    ):
        assert inspect.iscoroutinefunction(vars(cls)[name]), (cls, name)
    status = cygrpc._AioCall._handle_status_once_received
    assert status.__code__.co_name == "_handle_status_once_received"


def test_canary_calls_in_flight_sees_each_kind_of_call_and_only_while_it_flies(
    thread_peer: str,
) -> None:
    async def body(channel: grpc.aio.Channel) -> list[tuple[str, bool, bool]]:
        loop = asyncio.get_running_loop()
        seen = []

        async def parts() -> AsyncIterator[bytes]:
            yield b"0.2"

        calls: list[tuple[str, Callable[[], Any]]] = [
            ("unary-unary", lambda: channel.unary_unary(_method("Nap"))(b"0.2")),
            ("unary-stream", lambda: channel.unary_stream(_method("Drip"))(b"1,0.2")),
            ("stream-unary", lambda: channel.stream_unary(_method("Gather"))(parts())),
            ("stream-stream", lambda: channel.stream_stream(_method("Echo"))(parts())),
        ]
        for kind, start in calls:
            call = start()
            await asyncio.sleep(0)
            flying = calls_in_flight(loop)
            if isinstance(call, grpc.aio.UnaryUnaryCall | grpc.aio.StreamUnaryCall):
                await call
            else:
                async for _ in call:
                    pass
            await call.code()
            seen.append((kind, flying, calls_in_flight(loop)))
        return seen

    for kind, flying, after in _run(thread_peer, body):
        assert (kind, flying, after) == (kind, True, False)


def test_canary_grpc_binds_its_poller_to_the_loop_with_a_reader() -> None:
    # _foreign._is_poller_reader: the loop's reader for gRPC's socketpair is a
    # functools.partial of PollerCompletionQueue._handle_events.
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        async with grpc.aio.insecure_channel("127.0.0.1:1"):
            selector = loop._vt_selector  # type: ignore[attr-defined]
            owners = []
            for key in selector.get_map().values():
                callback = key.data[0]._callback
                owner = getattr(getattr(callback, "func", None), "__self__", None)
                owners.append(type(owner).__name__)
            return owners

    assert "PollerCompletionQueue" in virtualtime.run(main())


def test_canary_the_virtual_loop_counts_the_tasks_it_makes() -> None:
    # _foreign._tasks_made: a pass over the loop's tasks happens only after a task was made;
    # without the count every idle round of a loop gRPC is bound to would look at every task.
    async def main() -> tuple[str | None, str | None, str | None]:
        loop = asyncio.get_running_loop()
        before = _tasks_made(loop)
        again = _tasks_made(loop)
        await asyncio.create_task(asyncio.sleep(0))
        return before, again, _tasks_made(loop)

    before, again, after = virtualtime.run(main())
    assert before is not None
    assert again == before
    assert after not in (None, before)
