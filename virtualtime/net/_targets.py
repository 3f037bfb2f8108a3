"""Naming a scenario so another process can load it: ``module:function`` or ``file.py:function``.

Exploring in worker processes, and the one-line replay of a failure, both need a scenario
that can be found again from outside: a function defined at the top level of a module (or of
a class in it).  :func:`target_of` names such a function -- ``package.module:main`` for a
module inside a package (it may use relative imports) or one in the current folder, else the
file's path, ``tests/scenarios.py:main``, which loads whatever ``sys.path`` holds -- or says
None for a lambda, a closure, a ``functools.partial`` or a function typed at the prompt.
:func:`load_target` turns such a name back into the function: it imports the module (with the
current folder on ``sys.path``, as ``python -m`` does) or loads the file.

A file is loaded once, and under a private module name (``_virtualtime_scenario_<crc>_<stem>``):
its ``if __name__ == "__main__":`` block does not run, and a file ``tests/json.py`` never
takes the place of the real ``json`` for the code that imports it later.  A file already
imported is not loaded again -- the module a test imported it as, the script being run
(``__main__``, so its top level does not run twice in the process that explores), and in a
spawned worker process the copy of that script multiprocessing made (``__mp_main__``).  A
sibling module that imports the scenario file by its plain name gets a copy of its own
(module-level state is then not shared with the loaded one); its folder goes at the *end*
of ``sys.path``, where it hides no other module.  :func:`target_of` names a
function of such a privately loaded file by the file's path, so replay lines stay pasteable.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from .._shared._errors import InvalidValueError
from .._shared._time import shown

__all__ = ["load_target", "target_of"]

_FORM: Final = "a scenario is 'module:function' or 'path/to/file.py:function'"
_PRIVATE: Final = "_virtualtime_scenario_"
"""The start of the module name a scenario file is loaded under."""
_MAINS: Final = ("__main__", "__mp_main__")
"""The names of the script being run (``__mp_main__``: its copy in a spawned worker)."""


def _lookup(owner: Any, qualname: str) -> Any:
    target = owner
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return target


def target_of(main: Callable[..., Any]) -> str | None:
    """``"module:qualname"`` or ``"file.py:qualname"`` that loads ``main`` elsewhere, or None."""
    module_name = getattr(main, "__module__", None)
    qualname = getattr(main, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    if not all(part.isidentifier() for part in qualname.split(".")):
        return None  # a lambda, or a function defined inside another (<locals>)
    module = sys.modules.get(module_name)
    if module is None or _lookup(module, qualname) is not main:
        return None
    file = getattr(module, "__file__", None)
    spec = getattr(module, "__spec__", None)
    here = file is not None and Path(file).parent.resolve() == Path.cwd()
    private = module_name.startswith(_PRIVATE) or module_name in _MAINS
    if not private and spec is not None and (spec.parent or here):
        return f"{module_name}:{qualname}"
    if not isinstance(file, str) or not file.endswith(".py"):
        # Neither a file nor a package member: a module importable by name (a C module, a
        # zip import) -- or nothing another process can find.
        return None if private else f"{module_name}:{qualname}"
    # Shown as the user reaches it: relative to the working directory when it lies below it,
    # through the same links (an absolute path with links resolved names a place the user
    # never typed).
    path = Path(os.path.abspath(file))
    try:
        shown_path = str(path.relative_to(Path(os.path.abspath(os.getcwd()))))
    except ValueError:
        shown_path = str(path)
    return f"{shown_path}:{qualname}"


_LOADED: dict[str, Callable[..., Any]] = {}


def load_target(text: str) -> Callable[..., Any]:
    """The function ``text`` (``"module:function"`` or ``"file.py:function"``) names.

    Raises :class:`~virtualtime.InvalidValueError` for a malformed name, a missing file or
    function, and what importing the module raises (``ImportError``, ``SyntaxError``...).
    """
    cached = _LOADED.get(text)
    if cached is not None:
        return cached
    if not isinstance(text, str) or ":" not in text:
        raise InvalidValueError(f"{_FORM}, got {shown(text)}")
    where, _, qualname = text.rpartition(":")
    if not where or not qualname or not all(p.isidentifier() for p in qualname.split(".")):
        raise InvalidValueError(f"{_FORM}, got {shown(text)}")
    if where.endswith(".py") or os.sep in where or "/" in where:
        module = _load_file(where)
    else:
        if not all(part.isidentifier() for part in where.split(".")):
            raise InvalidValueError(f"{_FORM} (a module's dotted name), got {shown(text)}")
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # as python -m finds modules of this folder
        module = importlib.import_module(where)
    found = _lookup(module, qualname)
    if found is None:
        raise InvalidValueError(f"{where} has no function {qualname!r} ({text})")
    if not callable(found):
        raise InvalidValueError(f"{text} is not callable: {shown(found)}")
    _LOADED[text] = found
    return found  # type: ignore[no-any-return]


def _load_file(where: str) -> Any:
    # Absolute, through the links the user went through (its replay line names it so).
    path = Path(os.path.abspath(where))
    if not path.is_file():
        raise InvalidValueError(f"scenario file {shown(where)} does not exist")
    real = path.resolve()
    stem = path.stem if path.stem.isidentifier() else "scenario"
    name = f"{_PRIVATE}{zlib.crc32(str(real).encode()):08x}_{stem}"
    for known in (name, path.stem, *_MAINS):  # already imported: not run a second time
        existing = sys.modules.get(known)
        file = getattr(existing, "__file__", None)
        if isinstance(file, str) and Path(file).resolve() == real:
            return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidValueError(f"cannot load a scenario from {shown(where)}")
    folder = str(path.parent)
    if folder not in sys.path:
        # Its sibling modules import, as under ``python file.py`` -- but from the end of the
        # path, so that the file's folder never hides a real module of the same name.
        sys.path.append(folder)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
