"""A walk over the public API of virtualtime.experiment and virtualtime.trace with bad values.

For every public parameter, hypothesis draws values the parameter does not accept (NaN,
infinities, negatives, huge ints, wrong types, empty strings, ...) and calls the API with that
one value bad and every other argument good.  Each call must raise an error of the
``VirtualTimeError`` family (also a ``TypeError`` or ``ValueError``) whose message names the
argument and stays short, before anything changes: no replication runs, no file is written,
a ``Results`` is left as it was, no category is registered.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from virtualtime import InvalidTypeError, VirtualTimeError, experiment, trace
from virtualtime.experiment import ModelRef, Results


class CountingModel:
    """A model that counts its calls: a bad argument must be refused before any runs."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
        self.calls += 1
        return {"x": float(rng.normal())}


def number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def count_in(value: object, low: int, high: float = math.inf) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def fraction(value: object) -> bool:
    return number(value) and 0 < value < 1  # type: ignore[operator]


def positive(value: object) -> bool:
    return number(value) and 0 < value < math.inf  # type: ignore[operator]


def names(value: object) -> bool:
    if value is None or (isinstance(value, str) and value):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)


def stream(value: object) -> bool:
    if isinstance(value, str):
        parts = value.split(".")
        return bool(value) and all(p.isascii() and p.isdigit() for p in parts)
    return isinstance(value, (list, tuple)) and bool(value) and all(count_in(v, 0) for v in value)


def executor(value: object) -> bool:
    """Whether ``value`` names an executor (those are valid, and may start pools: skipped)."""
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    return value == "serial" or value.startswith(
        ("processes", "dask://", "tcp://", "tls://", "ray")
    )


def address(value: object) -> bool:
    """Whether ``value`` may be a cluster's address (those would be dialled: skipped)."""
    return value is None or value in ("auto", "local") or (isinstance(value, str) and ":" in value)


def reference(value: object) -> bool:
    """Whether ``value`` reads as 'module:function' (resolved only where the model runs)."""
    if not isinstance(value, str):
        return False
    where, _, name = value.rpartition(":")
    return name.isidentifier() and all(p.isidentifier() for p in where.split("."))


def picture(value: object) -> bool:
    return isinstance(value, (str, Path)) and Path(value).suffix.lower() in (".png", ".svg", ".pdf")


def table(value: object) -> bool:
    suffixes = (".csv", ".parquet", ".pq")
    return isinstance(value, (str, Path)) and Path(value).suffix.lower() in suffixes


@dataclass(frozen=True)
class Case:
    """One public parameter: how to call the API with a value for it, and which values fit."""

    where: str
    name: str
    call: Callable[[Any, Any], Any]  # (bad value, context) -> the call
    valid: Callable[[object], bool]
    named: str = ""  # the word the message must contain (default: ``name``)


@dataclass
class Context:
    model: CountingModel
    results: Results
    folder: Path


def sweep_with(name: str) -> Callable[[Any, Context], Any]:
    def call(value: Any, ctx: Context) -> Any:
        kwargs: dict[str, Any] = {"replications": 2, "seed": 1, name: value}
        return experiment.sweep(ctx.model, {"mean": [0, 1]}, **kwargs)

    return call


PICTURES = {
    ".png",
    ".svg",
    ".pdf",
    ".eps",
    ".ps",
    ".svgz",
    ".jpg",
    ".jpeg",
    ".webp",
    ".tif",
    ".tiff",
    ".gif",
    ".pgf",
    ".raw",
    ".rgba",
    ".avif",
}


CASES = [
    *(
        Case("sweep", name, sweep_with(name), valid)
        for name, valid in [
            ("replications", lambda v: count_in(v, 1)),
            ("seed", lambda v: v is None or count_in(v, 0)),
            ("confidence", fraction),
            ("half_width", lambda v: v is None or positive(v)),
            ("max_n", lambda v: count_in(v, 1)),
            ("chunksize", lambda v: v is None or count_in(v, 1, 100_000)),
            ("crn", lambda v: isinstance(v, bool)),
            ("relative", lambda v: isinstance(v, bool)),
            ("outputs", names),
            ("baseline", lambda v: (v in (0, 1) and not isinstance(v, bool)) or v == {"mean": 0}),
            ("executor", executor),
            ("progress", lambda v: v is None or callable(v)),
        ]
    ),
    Case(
        "sweep",
        "grid",
        lambda v, ctx: experiment.sweep(ctx.model, v, replications=2, seed=1),
        lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and k for k in v),
    ),
    Case(
        "sweep",
        "model",
        lambda v, ctx: experiment.sweep(v, {"mean": 0}, replications=2, seed=1),
        lambda v: callable(v) or isinstance(v, ModelRef) or reference(v),
    ),
    Case(
        "replicate",
        "n",
        lambda v, ctx: experiment.replicate(ctx.model, {}, v, seed=1),
        lambda v: count_in(v, 1),
    ),
    Case(
        "replicate",
        "params",
        lambda v, ctx: experiment.replicate(ctx.model, v, 2, seed=1),
        lambda v: (
            v is None or (isinstance(v, Mapping) and all(isinstance(k, str) and k for k in v))
        ),
    ),
    Case(
        "run_one",
        "seed",
        lambda v, ctx: experiment.run_one(ctx.model, {}, seed=v),
        lambda v: count_in(v, 0),
    ),
    Case(
        "run_one",
        "stream",
        lambda v, ctx: experiment.run_one(ctx.model, {}, seed=1, stream=v),
        stream,
    ),
    Case("make_rng", "seed", lambda v, ctx: experiment.make_rng(v, (0,)), lambda v: count_in(v, 0)),
    Case("make_rng", "stream", lambda v, ctx: experiment.make_rng(1, v), stream),
    Case("interval", "confidence", lambda v, ctx: experiment.interval([1.0, 2.0], v), fraction),
    Case(
        "interval",
        "values",
        lambda v, ctx: experiment.interval(v, 0.95),
        lambda v: isinstance(v, (list, tuple)) and all(number(x) for x in v),
    ),
    Case(
        "Futures",
        "workers",
        lambda v, ctx: experiment.Futures(ctx_pool(), workers=v),
        lambda v: v is None or count_in(v, 1, 1024),
    ),
    Case(
        "Futures",
        "retries",
        lambda v, ctx: experiment.Futures(ctx_pool(), retries=v),
        lambda v: count_in(v, 0, 1000),
    ),
    Case(
        "Futures",
        "executor",
        lambda v, ctx: experiment.Futures(v),
        lambda v: False,
    ),
    Case(
        "Futures.processes",
        "workers",
        lambda v, ctx: experiment.Futures.processes(v),
        lambda v: v is None or count_in(v, 1, 1024),
    ),
    Case(
        "Dask",
        "timeout",
        lambda v, ctx: experiment.Dask(address="tcp://127.0.0.1:1", timeout=v),
        lambda v: number(v) and 0 < v <= 3600,  # type: ignore[operator]
    ),
    Case("Dask", "address", lambda v, ctx: experiment.Dask(address=v), address),
    Case(
        "Ray",
        "max_retries",
        lambda v, ctx: experiment.Ray(max_retries=v),
        lambda v: count_in(v, -1, 1000),
    ),
    Case("Ray", "address", lambda v, ctx: experiment.Ray(v), address),
    Case(
        "ModelRef",
        "module",
        lambda v, ctx: ModelRef(v, "f"),
        lambda v: isinstance(v, str) and v != "",
    ),
    Case(
        "ModelRef",
        "name",
        lambda v, ctx: ModelRef("m", v),
        lambda v: isinstance(v, str) and all(p.isidentifier() for p in v.split(".")),
    ),
    Case(
        "ModelRef",
        "file",
        lambda v, ctx: ModelRef("m", "f", v),
        lambda v: v is None or (isinstance(v, str) and v != ""),
    ),
    Case(
        "ModelRef.parse",
        "spec",
        lambda v, ctx: ModelRef.parse(v),
        reference,
        named="model",
    ),
    Case(
        "Results.values",
        "output",
        lambda v, ctx: ctx.results.values(v),
        lambda v: v == "x",
    ),
    Case(
        "Results.values",
        "scenario",
        lambda v, ctx: ctx.results.values("x", v),
        lambda v: v == 0 and not isinstance(v, bool),
    ),
    Case(
        "Results.summary",
        "confidence",
        lambda v, ctx: ctx.results.summary(v),
        lambda v: v is None or fraction(v),
    ),
    Case(
        "Results.differences",
        "confidence",
        lambda v, ctx: ctx.results.differences(confidence=v),
        lambda v: v is None or fraction(v),
    ),
    Case(
        "Results.differences",
        "baseline",
        lambda v, ctx: ctx.results.differences(v),
        lambda v: v is None or (v == 0 and not isinstance(v, bool)) or v == {},
    ),
    Case("Results.write", "path", lambda v, ctx: ctx.results.write(in_folder(ctx, v)), table),
    Case("Results.plot", "path", lambda v, ctx: ctx.results.plot(in_folder(ctx, v)), picture),
    Case(
        "Results.plot",
        "title",
        lambda v, ctx: ctx.results.plot(ctx.folder / "p.png", title=v),
        lambda v: v is None or (isinstance(v, str) and len(v) <= 500),
    ),
    Case(
        "Results.plot",
        "reference",
        lambda v, ctx: ctx.results.plot(ctx.folder / "p.png", reference=v),
        lambda v: v is None or v == {} or (isinstance(v, Mapping) and False),
    ),
    Case(
        "Summary.contains",
        "value",
        lambda v, ctx: ctx.results.summary()[0].contains(v),
        number,
    ),
    Case(
        "scenarios_of",
        "grid",
        lambda v, ctx: experiment.scenarios_of(v),
        lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and k for k in v),
    ),
    Case(
        "trace.plot_trace",
        "size",
        lambda v, ctx: trace.plot_trace({"traceEvents": []}, ctx.folder / "t.png", size=v),
        lambda v: (
            isinstance(v, tuple)
            and len(v) == 2
            and all(count_in(x, 200, 20000) for x in v)
            and v[0] * v[1] <= 50_000_000
        ),
    ),
    Case(
        "trace.plot_trace",
        "max_rows",
        lambda v, ctx: trace.plot_trace({"traceEvents": []}, ctx.folder / "t.png", max_rows=v),
        lambda v: count_in(v, 1, 1000),
    ),
    Case(
        "trace.plot_trace",
        "title",
        lambda v, ctx: trace.plot_trace({"traceEvents": []}, ctx.folder / "t.png", title=v),
        lambda v: v is None or (isinstance(v, str) and len(v) <= 500),
    ),
    Case(
        "trace.plot_trace",
        "rows",
        lambda v, ctx: trace.plot_trace({"traceEvents": []}, ctx.folder / "t.png", rows=v),
        lambda v: (
            v is None
            or (isinstance(v, str) and 0 < len(v) <= 200)
            or (
                isinstance(v, (list, tuple))
                and all(isinstance(p, str) and 0 < len(p) <= 200 for p in v)
            )
        ),
    ),
    Case(
        "trace.plot_trace",
        "internal",
        lambda v, ctx: trace.plot_trace({"traceEvents": []}, ctx.folder / "t.png", internal=v),
        lambda v: isinstance(v, bool),
    ),
    Case(
        "trace.plot_trace",
        "output",
        lambda v, ctx: trace.plot_trace({"traceEvents": []}, in_folder(ctx, v)),
        lambda v: isinstance(v, (str, os.PathLike)) and Path(v).suffix.lower() in PICTURES,
    ),
    Case(
        "trace.record_span",
        "start",
        lambda v, ctx: trace.record_span("row", "name", v, 1e9),
        lambda v: number(v) and math.isfinite(v),  # type: ignore[arg-type]
    ),
    Case(
        "trace.Category",
        "colour",
        lambda v, ctx: trace.Category("c", v, "legend"),
        lambda v: (
            isinstance(v, str)
            and len(v) == 7
            and v[0] == "#"
            and all(c in "0123456789abcdefABCDEF" for c in v[1:])
        ),
    ),
    Case(
        "trace.Category",
        "hatch",
        lambda v, ctx: trace.Category("c", "#123456", "legend", hatch=v),
        lambda v: (
            v is None or (isinstance(v, str) and 0 < len(v) <= 10 and set(v) <= set("/\\|-+xoO.*"))
        ),
    ),
    Case(
        "trace.register_category",
        "category",
        lambda v, ctx: trace.register_category(v),
        lambda v: isinstance(v, trace.Category),
    ),
    Case(
        "trace.TraceRecorder.add_run",
        "start",
        lambda v, ctx: trace.TraceRecorder().add_run(object(), "run", start=v),
        lambda v: v is None or (number(v) and math.isfinite(v)),  # type: ignore[arg-type]
    ),
]


def ctx_pool() -> Any:
    import concurrent.futures

    return concurrent.futures.ThreadPoolExecutor(1)


def in_folder(ctx: Context, value: Any) -> Any:
    """A relative path names a file in the test's folder, so nothing lands elsewhere."""
    if isinstance(value, str) and value and not os.path.isabs(value) and "\x00" not in value:
        return str(ctx.folder / value)
    return value


hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([0, -1, 10**6, 10**30, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e-300, 1e300]),
    st.text(max_size=12),
    st.sampled_from(["", "x.json", "1.-2", "processes:x", "cluster", "x" * 100_000]),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=2), st.floats()), max_size=3),
    st.tuples(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6)),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), st.integers(), max_size=2),
    st.just(object()),
    st.just(b"bytes"),
)


@pytest.fixture(scope="module")
def base_results() -> Results:
    return experiment.replicate(CountingModel(), {}, 3, seed=1)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_every_public_parameter_refuses_bad_values_before_anything_changes(
    data: st.DataObject, base_results: Results
) -> None:
    case = data.draw(st.sampled_from(CASES), label="case")
    value = data.draw(hostile.filter(lambda v: not _valid(case, v)), label=case.name)
    results = copy.deepcopy(base_results)
    before = copy.deepcopy(results)
    categories = dict(trace.categories())
    with tempfile.TemporaryDirectory() as folder:
        ctx = Context(CountingModel(), results, Path(folder))
        with pytest.raises(VirtualTimeError) as caught:
            case.call(value, ctx)
        assert isinstance(caught.value, (TypeError, ValueError)), caught.value
        message = str(caught.value)
        assert (case.named or case.name) in message, f"{case.where}({case.name}=...): {message}"
        assert len(message) < 600, f"{case.where}: a hostile value floods the message"
        assert ctx.model.calls == 0, "a replication ran before the bad value was refused"
        assert os.listdir(folder) == [], "something was written"
    assert results == before, "the Results changed"
    assert dict(trace.categories()) == categories


def _valid(case: Case, value: object) -> bool:
    try:
        return bool(case.valid(value))
    except Exception:  # a predicate that chokes on an odd value: the value is not valid
        return False


@pytest.mark.parametrize("values", [["0"], [1.0, True], [1.0, None], np.array(["a", "b"])], ids=str)
def test_interval_refuses_what_numpy_would_quietly_read_as_numbers(values: Any) -> None:
    # numpy reads "0" as 0.0 and True as 1.0; found by this file's walk on 3.13 and 3.14.
    with pytest.raises(InvalidTypeError, match="values must be real numbers"):
        experiment.interval(values, 0.95)
