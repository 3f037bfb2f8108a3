"""Rows for tasks that never sleep on a timer: task lifetimes in traces and timelines.

A loop that keeps history also keeps the tasks it made (``loop.task_history``: created, ended,
name), so a task that only waits -- on a queue, an event, a journey -- still gets a row, drawn
as ``waiting`` from its creation to its end; a task that also sleeps gets ``waiting`` before
its first sleep and after its last.  ``virtualtime run --trace`` records them on asyncio, and
each trio task's life (trio keeps no timer history: asleep and waiting are not told apart).
A loop without history records nothing.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import virtualtime
from virtualtime import HistoryRecord, InvalidTypeError, InvalidValueError
from virtualtime.cli import main
from virtualtime.trace import (
    RecordKind,
    Span,
    TaskRecord,
    TraceRecorder,
    chrome_trace,
    plot_trace,
)
from virtualtime.trace import _plot as plot_module

US = 1_000_000


def write(tmp_path: Path, code: str, name: str = "script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def traced_run(tmp_path: Path, code: str, *options: str) -> dict[str, Any]:
    trace_file = tmp_path / "trace.json"
    status = main(["run", "-q", *options, "--trace", str(trace_file), str(write(tmp_path, code))])
    assert status == 0
    loaded: dict[str, Any] = json.loads(trace_file.read_text(encoding="utf-8"))
    return loaded


def row_names(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def spans_of(trace: dict[str, Any], row: str) -> list[tuple[str, float, float]]:
    names = row_names(trace)
    return [
        (e["cat"], e["ts"] / US, (e["ts"] + e["dur"]) / US)
        for e in trace["traceEvents"]
        if e["ph"] == "X" and names[(e["pid"], e["tid"])] == row
    ]


QUEUE_SCRIPT = """
    import asyncio

    async def consumer(queue):
        while (item := await queue.get()) is not None:
            print("got", item)

    async def main():
        queue = asyncio.Queue()
        task = asyncio.create_task(consumer(queue), name="consumer")
        for n in range(3):
            await asyncio.sleep(60)
            queue.put_nowait(n)
        await asyncio.sleep(60)
        queue.put_nowait(None)
        await task

    asyncio.run(main())
"""


def test_a_task_waiting_only_on_a_queue_gets_a_row_in_the_trace_and_the_plot(
    tmp_path: Path,
) -> None:
    trace = traced_run(tmp_path, QUEUE_SCRIPT)
    assert spans_of(trace, "consumer") == [("waiting", 0.0, 240.0)]
    assert plot_trace(trace, tmp_path / "consumer.png", size=(400, 300), rows=["consumer"]) == 1
    rows, _processes = plot_module._rows(trace)
    assert "consumer" in [r.name for r in rows]


def test_the_loop_keeps_each_task_life_while_it_keeps_history() -> None:
    async def main() -> list[asyncio.Task[bool]]:
        event = asyncio.Event()
        waiter = asyncio.create_task(event.wait(), name="waiter")
        await asyncio.sleep(5)
        event.set()
        await waiter
        never = asyncio.create_task(asyncio.Event().wait(), name="never")
        await asyncio.sleep(1)
        return [waiter, never]

    loop = virtualtime.new_event_loop(history=100, start=10.0)
    try:
        waiter, never = loop.run_until_complete(loop.create_task(main(), name="main"))
        records = {record.name: record for record in loop.task_history}
        assert records["waiter"] == TaskRecord(10.0, 15.0, "waiter", id(waiter))
        assert records["never"] == TaskRecord(15.0, None, "never", id(never))  # still waiting
        assert [r.name for r in loop.task_history] == ["main", "waiter", "never"]
        never.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        assert {r.name: r.ended for r in loop.task_history}["never"] == 16.0
    finally:
        loop.close()


def test_a_loop_without_history_keeps_no_task_lives() -> None:
    loop = virtualtime.new_event_loop()
    try:
        task = loop.create_task(asyncio.sleep(1))
        loop.run_until_complete(task)
        assert loop.task_history == ()
        # Nothing was hooked onto the task: no callback of the loop's runs when it ends.
        assert task.remove_done_callback(loop._vt_task_ended) == 0
    finally:
        loop.close()


def test_a_task_life_is_waiting_around_its_sleeps() -> None:
    async def main() -> None:
        go, done = asyncio.Event(), asyncio.Event()

        async def worker() -> None:
            await go.wait()  # 0 .. 50: waiting
            await asyncio.sleep(10)  # 50 .. 60: asleep
            await done.wait()  # 60 .. 100: waiting

        task = asyncio.create_task(worker(), name="worker")
        await asyncio.sleep(50)
        go.set()
        await asyncio.sleep(50)
        done.set()
        await task

    loop = virtualtime.new_event_loop(history=100)
    try:
        loop.run_until_complete(main())
        trace = chrome_trace(loop.history, tasks=loop.task_history, start=loop.start_time)
    finally:
        loop.close()
    assert spans_of(trace, "worker") == [
        ("waiting", 0.0, 50.0),
        ("sleep", 50.0, 60.0),
        ("waiting", 60.0, 100.0),
    ]


def test_tasks_sharing_a_name_keep_a_lane_each_for_their_whole_life() -> None:
    async def main() -> None:
        first, second = asyncio.Event(), asyncio.Event()

        async def job(event: asyncio.Event, nap: float) -> None:
            await asyncio.sleep(nap)
            await event.wait()

        a = asyncio.create_task(job(first, 10), name="job")
        await asyncio.sleep(5)
        b = asyncio.create_task(job(second, 10), name="job")
        await asyncio.sleep(20)
        second.set()
        await b
        await asyncio.sleep(20)
        first.set()
        await a

    loop = virtualtime.new_event_loop(history=100)
    try:
        loop.run_until_complete(main())
        trace = chrome_trace(loop.history, tasks=loop.task_history)
    finally:
        loop.close()
    assert spans_of(trace, "job") == [("sleep", 0.0, 10.0), ("waiting", 10.0, 45.0)]
    assert spans_of(trace, "job (2)") == [("sleep", 5.0, 15.0), ("waiting", 15.0, 25.0)]


def test_a_task_that_ends_where_it_began_has_no_row() -> None:
    async def main() -> None:
        await asyncio.create_task(asyncio.sleep(0), name="instant")
        await asyncio.sleep(1)

    loop = virtualtime.new_event_loop(history=100)
    try:
        loop.run_until_complete(main())
        assert "instant" in [r.name for r in loop.task_history]
        trace = chrome_trace(loop.history, tasks=loop.task_history)
    finally:
        loop.close()
    assert "instant" not in row_names(trace).values()


def test_the_recorder_takes_task_lives_and_counts_them() -> None:
    recorder = TraceRecorder()
    key = object()
    recorder.add_run(key, "r", (), start=0.0, tasks=[TaskRecord(2.0, None, "open", 1)])
    recorder.add_span(Span("other", "x", 0.0, 9.0), key=key)
    trace = recorder.trace()
    assert spans_of(trace, "open") == [("waiting", 2.0, 9.0)]  # until the run's last event
    assert trace["otherData"]["runs"][0]["tasks"] == 1


@pytest.mark.parametrize(
    ("tasks", "error", "match"),
    [
        ([TaskRecord(float("nan"), None, "t", 1)], InvalidValueError, "created"),
        ([TaskRecord(5.0, 1.0, "t", 1)], InvalidValueError, "ended"),
        ([TaskRecord(0.0, 1.0, 5, 1)], InvalidTypeError, "name"),  # type: ignore[arg-type]
        ([(0.0, 1.0, "t", 1)], InvalidTypeError, "TaskRecord"),
        (TaskRecord(0.0, 1.0, "t", 1), InvalidTypeError, "TaskRecord"),
    ],
)
def test_bad_task_records_are_refused(tasks: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        chrome_trace((), tasks=tasks)
    with pytest.raises(error, match=match):
        TraceRecorder().add_run(object(), "r", tasks=tasks)


TRIO_SCRIPT = """
    import trio

    async def consumer(receive):
        async for item in receive:
            print("got", item)

    async def main():
        send, receive = trio.open_memory_channel(0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer, receive)
            async with send:
                for n in range(3):
                    await trio.sleep(60)
                    await send.send(n)
                await trio.sleep(60)

    trio.run(main)
"""


@pytest.mark.parametrize("until", [[], ["--until", "1h"]])
def test_a_trio_task_waiting_only_on_a_channel_gets_a_row(tmp_path: Path, until: list[str]) -> None:
    pytest.importorskip("trio")
    trace = traced_run(tmp_path, TRIO_SCRIPT, *until)
    names = set(row_names(trace).values())
    assert spans_of(trace, "__main__.consumer") == [("alive", 0.0, 240.0)]
    # The main task keeps the script's name under --until too (not the command's wrapper).
    assert spans_of(trace, "__main__.main") == [("alive", 0.0, 240.0)]
    assert not any(name.startswith("virtualtime") for name in names)


def test_tasks_of_a_task_factory_are_kept_too() -> None:
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def main() -> None:
        event = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.call_later(7, event.set)
        await asyncio.create_task(event.wait(), name="made by the factory")

    loop = virtualtime.new_event_loop(history=100)
    loop.set_task_factory(factory)
    try:
        loop.run_until_complete(main())
        lives = {record.name: record for record in loop.task_history}
    finally:
        loop.close()
    assert (lives["made by the factory"].created, lives["made by the factory"].ended) == (0.0, 7.0)


def test_the_wake_up_tick_follows_sleep_in_the_legend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    savefig = Figure.savefig

    def keep(figure: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(figure)
        savefig(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    # The first row only waits, so "waiting" is the first category drawn.
    sleep = HistoryRecord(5.0, 0, 0, "task b", 0.0, 2, RecordKind.TASK)
    trace = chrome_trace([sleep], tasks=[TaskRecord(0.0, 10.0, "a", 1)])
    plot_trace(trace, tmp_path / "legend.png", size=(800, 300))
    labels = [text.get_text() for text in saved[0].legends[0].get_texts()]
    assert labels[labels.index("asleep on a timer") + 1] == "woke up", labels
