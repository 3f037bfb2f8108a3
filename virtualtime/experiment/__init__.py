"""Experiments: replications and parameter sweeps with confidence intervals.

A simulation answers a question through many replications.  Write the model as a function,
``async def model(params, rng) -> {"wait": ..., ...}``, and let this package run it:

* :func:`replicate` -- one design, ``n`` independent replications, t-intervals per output;
  with ``half_width=`` it adds replications until the intervals are narrow enough (KSL's
  sequential rule).
* :func:`sweep` -- every scenario of a grid (a full factorial or an explicit list), with
  common random numbers across scenarios and paired differences against a baseline.
* :class:`Results` -- the replication table (a pandas DataFrame, or plain records), the
  :class:`Summary` and :class:`Difference` rows, failures (:class:`Failure`, re-runnable
  alone with :func:`run_one`), Parquet/CSV output and a plot.
* Executors: serial in this process (the default), ``"processes"`` (all cores), a Dask
  ``distributed.Client`` or ``"dask://HOST:PORT"``, ``"ray"`` / ``"ray://ADDRESS"``, any
  :class:`concurrent.futures.Executor`, or your own :class:`Backend`.  The same seed gives
  the same table, bit for bit, on every one of them and any number of workers.

Needs numpy and scipy, imported at first use (``pip install
'async-virtualtime[experiment]'``); pandas, pyarrow, rich and matplotlib are used when
present.  Dask and Ray are imported only when used.
The command line: ``virtualtime experiment model.py:model --replications 200 ...``.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Backend": "_executors",
    "Dask": "_executors",
    "Futures": "_executors",
    "Ray": "_executors",
    "Serial": "_executors",
    "ModelRef": "_model",
    "make_rng": "_model",
    "run_one": "_model",
    "Difference": "_results",
    "Failure": "_results",
    "Results": "_results",
    "Summary": "_results",
    "Progress": "_run",
    "replicate": "_run",
    "scenarios_of": "_run",
    "sweep": "_run",
    "interval": "_stats",
}

__all__ = tuple(sorted(_EXPORTS))

if TYPE_CHECKING:
    from ._executors import Backend as Backend
    from ._executors import Dask as Dask
    from ._executors import Futures as Futures
    from ._executors import Ray as Ray
    from ._executors import Serial as Serial
    from ._model import ModelRef as ModelRef
    from ._model import make_rng as make_rng
    from ._model import run_one as run_one
    from ._results import Difference as Difference
    from ._results import Failure as Failure
    from ._results import Results as Results
    from ._results import Summary as Summary
    from ._run import Progress as Progress
    from ._run import replicate as replicate
    from ._run import scenarios_of as scenarios_of
    from ._run import sweep as sweep
    from ._stats import interval as interval


def __getattr__(name: str) -> Any:
    # Lazy, so `virtualtime --help` and `import virtualtime.experiment` stay cheap and work
    # without numpy; the first real use says which extra is missing.
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'virtualtime.experiment' has no attribute {name!r}")
    import importlib

    from ._requires import require_numpy_and_scipy

    require_numpy_and_scipy()

    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
