"""The version of virtualtime: the one place it is written.

``pyproject.toml`` reads it from here (``[tool.setuptools.dynamic]``), ``virtualtime.__version__``
re-exports it, and the command line and trace files report it.  Change it here only.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

__version__ = "0.1.0"
