"""A campaign of random SimPy models against the kit: how far is ``order="simpy"`` from SimPy?

Runs many seeded models of tests/simpy_models.py on SimPy 4.1.2 and on ``virtualtime.sim``
(asyncio, trio or both) and counts: models, models SimPy itself crashes on, divergences from
SimPy per backend (``--order simpy`` only), asyncio-versus-trio differences, invariant
violations, warnings and errors per backend.  With ``--shrink`` it shrinks the first failures
to minimal pairs of programs, groups them by a short signature and prints one pair per group.
Run it by hand (CI runs tests/test_simpy_differential.py, a few hundred models)::

    .venv/bin/python bench/simpy_campaign.py --models 2400 --seed0 0 --order simpy \\
        --backend both --shrink --jobs 2
    .venv/bin/python bench/simpy_campaign.py --models 300 --features detected --shrink
    .venv/bin/python bench/simpy_campaign.py --models 1 --seed0 123 --shrink   # one seed

``--features``: ``all`` (default), ``existing`` (no API names issue 37 adds), ``detected``
(what the installed kit offers), or a comma-separated list of names (tests/simpy_models.py,
FEATURES); ``-name`` entries drop a feature from ``all``.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import simpy_models as sm


def parse_features(text: str) -> frozenset[str]:
    """``all``, ``existing``, ``detected``, ``a,b,c`` or ``-a,-b`` (all but those)."""
    if text == "all":
        return sm.ALL_FEATURES
    if text == "existing":
        return sm.EXISTING_FEATURES
    if text == "detected":
        return sm.detect_features()
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names and all(n.startswith("-") for n in names):
        chosen = sm.ALL_FEATURES - {n[1:] for n in names}
    else:
        chosen = frozenset(names)
    unknown = {n.lstrip("-") for n in names} - sm.ALL_FEATURES
    if unknown:
        raise SystemExit(f"unknown features {sorted(unknown)}; known: {sorted(sm.FEATURES)}")
    return frozenset(chosen)


def one(task: tuple[int, frozenset[str], str, tuple[str, ...]]) -> dict[str, Any]:
    """Run one seed; a small picklable summary of what it did."""
    seed, features, order, backends = task
    verdict = sm.evaluate(sm.generate(seed, features), order, backends)
    return {
        "seed": seed,
        "crash": verdict.simpy_crash,
        "failures": verdict.failures(),
    }


def shrink_one(task: tuple[int, frozenset[str], str, str, str, int]) -> tuple[int, str, str]:
    """Shrink one failure: ``(seed, signature, the pair of programs and logs)``."""
    seed, features, order, kind, backend, budget = task
    model = sm.generate(seed, features)
    backends = ("asyncio", "trio") if kind == "backends" else (backend,)
    verdict = sm.evaluate(model, order, backends)
    signature, text = sm.explain(verdict, kind, backend, budget=budget, seconds=120)
    return seed, signature, text


def run_all(tasks: list[Any], func: Any, jobs: int) -> Iterable[Any]:
    if jobs <= 1:
        yield from map(func, tasks)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap(func, tasks, chunksize=4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=2400, help="how many seeds")
    parser.add_argument("--seed0", type=int, default=0, help="the first seed")
    parser.add_argument("--order", choices=("simpy", "virtualtime"), default="simpy")
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument("--features", default="all", help="all, existing, detected, a,b or -a,-b")
    parser.add_argument("--shrink", action="store_true", help="shrink and print minimal pairs")
    parser.add_argument("--shrink-max", type=int, default=16, help="failures to shrink")
    parser.add_argument("--examples", type=int, default=3, help="pairs printed (one a group)")
    parser.add_argument("--budget", type=int, default=400, help="candidates tried per shrink")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args(argv)
    features = parse_features(args.features)
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    seeds = range(args.seed0, args.seed0 + args.models)
    tasks = [(seed, features, args.order, backends) for seed in seeds]
    left_out = sorted(sm.ALL_FEATURES - features)
    print(
        f"{args.models} models from seed {args.seed0}, order={args.order!r}, backends "
        f"{', '.join(backends)}; features left out: {', '.join(left_out) or 'none'}"
    )
    began = time.monotonic()
    crashes = 0
    models_with: collections.Counter[tuple[str, str]] = collections.Counter()
    first: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    texts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    for done, result in enumerate(run_all(tasks, one, args.jobs), 1):
        crashes += result["crash"]
        kinds = {(kind, backend) for kind, backend, _ in result["failures"]}
        for key in kinds:
            models_with[key] += 1
            first[key].append(result["seed"])
        for kind, backend, text in result["failures"]:
            if kind != "log" and kind != "backends":
                texts[(kind, backend)][sm._generic(" | ".join(text.splitlines()))[:100]] += 1
        if done % 200 == 0:
            print(f"  ... {done} models, {time.monotonic() - began:.0f} s", file=sys.stderr)
    elapsed = time.monotonic() - began
    print(f"\nmodels:                      {args.models}  ({elapsed:.1f} s)")
    print(f"SimPy crashes:               {crashes}")
    if args.order == "simpy":
        for backend in backends:
            print(f"divergences from SimPy, {backend + ':':8} {models_with[('log', backend)]}")
    if len(backends) == 2:
        print(f"asyncio-vs-trio differences: {models_with[('backends', '')]}")
    for kind in ("invariant", "warning", "error"):
        for backend in (*backends, "simpy"):
            count = models_with[(kind, backend)]
            if count or backend != "simpy":
                print(f"{kind} ({backend}): {'':{max(0, 15 - len(kind) - len(backend))}}{count}")
            for text, n in texts[(kind, backend)].most_common(3):
                print(f"      {n:4} x {text}")
    for key, seeds_of in sorted(first.items()):
        print(f"first seeds with {key[0]} {key[1]}: {seeds_of[:12]}")
    if not args.shrink:
        return 0 if not models_with else 1
    order_of_kinds = ["log", "backends", "invariant", "error", "warning"]
    picked: list[tuple[int, frozenset[str], str, str, str, int]] = []
    taken: set[int] = set()
    for kind in order_of_kinds:
        for backend in (*backends, "", "simpy"):
            for seed in first.get((kind, backend), [])[: max(1, args.shrink_max // 4)]:
                if len(picked) < args.shrink_max and seed not in taken:
                    taken.add(seed)
                    picked.append((seed, features, args.order, kind, backend, args.budget))
    groups: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    print(f"\nshrinking {len(picked)} failures ...", file=sys.stderr)
    for seed, signature, text in run_all(picked, shrink_one, args.jobs):
        groups[signature].append((seed, text))
    print(f"\n{len(groups)} signatures among {len(picked)} shrunk failures:")
    for signature, members in sorted(groups.items(), key=lambda g: -len(g[1])):
        print(f"  {len(members):3} x {signature}   (seeds {[s for s, _ in members][:8]})")
    for signature, members in list(groups.items())[: args.examples]:
        print(f"\n##### {signature}\n{members[0][1]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
