"""Boundary benchmark: real threads against virtual timeouts, on an idle and on a loaded machine.

The outside-work model (``virtualtime/_engine/_outside.py``) promises two things: a real peer
never loses to a virtual timeout, and an idle outside world costs no real time.  This script
runs the thread cases of issue 35 -- aiosqlite, SQLAlchemy on aiosqlite, ``to_thread`` jobs
back to back, a job blocked on a process pool or on a plain future, a CPU-bound peer thread,
and the idle cases (a same-thread ``call_soon_threadsafe``, a portal caller, a heartbeat
thread) -- with 0, 2 and 4 busy processes started beside it, and prints one Markdown table:
for each case, how many answers lost to a timeout (or raised a false ``DeadlockError``) out of
how many, and the real seconds it took.  Then the cost of one idle round while a thread that
spoke to the loop is alive, with 1 and 10 other threads.

Run by hand, never by CI or pytest (it takes about a minute, and its point is to load the
machine)::

    .venv/bin/python bench/boundary.py
    .venv/bin/python bench/boundary.py --loads 0 4 --cases aiosqlite-slow,cpu-peer

Needs ``aiosqlite`` and ``sqlalchemy`` (the test extra).  The socket and peer-process cases
of the issue are not here yet: they come with the next slice of the model.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import Integer, String, select  # noqa: E402
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column  # noqa: E402

import virtualtime  # noqa: E402

Result = tuple[int, int]
"""(lost, total): answers that lost to a timeout or a false deadlock, out of how many."""


def _burn(seconds: float) -> int:
    end = time.perf_counter() + seconds
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return spins


def _slept(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


# ------------------------------------------------------------------------------ cases


async def aiosqlite_slow() -> Result:
    import aiosqlite

    lost = 0
    async with aiosqlite.connect(":memory:") as db:
        await db.create_function("burn", 1, _burn)
        for seconds in (0.1, 0.4, 0.1, 0.4):
            try:
                async with asyncio.timeout(5):
                    await (await db.execute("SELECT burn(?)", (seconds,))).fetchone()
            except TimeoutError:
                lost += 1
    return lost, 4


async def aiosqlite_quick_after_work() -> Result:
    import aiosqlite

    lost = 0
    async with aiosqlite.connect(":memory:") as db:
        for i in range(20):
            _burn(0.06)
            try:
                async with asyncio.timeout(5):
                    await (await db.execute("SELECT ?", (i,))).fetchone()
            except TimeoutError:
                lost += 1
    return lost, 20


async def aiosqlite_no_timer() -> Result:
    import aiosqlite

    async with aiosqlite.connect(":memory:") as db:
        await db.create_function("burn", 1, _burn)
        try:
            await (await db.execute("SELECT burn(?)", (0.4,))).fetchone()
        except virtualtime.DeadlockError:
            return 1, 1
    return 0, 1


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(20))


async def sqlalchemy_orm() -> Result:
    lost = 0
    with tempfile.TemporaryDirectory() as folder:
        engine = create_async_engine(f"sqlite+aiosqlite:///{folder}/bench.db")
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
            sessions = async_sessionmaker(engine, expire_on_commit=False)
            async with sessions() as session:
                for i in range(300):
                    if i % 5 == 0:
                        _burn(0.06)
                    try:
                        async with asyncio.timeout(5):
                            if i % 2 == 0:
                                session.add(Item(name=f"item {i}"))
                                await session.commit()
                            else:
                                (await session.scalars(select(Item))).all()
                    except TimeoutError:
                        lost += 1
                        await session.rollback()
        finally:
            await engine.dispose()
    return lost, 300


async def to_thread_back_to_back() -> Result:
    lost = 0
    for _ in range(30):
        try:
            await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.1), 1)
        except TimeoutError:
            lost += 1
    return lost, 30


async def job_on_process_pool() -> Result:
    lost = 0
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        pool.submit(abs, -1).result()
        for timeout in (None, 10.0):
            try:
                await asyncio.wait_for(
                    asyncio.to_thread(lambda: pool.submit(_slept, 0.3).result()), timeout
                )
            except (TimeoutError, virtualtime.DeadlockError):
                lost += 1
    return lost, 2


async def job_on_plain_future() -> Result:
    lost = 0
    for timeout in (None, 10.0):
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        worker = threading.Thread(target=lambda f=future: f.set_result(_burn(0.3)))
        worker.start()
        try:
            await asyncio.wait_for(asyncio.to_thread(future.result), timeout)
        except (TimeoutError, virtualtime.DeadlockError):
            lost += 1
        finally:
            worker.join()
    return lost, 2


def _serve(requests: queue.SimpleQueue[asyncio.Future[int] | None]) -> None:
    while (future := requests.get()) is not None:
        spins = _burn(0.05)
        future.get_loop().call_soon_threadsafe(future.set_result, spins)


async def cpu_peer() -> Result:
    requests: queue.SimpleQueue[asyncio.Future[int] | None] = queue.SimpleQueue()
    peer = threading.Thread(target=_serve, args=(requests,))
    peer.start()
    lost = 0
    try:
        for _ in range(30):
            future = asyncio.get_running_loop().create_future()
            requests.put(future)
            try:
                await asyncio.wait_for(asyncio.shield(future), 1)
            except TimeoutError:
                lost += 1
                await future
    finally:
        requests.put(None)
        peer.join()
    return lost, 30


async def same_thread_week() -> Result:
    loop = asyncio.get_running_loop()
    for _ in range(7 * 24):
        fired = asyncio.Event()
        loop.call_soon_threadsafe(loop.call_later, 3600, fired.set)
        await fired.wait()
    return 0, 0


async def heartbeat_hour() -> Result:
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.001):
            _burn(0.0002)

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        for _ in range(3600):
            await asyncio.sleep(1)
    finally:
        stop.set()
        thread.join()
    return 0, 0


def portal_calls() -> Result:
    import anyio
    import anyio.from_thread

    with anyio.from_thread.start_blocking_portal(
        "asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    ) as portal:
        for _ in range(50):
            portal.call(anyio.sleep, 3600)
    return 0, 0


CASES: dict[str, tuple[str, Callable[[], Coroutine[Any, Any, Result] | Result]]] = {
    "aiosqlite-slow": (
        "aiosqlite: 0.1 s and 0.4 s queries under timeout(5), twice",
        aiosqlite_slow,
    ),
    "aiosqlite-quick": (
        "aiosqlite: 20 quick queries, each after 60 ms of work",
        aiosqlite_quick_after_work,
    ),
    "aiosqlite-no-timer": ("aiosqlite: a 0.4 s query with no timer pending", aiosqlite_no_timer),
    "orm": ("SQLAlchemy ORM on aiosqlite (file), 300 queries", sqlalchemy_orm),
    "to-thread": ("30 x wait_for(to_thread(time.sleep, 0.1), 1)", to_thread_back_to_back),
    "process-pool": ("to_thread blocked on a ProcessPoolExecutor future", job_on_process_pool),
    "plain-future": ("to_thread blocked on a plain Future a thread completes", job_on_plain_future),
    "cpu-peer": ("a peer thread needing 50 ms of CPU per answer, 30 requests", cpu_peer),
    "same-thread": ("idle: same-thread call_soon_threadsafe, a virtual week", same_thread_week),
    "heartbeat": ("idle: a silent heartbeat thread, a virtual hour", heartbeat_hour),
    "portal": ("idle: 50 portal calls of sleep(3600)", portal_calls),
}


# ------------------------------------------------------------------------------ harness


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run_case(key: str) -> tuple[Result, float]:
    case = CASES[key][1]
    start = time.monotonic()
    outcome = case()
    result = virtualtime.run(outcome) if inspect.iscoroutine(outcome) else outcome
    assert isinstance(result, tuple)
    return result, time.monotonic() - start


def idle_round_cost(others: int, rounds: int = 3000) -> float:
    """Real microseconds per idle round with ``others`` other threads, one of which spoke."""
    release = threading.Event()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        threads = [
            threading.Thread(
                target=(lambda: (loop.call_soon_threadsafe(int), release.wait()))
                if i == 0
                else release.wait
            )
            for i in range(others)
        ]
        for thread in threads:
            thread.start()
        await asyncio.sleep(1)  # past the new threads' grace
        start = time.perf_counter()
        for _ in range(rounds):
            await asyncio.sleep(1)
        elapsed = time.perf_counter() - start
        release.set()
        for thread in threads:
            thread.join()
        return elapsed

    return virtualtime.run(main()) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    keys = [key for key in args.cases.split(",") if key]
    unknown = [key for key in keys if key not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown!r}; known: {', '.join(CASES)}")
    cells: dict[tuple[str, int], str] = {}
    for load in args.loads:
        with busy_processes(load):
            for key in keys:
                print(f"load {load}: {key}", file=sys.stderr)
                start = time.monotonic()
                try:
                    (lost, total), real = run_case(key)
                except Exception as error:  # the case itself failed: say how, go on
                    real = time.monotonic() - start
                    cells[key, load] = f"{type(error).__name__}, {real:.2f} s"
                    continue
                cells[key, load] = f"{lost}/{total}, {real:.2f} s" if total else f"{real:.2f} s"
    print(f"- machine: {os.cpu_count()} cores; Python {sys.version.split()[0]}")
    print(f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}`")
    print()
    print("| case | " + " | ".join(f"{load} busy" for load in args.loads) + " |")
    print("|---|" + "---|" * len(args.loads))
    for key in keys:
        row = " | ".join(cells[key, load] for load in args.loads)
        print(f"| {CASES[key][0]} | {row} |")
    print()
    print("Lost answers out of total (spurious timeouts or false DeadlockErrors), real seconds.")
    print()
    for others in (1, 10):
        print(
            f"- idle round with {others} other thread(s), one of which spoke to the loop: "
            f"{idle_round_cost(others):.1f} µs"
        )


if __name__ == "__main__":
    main()
