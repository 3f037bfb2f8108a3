"""Seeded differential test of ``order="simpy"`` against SimPy 4.1.2 itself (issue 37).

Each seed makes a random model (tests/simpy_models.py: processes started at equal instants, zero
and equal delays, resources of the three kinds, containers, stores, interrupts, joins, signals,
conditions, until), rendered twice: as a SimPy program and as a ``virtualtime.sim`` program. In
``order="simpy"`` the kit's log must equal SimPy's exactly, on asyncio and on trio (so the two
backends agree too); the kit's invariants must hold on both backends (levels and counts within
capacity, conservation through interrupts and withdrawn operations, the order of service) -- in
the default order too, which tests/test_simpy_differential_invariants.py checks on the same
models (its log is its own: it is not compared with SimPy's). Models SimPy itself crashes on are
counted, not compared.

A failing chunk names every failing seed and prints the first one shrunk to a minimal pair of
programs, with both logs and the first differing line marked. Run a failing seed alone with
``bench/simpy_campaign.py --models 1 --seed0 SEED --shrink``.
"""

from __future__ import annotations

import re
from typing import Final

import pytest
import simpy_models as sm

MODELS: Final = 300
CHUNK: Final = 30
CHUNKS: Final = range(0, MODELS, CHUNK)


@pytest.mark.parametrize("start", CHUNKS, ids=lambda s: f"seeds{s}-{s + CHUNK - 1}")
def test_simpy_order_logs_equal_simpys_on_both_backends(start: int) -> None:
    verdicts = []
    crashes = 0
    for seed in range(start, start + CHUNK):
        verdict = sm.evaluate(sm.generate(seed), order="simpy")
        crashes += verdict.simpy_crash
        verdicts.append(verdict)
    report = sm.chunk_report(verdicts, "simpy")
    assert not report, report
    assert crashes < CHUNK // 2, f"SimPy crashed on {crashes} of {CHUNK} models"


# --------------------------------------------------------------------------- the harness


def test_the_generator_is_deterministic_per_seed_and_seeds_differ() -> None:
    for seed in (0, 1, 17, 123):
        assert sm.generate(seed) == sm.generate(seed)
        assert sm.simpy_source(sm.generate(seed)) == sm.simpy_source(sm.generate(seed))
        assert sm.kit_source(sm.generate(seed)) == sm.kit_source(sm.generate(seed))
    assert len({sm.simpy_source(sm.generate(seed)) for seed in range(20)}) == 20


def test_features_switch_ingredients_off() -> None:
    bare = frozenset({"zero_delays", "fractions"})
    for seed in range(30):
        model = sm.generate(seed, bare)
        assert not model.resources
        assert not model.containers
        assert not model.stores
        assert not model.signals
        kinds = {s.kind for steps in sm.step_lists(model) for s in steps}
        assert kinds <= {"sleep"}, kinds
        assert len(model.procs) <= 3
        assert model.until == ("none", None)
    with pytest.raises(ValueError, match="unknown features"):
        sm.generate(0, {"no such feature"})


def test_both_programs_run_alone_and_give_a_log_that_ends_the_run() -> None:
    model = sm.generate(5, frozenset({"zero_delays", "fractions", "many_processes"}))
    run = sm.run_simpy(model)
    assert not run.crash
    assert run.error is None
    assert run.log[0] == (0, "main", "start", None)
    assert run.log[-1][0] == "end"
    assert all(len(entry) == 4 for entry in run.log[:-1])


def _one_sleep_longer(source: str) -> str:
    """Lengthen the first sleep of process p0 by 1/8 (either program's spelling)."""
    return re.sub(r"(env\.timeout|sim\.sleep)\(", r"\1(0.125 + ", source, count=1)


def _model_with_a_sleep() -> sm.Model:
    for seed in range(100):
        model = sm.generate(seed, frozenset({"fractions", "many_processes"}))
        if model.procs and model.procs[0].steps:
            return model
    raise AssertionError("no model with a sleep in 100 seeds")


def test_the_comparison_catches_an_injected_difference() -> None:
    model = _model_with_a_sleep()
    plain = sm.run_simpy(model).log
    assert sm.first_difference(plain, sm.run_simpy(model).log) is None
    changed = sm.run_simpy(model, transform=_one_sleep_longer).log
    at = sm.first_difference(plain, changed)
    assert at is not None
    assert plain[:at] == changed[:at]
    text = sm.format_logs(plain, changed, ("SimPy", "changed"))
    assert f">>{at:4}" in text
    # and on the kit side: the same injection against the kit's own log
    kit = sm.run_kit(model, "virtualtime", "asyncio").log
    kit_changed = sm.run_kit(model, "virtualtime", "asyncio", transform=_one_sleep_longer).log
    assert sm.first_difference(kit, kit_changed) is not None


def test_the_invariant_tracker_catches_an_injected_leak() -> None:
    model = sm.Model(
        seed=-1,
        containers=[("c0", 10, 3)],
        procs=[sm.Proc("p0", [sm.Step("cput", "c0", num=2, style="plain")])],
    )
    assert sm.run_kit(model, "virtualtime", "asyncio").violations == []
    # the program puts 2 more than it tells the tracker: the ledger no longer balances
    leak = sm.run_kit(
        model, "virtualtime", "asyncio", transform=lambda s: s.replace("put(2)", "put(4)", 1)
    )
    assert any("c0: holds 7" in v for v in leak.violations), leak.violations


def test_the_shrinker_reduces_an_injected_divergence() -> None:
    model = _model_with_a_sleep()
    assert model.size()[1] > 3

    def fails(candidate: sm.Model) -> bool:
        plain = sm.run_simpy(candidate).log
        changed = sm.run_simpy(candidate, transform=_one_sleep_longer).log
        return sm.first_difference(plain, changed) is not None

    assert fails(model)
    small = sm.shrink(model, fails)
    assert fails(small)
    procs, steps = small.size()
    assert procs <= 1, sm.simpy_source(small)
    assert steps <= 1, sm.simpy_source(small)
