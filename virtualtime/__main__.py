"""``python -m virtualtime``: the same command as ``virtualtime`` (see :mod:`virtualtime.cli`)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
