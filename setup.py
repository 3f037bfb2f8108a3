"""Build hook for the optional compiled parts: ``_clocks._cclocks`` and ``_engine._cwake``.

Everything else is in pyproject.toml.  Both extensions are optional: without a compiler (or
with ``VIRTUALTIME_PURE_PYTHON=1`` in the environment) the build skips them and virtualtime
uses its pure-Python paths, which need nothing but the standard library.  ``_cwake`` is the
loop's compiled core (the timer heap and the wake-up path, see its source).
"""

import os

from setuptools import Extension, setup

extensions = []
if not os.environ.get("VIRTUALTIME_PURE_PYTHON"):
    extensions.append(
        Extension("virtualtime._clocks._cclocks", ["virtualtime/_clocks/_cclocks.c"], optional=True)
    )
    extensions.append(
        Extension("virtualtime._engine._cwake", ["virtualtime/_engine/_cwake.c"], optional=True)
    )

setup(ext_modules=extensions)
