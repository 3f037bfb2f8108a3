"""A Griffe extension for the API reference: the reStructuredText left in docstrings, as Markdown.

virtualtime's docstrings are Google style, but name other objects the Sphinx way
(``:func:`run```, ``:class:`~virtualtime.sim.Clock```) and show code as Sphinx literal blocks
(a paragraph ending in ``::``).  Markdown has neither, so before mkdocstrings renders a
docstring this rewrites both (``docstring_markdown.to_markdown``: roles become code spans of
the name a reader would see, literal blocks become fenced Python blocks).  Loaded from
mkdocs.yml; not part of the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import griffe

# Griffe loads this file by path, so its neighbour is loaded the same way (this folder is not
# on sys.path).
_path = Path(__file__).with_name("docstring_markdown.py")
_spec = importlib.util.spec_from_file_location("_virtualtime_docstring_markdown", _path)
if _spec is None or _spec.loader is None:
    raise ImportError(f"cannot load {_path}")
_markdown = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_markdown)


class SphinxRoles(griffe.Extension):
    """Rewrites Sphinx roles and literal blocks as Markdown in every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _markdown.to_markdown(obj.docstring.value)
