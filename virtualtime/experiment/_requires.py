"""The experiment extra: numpy and scipy, checked with an error that says how to install them.

Every name of :mod:`virtualtime.experiment` needs numpy and scipy, which are an optional extra.
The package's face and the ``virtualtime experiment`` command call
:func:`require_numpy_and_scipy` before importing a module that needs them, so a missing one
is reported as the extra to install rather than as a bare ``ModuleNotFoundError``.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations


def require_numpy_and_scipy() -> None:
    """Raise an ImportError naming the missing module and the extra, unless both import."""
    try:
        import numpy  # noqa: F401
        import scipy  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"virtualtime.experiment needs numpy and scipy ({error.name} is missing): "
            "pip install 'async-virtualtime[experiment]'"
        ) from error
