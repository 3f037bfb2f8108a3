"""``python -m virtualtime``: the same command as ``virtualtime`` (see :mod:`virtualtime.cli`).

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
