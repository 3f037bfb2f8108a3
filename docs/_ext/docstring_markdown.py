"""The two pieces of reStructuredText in virtualtime's docstrings, turned into Markdown.

The docstrings are Google style (``Args:`` sections), which mkdocstrings reads, but two
Sphinx habits remain in their prose, and Markdown has neither:

* roles that name another object, ``:func:`run``` or ``:class:`~virtualtime.sim.Clock```:
  each becomes a code span of the name a reader would see (``run``, ``Clock``);
* literal blocks, a paragraph ending in ``::`` followed by an indented block: the ``::``
  becomes ``:`` (as Sphinx prints it) and the block a fenced Python block, so that it is
  highlighted like every other example on the site instead of shown as plain text;
* definition lists whose terms are code (a line that is just ````velocity````, its
  description indented under it): each entry becomes a bullet, ``- `velocity`: ...``, where
  Markdown would otherwise run every term and description into one paragraph.

Only the standard library here, so the test suite can check it without the docs extra;
``sphinx_roles.py`` applies it to every docstring mkdocstrings renders.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|exc|data|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    short, target = match[1], match[2]
    if "<" in target:  # :func:`text <target>`
        return f"`{target.split('<', 1)[0].strip()}`"
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _literal_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        # A paragraph line ending in "::" (not a lone "::" inside a code example), then a
        # blank line, then lines indented deeper than it: a literal block.
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if (
            stripped.endswith("::")
            and stripped.strip() != "::"
            and j > i + 1
            and j < len(lines)
            and _indent(lines[j]) > _indent(line)
        ):
            base = _indent(line)
            end = j
            while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
                end += 1
            while not lines[end - 1].strip():  # trailing blank lines stay outside the fence
                end -= 1
            body = lines[j:end]
            deeper = min(_indent(b) for b in body if b.strip())
            pad = " " * base
            # As Sphinx prints it: "text::" reads "text:", and "text ::" reads "text".
            text_before = stripped[:-2]
            out.append(text_before.rstrip() if text_before.endswith(" ") else text_before + ":")
            out.append("")
            out.append(pad + "```python")
            out.extend(pad + b[deeper:] if b.strip() else "" for b in body)
            out.append(pad + "```")
            i = end
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


_TERM = re.compile(r"^( *)(``[^`]+``)$")


def _definition_lists(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        term = _TERM.match(lines[i])
        if term and i + 1 < len(lines) and lines[i + 1].strip():
            base = len(term[1])
            end = i + 1
            while end < len(lines) and lines[end].strip() and _indent(lines[end]) > base:
                end += 1
            if end > i + 1:
                body = [line.strip() for line in lines[i + 1 : end]]
                out.append(f"{term[1]}- {term[2]}: {body[0]}")
                out.extend(f"{term[1]}  {line}" for line in body[1:])
                i = end
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def to_markdown(docstring: str) -> str:
    """The docstring with its Sphinx roles, literal blocks and definition lists as Markdown."""
    return _definition_lists(_literal_blocks(_ROLE.sub(_plain, docstring)))
