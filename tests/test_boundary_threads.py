"""The boundary with threads of this process: one allowance per timer, facts about threads.

While outside work is pending, a timer may fire only once as much real time has passed as its
virtual delay -- counted from when *that* timer was set (or when the outside work began, if
later), never from an earlier burst.  And a thread is outside work when the machine says it is
working and it has spoken to the loop, not for a guessed grace after it spoke.  Every case runs
at the default options, with real threads (and, where it says so, real processes), repeated
enough to catch a race; the model's parts are also tested alone, with made-up facts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import math
import os
import queue
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from sqlalchemy import Integer, String, select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import virtualtime
from virtualtime._engine._allowances import Allowances
from virtualtime._engine._outside import POKE_GRACE
from virtualtime._shared import _machine, _threads
from virtualtime._shared._threads import Speakers


def now() -> float:
    return asyncio.get_running_loop().time()


# ------------------------------------------------------------ one allowance per timer


def test_thirty_thread_jobs_back_to_back_each_get_their_own_second() -> None:
    # Jobs follow each other with no idle moment between them, so the outside work never
    # ends; each wait_for's second must count from when that wait_for began.
    async def main() -> tuple[int, float]:
        timeouts = 0
        for _ in range(30):
            try:
                await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.1), 1)
            except TimeoutError:
                timeouts += 1
        return timeouts, now()

    assert virtualtime.run(main()) == (0, 0.0)


def test_a_timeout_set_late_in_a_stretch_is_not_fired_by_an_earlier_one_at_its_instant() -> None:
    # Virtual time stands still while the jobs run, so both timeouts land on the same instant;
    # the first (set at real 0) is due at real 0.5, the second (set at real 0.4) at 0.9, and its
    # job ends at 0.7.  Time reaching the shared instant fires both: it must wait for the second.
    async def main() -> tuple[str, str]:
        async def first() -> str:
            try:
                await asyncio.wait_for(asyncio.to_thread(time.sleep, 1.0), 0.5)
            except TimeoutError:
                return "timed out"
            return "answered"

        async def second() -> str:
            await asyncio.to_thread(time.sleep, 0.4)
            try:
                await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.3), 0.5)
            except TimeoutError:
                return "timed out"
            return "answered"

        one, two = await asyncio.gather(first(), second())
        return one, two

    assert virtualtime.run(main()) == ("timed out", "answered")


def test_allowances_count_each_timer_from_the_first_round_that_could_see_it() -> None:
    allowances = Allowances()
    assert not allowances
    # The stretch starts at real 10.0, tick 5: timers 0..6 were set before it.
    assert allowances.anchor(7, 10.0, 5, 3) == (10.0, 5)
    # A round with the same counter notes nothing new.
    assert allowances.anchor(7, 10.5, 5, 3) == (10.0, 5)
    assert len(allowances) == 1
    # Timers 7 and 8 were set between the rounds: they count from the round at 11.0.
    assert allowances.anchor(9, 11.0, 5, 8) == (11.0, 5)
    assert allowances.anchor(9, 11.2, 5, 7) == (11.0, 5)
    assert allowances.anchor(12, 12.0, 6, 9) == (12.0, 6)
    # The older timers still count from where they did; an unknown target from the start.
    assert allowances.anchor(12, 12.1, 6, 3) == (10.0, 5)
    assert allowances.anchor(12, 12.1, 6, 8) == (11.0, 5)
    assert allowances.anchor(12, 12.1, 6, -1) == (10.0, 5)
    allowances.clear()
    assert not allowances
    assert allowances.anchor(20, 30.0, 9, 3) == (30.0, 9)


def test_allowances_forget_only_rounds_no_live_timer_counts_from() -> None:
    allowances = Allowances()
    for i in range(1000):
        allowances.anchor(i + 1, float(i), i, -1)
    assert allowances.crowded()
    # Live timers: 0 (counts from the first round) and 500 (from the round at 500.0).
    allowances.keep_for([0, 500])
    assert not allowances.crowded()
    assert len(allowances) <= 4
    assert allowances.anchor(1000, 999.5, 999, 0) == (0.0, 0)
    assert allowances.anchor(1000, 999.5, 999, 500) == (500.0, 500)
    assert allowances.anchor(1000, 999.5, 999, -1) == (0.0, 0)
    assert math.isfinite(allowances.anchor(1001, 1000.0, 1000, 999)[0])


# ------------------------------------------------------------ helpers


def _burn(seconds: float) -> int:
    """CPU work in Python (it wants the GIL all along), for about ``seconds`` real seconds."""
    end = time.perf_counter() + seconds  # real-time: the length of the work itself
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return spins


_COUNT_TO = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) " + (
    "SELECT count(*) FROM c"
)
"""A query sqlite works on in C, without the GIL: counting to ? takes about ? / 10**7 s."""


# ------------------------------------------------------------ aiosqlite


async def _slow_queries(repeats: int) -> list[str]:
    import aiosqlite

    results: list[str] = []
    async with aiosqlite.connect(":memory:") as db:
        await db.create_function("burn", 1, _burn)
        for _ in range(repeats):
            for sql, arg in (
                ("SELECT burn(?)", 0.1),
                ("SELECT burn(?)", 0.4),
                (_COUNT_TO, 2_000_000),
            ):
                try:
                    async with asyncio.timeout(5):
                        cursor = await db.execute(sql, (arg,))
                        assert (await cursor.fetchone()) is not None
                    results.append(f"answered at {now()}")
                except TimeoutError:
                    results.append(f"timed out at {now()}")
    return results


def test_slow_aiosqlite_queries_under_a_timeout_are_answered() -> None:
    # aiosqlite's worker is a plain thread fed through a queue the loop cannot see; it hands
    # each result back with call_soon_threadsafe.  While it works on a query, time must wait.
    results = virtualtime.run(_slow_queries(1))
    assert results == ["answered at 0.0"] * 3


async def _quick_queries_after_work(n: int) -> tuple[int, float]:
    import aiosqlite

    timeouts = 0
    async with aiosqlite.connect(":memory:") as db:
        for i in range(n):
            _burn(0.06)  # real work in the loop's own thread, longer than any old grace
            try:
                async with asyncio.timeout(5):
                    cursor = await db.execute("SELECT ?", (i,))
                    assert await cursor.fetchone() == (i,)
            except TimeoutError:
                timeouts += 1
    return timeouts, now()


def test_quick_aiosqlite_queries_after_real_work_never_time_out() -> None:
    assert virtualtime.run(_quick_queries_after_work(20)) == (0, 0.0)


async def _slow_query_without_a_timer() -> tuple[int, float]:
    import aiosqlite

    async with aiosqlite.connect(":memory:") as db:
        await db.create_function("burn", 1, _burn)
        cursor = await db.execute("SELECT burn(?)", (0.4,))
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0] > 0), now()


def test_a_slow_aiosqlite_query_with_no_timer_pending_is_not_a_deadlock() -> None:
    # Nothing but the query is left: the worker is working, so the loop waits for it instead
    # of reporting a deadlock after deadlock_timeout (0.25 s).
    assert virtualtime.run(_slow_query_without_a_timer()) == (1, 0.0)


class _Base(DeclarativeBase):
    pass


class _Item(_Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(20))


async def _orm_session(url: str, n: int) -> tuple[int, int, float]:
    engine = create_async_engine(url)
    timeouts = answered = stored = 0
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_Base.metadata.create_all)
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        async with sessions() as session:
            for i in range(n):
                if i % 5 == 0:
                    _burn(0.06)  # real work in the handler, between two queries
                try:
                    async with asyncio.timeout(5):
                        if i % 2 == 0:
                            session.add(_Item(name=f"item {i}"))
                            await session.commit()
                            stored += 1
                        else:
                            rows = (await session.scalars(select(_Item))).all()
                            assert len(rows) == stored
                    answered += 1
                except TimeoutError:
                    timeouts += 1
                    await session.rollback()  # what a handler does after a failed request
    finally:
        await engine.dispose()
    return answered, timeouts, now()


def test_sqlalchemy_orm_on_aiosqlite_has_no_spurious_timeouts(tmp_path: Path) -> None:
    # A file database (commits reach the disk), and real work in the handler now and then.
    url = f"sqlite+aiosqlite:///{tmp_path / 'orm.db'}"
    assert virtualtime.run(_orm_session(url, 50)) == (50, 0, 0.0)


# ------------------------------------------------------------ jobs blocked on other work


def test_a_thread_job_blocked_on_a_process_pool_future_is_outside_work() -> None:
    async def main() -> tuple[list[str], float]:
        got: list[str] = []
        with concurrent.futures.ProcessPoolExecutor(1) as pool:
            pool.submit(abs, -1).result()  # the worker process is up

            def job() -> str:
                return pool.submit(_slept, 0.3).result()

            got.append(await asyncio.to_thread(job))  # no timer pending at all
            got.append(await asyncio.wait_for(asyncio.to_thread(job), 10))
        return got, now()

    assert virtualtime.run(main()) == (["slept 0.3", "slept 0.3"], 0.0)


def _slept(seconds: float) -> str:
    time.sleep(seconds)  # real-time: the work of a job in another process
    return f"slept {seconds}"


def test_a_thread_job_blocked_on_a_future_a_plain_thread_completes_is_outside_work() -> None:
    async def ask(timeout: float | None) -> int:
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        worker = threading.Thread(target=lambda: future.set_result(_burn(0.3)))
        worker.start()
        try:
            return await asyncio.wait_for(asyncio.to_thread(future.result), timeout)
        finally:
            worker.join()

    async def main() -> tuple[bool, bool, float]:
        return await ask(None) > 0, await ask(10) > 0, now()

    assert virtualtime.run(main()) == (True, True, 0.0)


def test_looking_at_a_working_thread_keeps_none_of_its_locals_alive() -> None:
    # The loop reads the frames of the threads it waits for.  Were that snapshot left in a
    # reference cycle, every thread's locals of that moment would live on until the
    # collector ran -- a multiprocessing feeder's pickled buffer then fails to close, on
    # whichever later test the collector happens to run.
    class Token:
        pass

    tokens: list[weakref.ref[Token]] = []

    def job() -> int:
        token = Token()
        tokens.append(weakref.ref(token))
        return _burn(0.05)  # the loop looks at this thread while token is one of its locals

    async def main() -> int:
        return await asyncio.to_thread(job) + await asyncio.wait_for(asyncio.to_thread(job), 10)

    gc.collect()
    gc.disable()
    try:
        assert virtualtime.run(main()) > 0
        assert [token() for token in tokens] == [None, None]
    finally:
        gc.enable()


# ------------------------------------------------------------ threads that do not hold time


def test_call_soon_threadsafe_from_the_loops_own_thread_holds_nothing() -> None:
    # APScheduler 3 and aiocron wake themselves with call_soon_threadsafe from inside the loop.
    async def main() -> float:
        loop = asyncio.get_running_loop()
        for _ in range(7 * 24 * 6):  # every ten minutes for a week
            fired = asyncio.Event()
            loop.call_soon_threadsafe(loop.call_later, 600, fired.set)
            await fired.wait()
        return now()

    start = time.monotonic()  # real-time: what the test measures
    assert virtualtime.run(main()) == 7 * 24 * 3600.0
    # About 0.02 s; a real wait of even a millisecond per hand-over would be over a second
    # (the bound leaves room for a loaded machine that takes the CPU away for a while).
    assert time.monotonic() - start < 0.5


def test_a_callback_handed_over_before_the_run_from_its_own_thread_holds_nothing() -> None:
    # call_soon_threadsafe before run_until_complete, from the thread that will run the loop:
    # not a thread outside, so once the loop has looked, it is calm again.
    loop = virtualtime.new_event_loop()
    try:
        loop.call_soon_threadsafe(int)

        async def main() -> bool:
            await asyncio.sleep(1)
            return bool(loop._vt_world.calm())

        assert loop.run_until_complete(main()) is True
    finally:
        loop.close()


def test_a_heartbeat_thread_that_never_speaks_does_not_slow_a_virtual_hour() -> None:
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.001):  # real-time: a beat every millisecond
            _burn(0.0002)

    async def main() -> float:
        beat = threading.Thread(target=heartbeat)
        beat.start()
        try:
            for _ in range(3600):
                await asyncio.sleep(1)
        finally:
            stop.set()
            beat.join()
        return now()

    start = time.monotonic()  # real-time: what the test measures
    assert virtualtime.run(main()) == 3600.0
    assert time.monotonic() - start < 1.0


def test_a_portal_caller_blocked_on_the_loop_does_not_hold_time() -> None:
    # The thread on the other side of a portal speaks to the loop, then waits for it: while it
    # waits it owes nothing, so a long sleep in the loop is at once over.
    import anyio
    import anyio.from_thread

    start = time.monotonic()  # real-time: what the test measures
    with anyio.from_thread.start_blocking_portal(
        "asyncio", backend_options={"loop_factory": virtualtime.new_event_loop}
    ) as portal:
        for _ in range(50):
            portal.call(anyio.sleep, 3600)
        assert portal.call(anyio.current_time) == 50 * 3600.0
    assert time.monotonic() - start < 1.0


# ------------------------------------------------------------ under CPU contention


def _serve(requests: queue.SimpleQueue[asyncio.Future[int] | None], work: float) -> None:
    """A peer thread: CPU work for each request, the answer handed back to the loop."""
    while (future := requests.get()) is not None:
        spins = _burn(work)
        future.get_loop().call_soon_threadsafe(future.set_result, spins)


def test_a_cpu_bound_peer_thread_never_loses_while_busy_processes_load_every_core() -> None:
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:

        async def main() -> tuple[int, int, float]:
            requests: queue.SimpleQueue[asyncio.Future[int] | None] = queue.SimpleQueue()
            peer = threading.Thread(target=_serve, args=(requests, 0.06))
            peer.start()
            answered = timeouts = 0
            try:
                for _ in range(15):
                    future = asyncio.get_running_loop().create_future()
                    requests.put(future)
                    try:
                        assert await asyncio.wait_for(asyncio.shield(future), 2) > 0
                        answered += 1
                    except TimeoutError:
                        timeouts += 1
                        await future  # the peer still answers; keep the requests in step
            finally:
                requests.put(None)
                peer.join()
            return answered, timeouts, now()

        assert virtualtime.run(main()) == (15, 0, 0.0)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# ------------------------------------------------------------ the thread rule, with no loop


class _Facts:
    """Made-up machine facts: which native ids are working (None: the machine cannot tell)."""

    def __init__(self, working: set[int] | None) -> None:
        self.working = working
        self.watched: list[set[int]] = []

    def busy(self, tids: Iterable[int]) -> tuple[int, ...] | None:
        asked = set(tids)
        self.watched.append(asked)
        if self.working is None:
            return None
        return tuple(tid for tid in asked if tid in self.working)


def _thread_that(action: Callable[[], object], release: threading.Event) -> threading.Thread:
    done = threading.Event()

    def run() -> None:
        action()
        done.set()
        release.wait()

    thread = threading.Thread(target=run)
    thread.start()
    assert done.wait(10)
    return thread


def _parked(thread: threading.Thread) -> None:
    """Return once ``thread`` sleeps in the kernel (blocked, not merely between two lines)."""
    assert thread.native_id is not None
    for _ in range(100_000):
        if _machine.thread_state(thread.native_id) == "S":
            return
        os.sched_yield()
    raise AssertionError(f"{thread.name} never blocked")


def test_a_thread_that_ran_since_the_last_look_is_working_though_it_sleeps_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An in-process server thread sends the headers, then waits for the GIL the asker holds
    # to send the body: asleep at the look, and it may not get to run during it.  That it ran
    # since the last look says it is working, even when the look before had stopped watching
    # it (idle beyond the window in which a thread may want the GIL).
    go, sent, finish = threading.Event(), threading.Event(), threading.Event()

    def server() -> None:
        go.wait()
        _burn(0.01)  # the headers
        sent.set()
        finish.wait()  # asleep again, as a thread waiting for the GIL is

    thread = threading.Thread(target=server)
    thread.start()
    # The window in which a quiet thread stays watched, made ~0.
    monkeypatch.setattr(_threads, "_RECENT", 0.0)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _parked(thread)
        speakers = Speakers()
        assert speakers.look() == frozenset()  # first sight: watched, asleep
        assert speakers.look() == frozenset()  # quiet beyond the window: not watched now
        go.set()
        assert sent.wait(10)
        _parked(thread)
        busy = speakers.look()
        assert busy is not None
        assert thread.native_id in busy
        assert speakers.look() == frozenset()  # and not again: it has not run since
    finally:
        sys.setswitchinterval(interval)
        go.set()
        finish.set()
        thread.join()


def test_a_thread_that_spoke_may_hold_time_only_while_the_machine_says_it_works() -> None:
    release = threading.Event()
    facts = _Facts(set())
    speakers = Speakers(facts)
    assert not speakers
    speaker = _thread_that(speakers.note, release)
    silent = _thread_that(lambda: None, release)
    try:
        assert speakers
        assert speaker.native_id is not None
        assert silent.native_id is not None
        assert speakers.spoke(speaker.native_id)
        assert not speakers.spoke(silent.native_id)
        # Blocked (nobody working): time may move.
        busy = speakers.look()
        assert busy == frozenset()
        assert not speakers.working(busy)
        # Every other thread is watched together (GIL waiters), never the asker.
        assert {speaker.native_id, silent.native_id} <= facts.watched[-1]
        assert threading.get_native_id() not in facts.watched[-1]
        # The thread that spoke works: time must wait.
        facts.working = {speaker.native_id}
        busy = speakers.look()
        assert busy is not None
        assert speakers.working(busy)
        # A thread that never spoke works: nobody's outside work.
        facts.working = {silent.native_id}
        busy = speakers.look()
        assert busy is not None
        assert not speakers.working(busy)
        # The machine cannot tell: the caller falls back to its grace.
        facts.working = None
        assert speakers.look() is None
        assert speakers.spoke_at > 0
    finally:
        release.set()
        speaker.join()
        silent.join()
    # A thread that spoke and ended is forgotten.
    facts.working = set()
    speakers.look()
    assert not speakers


def test_without_thread_facts_a_thread_that_spoke_holds_time_for_the_grace() -> None:
    # Where the machine cannot say what a thread is doing (no procfs, not Linux), the loop
    # keeps the old guess: POKE_GRACE real seconds after a thread last spoke.
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        loop._vt_world._speakers._watch = _Facts(None)  # type: ignore[attr-defined]
        spoke = asyncio.Event()
        release = threading.Event()
        speaker = threading.Thread(
            target=lambda: (loop.call_soon_threadsafe(spoke.set), release.wait())
        )
        speaker.start()
        try:
            await spoke.wait()
            start = time.monotonic()  # real-time: what the test measures
            await asyncio.sleep(3600)
            return now(), time.monotonic() - start
        finally:
            release.set()
            speaker.join()

    virtual, real = virtualtime.run(main())
    assert virtual == 3600.0
    assert real >= POKE_GRACE * 0.8


# ------------------------------------------------------------ canaries of what the model reads


def test_canary_the_model_reads_the_next_timer_number_without_taking_it() -> None:
    # _outside.OutsideWork._next_seq: the loop numbers timers with an itertools.count whose
    # repr shows the next number (see Allowances).
    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        world = loop._vt_world  # type: ignore[attr-defined]
        before = world._next_seq()
        again = world._next_seq()
        handle = loop.call_later(1, int)
        handle.cancel()
        return before, again, world._next_seq()

    before, again, after = virtualtime.run(main())
    assert again == before, "reading the next timer number took one"
    assert after == before + 1, (
        "the loop's timer numbers are no longer read from an itertools.count's repr: update "
        "virtualtime/_engine/_outside.py (OutsideWork._next_seq)"
    )


def test_canary_a_process_pools_manager_thread_keeps_its_pending_futures() -> None:
    # _thread_jobs._in_process_pool: concurrent.futures.process._ExecutorManagerThread keeps the
    # pool's unfinished work items, each with its future, in pending_work_items.
    from concurrent.futures import process

    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        future = pool.submit(_slept, 0.2)
        managers = [
            t for t in threading.enumerate() if isinstance(t, process._ExecutorManagerThread)
        ]
        items = [item for m in managers for item in m.pending_work_items.values()]
        assert any(item.future is future for item in items), (
            "a process pool's pending futures moved: update virtualtime/_engine/_thread_jobs.py "
            "(_in_process_pool)"
        )
        future.result()


def test_a_closed_loop_lets_go_of_the_files_its_thread_watch_opened() -> None:
    # The outside model reads threads from procfs through files it keeps open between looks;
    # closing the loop closes them, though the thread that spoke lives on (an aiosqlite worker
    # outlives its loop until its connection closes) and the loop is still referenced.
    before = len(os.listdir("/proc/self/fd"))
    finish = threading.Event()
    loops = []
    threads = []
    try:
        for _ in range(5):
            loop = virtualtime.new_event_loop()
            loops.append(loop)

            async def main() -> None:
                running = asyncio.get_running_loop()
                answer: asyncio.Future[int] = running.create_future()

                def peer() -> None:
                    running.call_soon_threadsafe(answer.set_result, 1)
                    finish.wait(30)  # idle, alive

                thread = threading.Thread(target=peer)
                threads.append(thread)
                thread.start()
                await asyncio.wait_for(answer, 5)
                await asyncio.sleep(1)  # the model looks at the idle speaker

            loop.run_until_complete(main())
            loop.close()
        assert len(os.listdir("/proc/self/fd")) <= before + 1
    finally:
        finish.set()
        for thread in threads:
            thread.join()
