"""Build hook for the optional compiled part: ``virtualtime._cclocks`` (see its source).

Everything else is in pyproject.toml.  The extension is optional: without a compiler (or with
``VIRTUALTIME_PURE_PYTHON=1`` in the environment) the build skips it and virtualtime uses its
pure-Python path, which needs nothing but the standard library.
"""

import os

from setuptools import Extension, setup

extensions = []
if not os.environ.get("VIRTUALTIME_PURE_PYTHON"):
    extensions.append(Extension("virtualtime._cclocks", ["virtualtime/_cclocks.c"], optional=True))

setup(ext_modules=extensions)
