"""virtualtime.net's targets (issue 39), measured in one invocation.

Run by hand (never by CI or pytest), from the project root::

    .venv/bin/python bench/bench_net.py                 # everything
    .venv/bin/python bench/bench_net.py --only system --requests 2000
    .venv/bin/python bench/bench_net.py --only explore,determinism --seeds 200
    .venv/bin/python bench/bench_net.py --output bench/results-net.md   # docs/performance.md

What is measured
----------------
* ``system`` -- a 3-host system: an aiohttp client on host ``client`` asks an aiohttp server
  on host ``api`` for ``/item/N``; the API's handler asks host ``db`` (a line protocol over
  asyncio streams, on a keep-alive connection pool) and answers.  5 ms links.  10,000
  requests (``--requests``), one at a time and ``--concurrency`` at a time.  Reported:
  simulated requests per real second; the check is every answer's body and the run's
  virtual time.  Beside it, for scale, the same programs on a stock asyncio loop over real
  127.0.0.1 sockets (the machine's loopback, no latency); the same three hosts with a line
  protocol end to end instead of HTTP (what the simulated network carries when the
  programs on it cost little); and the share of the simulated
  run's CPU time spent in aiohttp (its client, server and parser), in asyncio's streams, in
  virtualtime.net and in the loop (cProfile, one run).
* ``explore`` -- ``net.explore`` over 1,000 seeds (``--seeds``) of a 100-request scenario of
  that system, ``processes=2``: real seconds for all of them.
* ``determinism`` -- ``check_determinism=True`` over the examples' scenarios
  (examples/net_lease.py's ``careless`` and ``careful``, examples/net_flaky_link.py's
  ``main``), 1,000 seeds each: how many seeds' two runs differed (the target is 0).

The wake-up benchmark that shows programs without a world are not slowed is
``bench/bench_wakeups.py`` (run it on the commit before the network seam and on this one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web

import virtualtime
from virtualtime import net

HERE: Final = Path(__file__).resolve()
ROOT: Final = HERE.parent.parent
LATENCY: Final = 0.005


# ------------------------------------------------------------------------ the system


async def _db_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(b"row:" + line)
    finally:
        writer.close()


def _api_app(db_host: str, db_port: int) -> web.Application:
    pool: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def item(request: web.Request) -> web.Response:
        if pool:
            reader, writer = pool.pop()
        else:
            reader, writer = await asyncio.open_connection(db_host, db_port)
        writer.write(request.match_info["id"].encode() + b"\n")
        row = await reader.readline()
        pool.append((reader, writer))
        return web.Response(body=row)

    app = web.Application()
    app.router.add_get("/item/{id}", item)

    async def close_pool(_app: web.Application) -> None:
        for _reader, writer in pool:
            writer.close()

    app.on_cleanup.append(close_pool)
    return app


async def _clients(base: str, requests: int, concurrency: int) -> None:
    async with aiohttp.ClientSession() as session:

        async def worker(k: int) -> None:
            for i in range(k, requests, concurrency):
                async with session.get(f"{base}/item/{i}") as response:
                    body = await response.read()
                    if body != b"row:%d\n" % i:
                        raise AssertionError(f"request {i}: {body!r}")

        await asyncio.gather(*(worker(k) for k in range(concurrency)))


async def simulated_system(requests: int, concurrency: int) -> float:
    """The 3-host system on a simulated network; returns the virtual time it took."""
    world = net.Network(latency=LATENCY)
    db, api, client = world.host("db"), world.host("api"), world.host("client")

    async def start_db() -> asyncio.AbstractServer:
        return await asyncio.start_server(_db_handler, None, 5432)

    async def start_api() -> web.AppRunner:
        runner = web.AppRunner(_api_app("db", 5432), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, None, 8080).start()
        return runner

    db_server = await db.run(start_db())
    runner = await api.run(start_api())
    loop = asyncio.get_running_loop()
    async with client:
        start = loop.time()
        await _clients("http://api:8080", requests, concurrency)
        took = loop.time() - start
    await api.run(runner.cleanup())
    db_server.close()
    await asyncio.sleep(1)  # the last connections close
    return took


async def real_system(requests: int, concurrency: int) -> float:
    """The same programs on a stock loop over real 127.0.0.1 sockets."""
    db_server = await asyncio.start_server(_db_handler, "127.0.0.1", 0)
    db_port = db_server.sockets[0].getsockname()[1]
    runner = web.AppRunner(_api_app("127.0.0.1", db_port), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server  # aiohttp keeps the asyncio server here
    port = server.sockets[0].getsockname()[1]
    start = time.perf_counter()
    await _clients(f"http://127.0.0.1:{port}", requests, concurrency)
    took = time.perf_counter() - start
    await runner.cleanup()
    db_server.close()
    await db_server.wait_closed()
    return took


async def simulated_streams(requests: int, concurrency: int) -> float:
    """The same three hosts with a line protocol over asyncio streams end to end (no HTTP):
    what the simulated network itself carries, without aiohttp's cost per request."""
    world = net.Network(latency=LATENCY)
    db, api, client = world.host("db"), world.host("api"), world.host("client")

    async def api_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        db_reader, db_writer = await asyncio.open_connection("db", 5432)
        try:
            while line := await reader.readline():
                db_writer.write(line)
                writer.write(await db_reader.readline())
        finally:
            db_writer.close()
            writer.close()

    async def start(handler: Any, port: int) -> asyncio.AbstractServer:
        return await asyncio.start_server(handler, None, port)

    servers = [await db.run(start(_db_handler, 5432)), await api.run(start(api_handler, 8080))]
    loop = asyncio.get_running_loop()

    async def worker(k: int) -> None:
        reader, writer = await asyncio.open_connection("api", 8080)
        try:
            for i in range(k, requests, concurrency):
                writer.write(b"%d\n" % i)
                if await reader.readline() != b"row:%d\n" % i:
                    raise AssertionError(f"request {i}")
        finally:
            writer.close()

    async with client:
        start_time = loop.time()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        took = loop.time() - start_time
    for server in servers:
        server.close()
    await asyncio.sleep(1)
    return took


def scenario() -> Any:
    """A 100-request run of the system (for explore)."""
    return simulated_system(100, 4)


def bench_system(requests: int, concurrency: int) -> list[str]:
    lines = ["### The 3-host aiohttp system (client -> api -> db), 5 ms links", ""]
    lines.append("| run | requests | real s | requests per real s | virtual s |")
    lines.append("|---|--:|--:|--:|--:|")
    for conc in (1, concurrency):
        t0 = time.perf_counter()
        virtual = virtualtime.run(simulated_system(requests, conc))
        real = time.perf_counter() - t0
        lines.append(
            f"| simulated, {conc} at a time | {requests} | {real:.2f} | "
            f"{requests / real:,.0f} | {virtual:.3f} |"
        )
        t0 = time.perf_counter()
        asyncio.run(real_system(requests, conc))
        real = time.perf_counter() - t0
        lines.append(
            f"| stock loop, real 127.0.0.1, {conc} at a time | {requests} | {real:.2f} | "
            f"{requests / real:,.0f} | -- |"
        )
        t0 = time.perf_counter()
        virtual = virtualtime.run(simulated_streams(requests, conc))
        real = time.perf_counter() - t0
        lines.append(
            f"| the network alone (line protocol, no HTTP), {conc} at a time | {requests} | "
            f"{real:.2f} | {requests / real:,.0f} | {virtual:.3f} |"
        )
    lines += ["", *profile_shares(min(requests, 3000), concurrency)]
    return lines


def profile_shares(requests: int, concurrency: int) -> list[str]:
    """Where the simulated run's CPU time goes, by package (cProfile's own time)."""
    profiler = cProfile.Profile()
    profiler.enable()
    virtualtime.run(simulated_system(requests, concurrency))
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    shares: dict[str, float] = {}
    total = 0.0
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tottime
        shares[_package(filename)] = shares.get(_package(filename), 0.0) + tottime
    lines = [f"CPU time by package, simulated, {requests} requests (cProfile's own time):", ""]
    lines.append("| package | share |")
    lines.append("|---|--:|")
    for name, seconds in sorted(shares.items(), key=lambda kv: -kv[1]):
        if seconds / total >= 0.01:
            lines.append(f"| {name} | {seconds / total:.0%} |")
    return lines


def _package(filename: str) -> str:
    for marker, name in (
        ("virtualtime/net/", "virtualtime.net"),
        ("virtualtime/", "virtualtime (the loop)"),
        ("aiohttp", "aiohttp"),
        ("yarl", "yarl and multidict (aiohttp's URLs, headers)"),
        ("multidict", "yarl and multidict (aiohttp's URLs, headers)"),
        ("asyncio/streams", "asyncio streams (the db protocol)"),
        ("asyncio", "asyncio (tasks, futures, events)"),
    ):
        if marker in filename:
            return name
    return "builtins and other" if filename.startswith("~") else "other"


# --------------------------------------------------------------------- exploring


def bench_explore(seeds: int) -> list[str]:
    t0 = time.perf_counter()
    found = net.explore(scenario, seeds=range(seeds), processes=2)
    real = time.perf_counter() - t0
    return [
        "### explore: a 100-request scenario of the system, processes=2",
        "",
        f"{seeds} seeds in {real:.1f} real s "
        f"({found.passed} passed, {len(found.failures)} failed).",
    ]


def bench_determinism(seeds: int) -> list[str]:
    sys.path.insert(0, str(ROOT / "examples"))
    import net_flaky_link  # the examples are not a package
    import net_lease

    lines = ["### check_determinism over the examples' scenarios", ""]
    lines.append("| scenario | seeds | runs that differed | runs that failed | real s |")
    lines.append("|---|--:|--:|--:|--:|")
    for name, main in (
        ("net_lease careless", net_lease.careless),
        ("net_lease careful", net_lease.careful),
        ("net_flaky_link main", net_flaky_link.main),
    ):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            found = net.explore(main, seeds=range(seeds), check_determinism=True)
        real = time.perf_counter() - t0
        differed = sum(1 for f in found.failures if f.kind == "nondeterministic")
        failed = sum(1 for f in found.failures if f.kind != "nondeterministic")
        lines.append(f"| {name} | {seeds} | {differed} | {failed} | {real:.1f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="system,explore,determinism")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    parts = set(args.only.split(","))
    load = os.getloadavg()[0]
    report = [f"## virtualtime.net (load {load:.2f} at the start, {os.cpu_count()} cores)", ""]
    if "system" in parts:
        report += [*bench_system(args.requests, args.concurrency), ""]
    if "explore" in parts:
        report += [*bench_explore(args.seeds), ""]
    if "determinism" in parts:
        report += [*bench_determinism(args.seeds), ""]
    report.append(f"(load {os.getloadavg()[0]:.2f} at the end)")
    text = "\n".join(report)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
