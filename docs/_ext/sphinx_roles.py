"""A Griffe extension for the API reference: Sphinx roles in docstrings read as code.

virtualtime's docstrings name other objects the Sphinx way (``:func:`run```,
``:class:`~virtualtime.sim.Clock```).  Markdown has no such roles, so this turns each into a
plain code span of the name a reader would see (``run``, ``Clock``) before mkdocstrings
renders the docstring.  Loaded from mkdocs.yml; not part of the package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|exc|data|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    short, target = match[1], match[2]
    if "<" in target:  # :func:`text <target>`
        return f"`{target.split('<', 1)[0].strip()}`"
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrites ``:role:`name``` to ``name`` in every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
