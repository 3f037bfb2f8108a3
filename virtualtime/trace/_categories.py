"""The span categories: how each is drawn, and the registry every trace and timeline reads.

A :class:`Category` says how the timeline draws the spans of one category (colour, legend,
layer, hatch) and what the trace adds after each span (``until_next``).  The registry holds
them by name: the built-in ones (``sleep``, ``waiting``, ``alive``, ``span``, ``timer``) are
registered when this module is imported, and other layers add theirs with
:func:`register_category` (the simulation toolkit registers its journey outcomes).  The trace
builder copies the styles it uses into each trace file; the picture reads them back from
there, falling back on this registry.

Part of ``trace``: may import ``shared``, ``engine`` (see tests/layout.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._text import _shown

_COLOUR: Final = re.compile(r"#[0-9a-fA-F]{6}")
_LAYERS: Final = ("band", "bar", "front")
_HATCH: Final = re.compile(r"[/\\|\-+xoO.*]{1,10}")
"""A matplotlib hatch: its pattern letters, repeated for density (ten is denser than any eye)."""
_LABEL_LIMIT: Final = 200
"""The longest category name or legend text accepted (a legend line, not a paragraph)."""


@dataclass(frozen=True, slots=True)
class Category:
    """How the timeline draws the spans of one category, registered by :func:`register_category`.

    Describe a category when a layer of yours reports spans (:func:`record_span`) and its
    picture should read well: a colour, the legend's words, and how the spans sit on a row.

    ``layer`` is ``"band"`` (a thin strip behind everything: a task asleep or waiting),
    ``"bar"`` (a full-height bar, the default) or ``"front"`` (a bar drawn above the others
    and never narrower than a few pixels: the event a reader looks for, such as a breakdown).
    ``hatch`` is a matplotlib hatch pattern (``"////"``: up to ten of ``/ \\ | - + x o O . *``)
    or None.  ``edges`` draws a thin
    white edge round each bar, so that back-to-back spans stay distinct.

    ``until_next`` is ``(category, name)``: after each span of this category, the trace adds
    a span of that category and name lasting until the row's next span starts (or until the
    run ends) -- what the row was doing in between.  ``carry`` names arguments of the span
    that the added span repeats (each None when the span has no such argument).
    """

    name: str
    colour: str
    legend: str
    layer: Literal["band", "bar", "front"] = "bar"
    hatch: str | None = None
    edges: bool = True
    until_next: tuple[str, str] | None = None
    carry: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label in ("name", "legend"):
            value = getattr(self, label)
            if not isinstance(value, str) or not value or len(value) > _LABEL_LIMIT:
                raise InvalidValueError(
                    f"Category: {label} must be a non-empty str of at most {_LABEL_LIMIT} "
                    f"characters, got {_shown(value)}"
                )
        named = f"Category {self.name!r}"
        if not isinstance(self.colour, str) or not _COLOUR.fullmatch(self.colour):
            raise InvalidValueError(
                f"{named}: colour must be '#rrggbb' (six hex digits), got {_shown(self.colour)}"
            )
        if not isinstance(self.layer, str) or self.layer not in _LAYERS:
            raise InvalidValueError(
                f"{named}: layer must be one of {', '.join(map(repr, _LAYERS))}, "
                f"got {_shown(self.layer)}"
            )
        if self.hatch is not None and (
            not isinstance(self.hatch, str) or not _HATCH.fullmatch(self.hatch)
        ):
            raise InvalidValueError(
                f"{named}: hatch must be None or 1 to 10 of the pattern letters "
                f"/ \\ | - + x o O . *, got {_shown(self.hatch)}"
            )
        if not isinstance(self.edges, bool):
            raise InvalidValueError(f"{named}: edges must be a bool, got {_shown(self.edges)}")
        then = self.until_next
        if then is not None and not (
            isinstance(then, tuple)
            and len(then) == 2
            and all(isinstance(t, str) and t and len(t) <= _LABEL_LIMIT for t in then)
        ):
            raise InvalidValueError(
                f"{named}: until_next must be None or (category, name), two "
                f"non-empty strs, got {_shown(then)}"
            )
        if not isinstance(self.carry, tuple) or not all(isinstance(k, str) for k in self.carry):
            raise InvalidValueError(
                f"{named}: carry must be a tuple of str, got {_shown(self.carry)}"
            )


_categories: dict[str, Category] = {}


def register_category(category: Category, *, replace: bool = False) -> None:
    """Teach traces and timelines a span category: its colour, legend and drawing.

    This is the extension point for layers that report spans: call it once, at import, for
    each category the layer's :func:`record_span` calls use (the simulation toolkit
    registers its journey outcomes this way).  Registering an equal category again does
    nothing; a different one under a name already taken is a ``ValueError`` unless
    ``replace=True`` (for example to recolour a built-in category).
    """
    if not isinstance(category, Category):
        raise InvalidTypeError(f"register_category needs a Category, got {_shown(category)}")
    known = _categories.get(category.name)
    if known is not None and known != category and not replace:
        raise InvalidValueError(
            f"register_category: category {category.name!r} is already registered as "
            f"{known!r}; pass replace=True to change it"
        )
    _categories[category.name] = category


def categories() -> Mapping[str, Category]:
    """Every registered category by name, read-only, in the order they were registered."""
    return MappingProxyType(_categories)


for _builtin in (
    Category("sleep", "#c6dbef", "asleep on a timer", layer="band", edges=False),
    Category("waiting", "#f28e2b", "waiting: on a queue, lock, event, task or I/O", layer="band"),
    Category("alive", "#bab0ac", "alive (trio: asleep and waiting not told apart)", layer="band"),
    Category("span", "#4e79a7", "span"),
    Category("timer", "#3b3b3b", "timer callback"),
):
    register_category(_builtin)
del _builtin
