"""Redirecting C clock objects to Python code in place, so every reference to them follows.

``patch_time`` must reach a clock however a program holds it: ``time.monotonic`` looked up on
the module, ``from time import monotonic``, ``timer=time.monotonic`` bound as a default
argument at import, ``functools.partial(datetime.now, UTC)`` stored on an object.  Replacing
module attributes reaches only the first; scanning modules (freezegun) reaches the second and
misses the rest.  All of them, though, hold *the same C object*, so the only complete answer
is to change what that object does when called.  time-machine does this with a C extension
that swaps the function pointer inside the method tables of ``time`` and ``datetime``.  This
module does the same with nothing but the standard library (``ctypes``), and never needs a
compiler:

* A builtin function (``time.monotonic``, ``time.localtime``, ...) is a C struct holding a
  pointer to its method definition (name, C function, calling convention) and a ``self``
  (the ``time`` module).  CPython calls ``definition->function(self, args)``.  While patched,
  the object points at *a copy* of its definition whose C function is one of CPython's own
  public call helpers -- ``PyObject_CallNoArgs(self)``, ``PyObject_CallObject(self, args)``,
  ``PyObject_CallOneArg(self, arg)`` or ``PyObject_Vectorcall(self, args, n, kwnames)``,
  chosen to match the calling convention -- and its ``self`` is the Python replacement.  So
  the call lands in ordinary Python code through an ordinary C call: exceptions propagate,
  there is no foreign-function callback (a ctypes callback cannot raise: an exception in one
  crashes the interpreter), and the overhead is one Python call.  The static method table is
  never written, so a sub-interpreter's ``time`` module, which shares it, is unaffected.
* ``datetime.datetime.now``, ``utcnow`` and ``datetime.date.today`` are class methods: their C
  function receives the *class* as its first argument, and no public C helper turns that into
  a call of Python code.  With the optional compiled helper (``virtualtime._clocks._cclocks``) their
  C definitions are pointed at its trampolines (:meth:`Redirections.redirect_definition`), and
  every lookup and every bound method, made at any time, follows.  Without it, the class's
  own namespace gets a Python ``classmethod`` in their place (then ``PyType_Modified``, so
  CPython's attribute caches see it) -- that reaches every lookup, through any name, and
  subclasses -- and bound methods made before the patch (``factory=datetime.now``) are found
  with ``gc.get_referrers`` on the classes and redirected one by one as above.

Every change is recorded as (address, old value) and undone in reverse order, so the objects
end exactly as they were: same identity, same pointers, same namespace entries -- except an
entry someone else replaced after us, which is theirs to restore (:meth:`Redirections.undo`).
The layouts used (``PyCFunctionObject``: method-def pointer then ``self`` right after the
object header) are stable from 3.11 to 3.15 and are checked against the live object before
the first write, and read back before every later one: :func:`redirect_function` refuses an
object whose fields do not read as expected.

Part of ``clocks``: may import ``shared`` (see tests/layout.py).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import types
import weakref
from collections.abc import Callable
from typing import Any, Final

from .._shared._errors import InvalidTypeError, UnsupportedError

__all__ = ["Redirections", "real_copy"]

_POINTER: Final = ctypes.sizeof(ctypes.c_void_p)
_HEADER: Final = object.__basicsize__  # sizeof(PyObject): 16, or more on free-threaded builds

# Calling conventions (Include/methodobject.h).
_METH_VARARGS: Final = 0x0001
_METH_KEYWORDS: Final = 0x0002
_METH_NOARGS: Final = 0x0004
_METH_O: Final = 0x0008
_METH_CLASS: Final = 0x0010
_METH_FASTCALL: Final = 0x0080
_CONVENTION: Final = _METH_VARARGS | _METH_KEYWORDS | _METH_NOARGS | _METH_O | _METH_FASTCALL


class _MethodDef(ctypes.Structure):
    _fields_ = (
        ("ml_name", ctypes.c_void_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_void_p),
    )


_api: Final = ctypes.pythonapi


def _address(name: str) -> int:
    value = ctypes.cast(getattr(_api, name), ctypes.c_void_p).value
    assert value is not None
    return value


# The C call helpers, by calling convention: each has exactly the signature CPython uses to
# call a method of that convention, with the method's ``self`` as the callable.
_CALLERS: Final[dict[int, int]] = {
    _METH_NOARGS: _address("PyObject_CallNoArgs"),
    _METH_VARARGS: _address("PyObject_CallObject"),
    _METH_O: _address("PyObject_CallOneArg"),
    _METH_FASTCALL | _METH_KEYWORDS: _address("PyObject_Vectorcall"),
}

_incref: Final = _api.Py_IncRef
_incref.argtypes = (ctypes.py_object,)
_incref.restype = None
_decref: Final = _api.Py_DecRef
_decref.argtypes = (ctypes.py_object,)
_decref.restype = None
_type_modified: Final = _api.PyType_Modified
_type_modified.argtypes = (ctypes.py_object,)
_type_modified.restype = None
_new_function: Final = _api.PyCFunction_NewEx
_new_function.argtypes = (ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p)
_new_function.restype = ctypes.py_object
_new_class_method: Final = _api.PyDescr_NewClassMethod
_new_class_method.argtypes = (ctypes.py_object, ctypes.c_void_p)
_new_class_method.restype = ctypes.py_object

# The copied definitions, by content: an object may point at one at any moment (a call in
# another thread may still be reading it after an undo), so none is ever freed -- and because
# a copy depends only on what it copies, each is made once and every later install reuses it.
# Installing again (each run, each ``evolve()`` of a patched manual loop) adds nothing.
_DefinitionKey = tuple[int | None, int | None, int, int | None]
_kept: dict[_DefinitionKey, _MethodDef] = {}


def _copy(name: int | None, function: int | None, flags: int, doc: int | None) -> _MethodDef:
    """The kept method definition with these fields, made on first use."""
    key = (name, function, flags, doc)
    copy = _kept.get(key)
    if copy is None:
        copy = _kept[key] = _MethodDef(name, function, flags, doc)
    return copy


def _slot(obj: object, index: int) -> ctypes.c_void_p:
    """The pointer-sized field ``index`` after the object header, as a writable view."""
    return ctypes.c_void_p.from_address(id(obj) + _HEADER + index * _POINTER)


def _definition(func: types.BuiltinFunctionType) -> _MethodDef:
    """The method definition of a builtin function or bound builtin method, checked."""
    if type(func) is not types.BuiltinFunctionType:
        raise InvalidTypeError(f"not a builtin function: {func!r}")
    pointer = _slot(func, 0).value
    self_pointer = _slot(func, 1).value
    expected_self = getattr(func, "__self__", None)
    if pointer is None or self_pointer != (None if expected_self is None else id(expected_self)):
        raise UnsupportedError(f"unexpected builtin function layout for {func!r}")
    definition = _MethodDef.from_address(pointer)
    name = ctypes.string_at(definition.ml_name) if definition.ml_name else b""
    if name.decode() != func.__name__:
        raise UnsupportedError(f"unexpected builtin function layout for {func!r}")
    return definition


def real_copy(func: types.BuiltinFunctionType) -> Callable[..., Any]:
    """A new builtin function with ``func``'s definition: the unpatched original, for ever.

    It shares the static method table (never written here), so it keeps calling the C clock
    whatever happens to ``func`` itself.
    """
    definition = _definition(func)
    return _new_function(ctypes.addressof(definition), func.__self__, None)  # type: ignore[no-any-return]


def _class_method_definition(cls: type, name: str) -> _MethodDef:
    """The method definition behind a builtin class method (``datetime.now``), checked."""
    descriptor = vars(cls)[name]
    if type(descriptor).__name__ != "classmethod_descriptor":
        raise InvalidTypeError(f"{cls.__name__}.{name} is not a builtin class method")
    # PyMethodDescrObject: the header, d_type, d_name, d_qualname, then d_method.
    pointer = ctypes.c_void_p.from_address(id(descriptor) + _HEADER + 3 * _POINTER).value
    if pointer is None:  # pragma: no cover
        raise UnsupportedError(f"unexpected method descriptor layout for {cls.__name__}.{name}")
    definition = _MethodDef.from_address(pointer)
    if not definition.ml_name or ctypes.string_at(definition.ml_name).decode() != name:
        raise UnsupportedError(f"unexpected method descriptor layout for {cls.__name__}.{name}")
    return definition


def real_class_method(cls: type, name: str) -> Any:
    """A new class-method descriptor on a copy of ``cls.name``'s definition: the original.

    Taken before any redirection; it keeps calling the C code whatever happens to the
    class's own definition (see :meth:`Redirections.redirect_definition`).
    """
    definition = _class_method_definition(cls, name)
    copy = _copy(definition.ml_name, definition.ml_meth, definition.ml_flags, definition.ml_doc)
    return _new_class_method(cls, ctypes.addressof(copy))


def class_method_convention(cls: type, name: str) -> int:
    """The calling convention of a builtin class method (``_METH_*`` bits, without CLASS)."""
    return int(_class_method_definition(cls, name).ml_flags) & _CONVENTION


class _Plan:
    """How to redirect one builtin function: its fields as checked, and the copy to point at.

    Made once per object and reused by every later install (each run, each ``evolve()`` of a
    patched manual loop), which then only reads the two fields back before writing them.
    """

    __slots__ = ("copy_address", "ml_slot", "ml_value", "self_slot", "self_value")

    def __init__(self, func: types.BuiltinFunctionType) -> None:
        definition = _definition(func)
        convention = definition.ml_flags & _CONVENTION
        caller = _CALLERS.get(convention)
        if caller is None:  # pragma: no cover - no clock of 3.11-3.15 uses another one
            raise UnsupportedError(f"cannot redirect {func!r}: calling convention {convention:#x}")
        copy = _copy(
            definition.ml_name, caller, definition.ml_flags & ~_METH_CLASS, definition.ml_doc
        )
        self.copy_address = ctypes.addressof(copy)
        self.ml_slot, self.self_slot = _slot(func, 0), _slot(func, 1)
        self.ml_value, self.self_value = self.ml_slot.value, self.self_slot.value

    def holds(self) -> bool:
        """Whether the object's fields still read as they did when they were checked."""
        return self.ml_slot.value == self.ml_value and self.self_slot.value == self.self_value


# Plans by object id, each dropped when its object dies (bound methods come and go), so an
# id reused by a new object never finds an old plan.
_plans: dict[int, _Plan] = {}
_plan_refs: dict[int, weakref.ref[types.BuiltinFunctionType]] = {}


def _plan(func: types.BuiltinFunctionType) -> _Plan:
    key = id(func)
    plan = _plans.get(key)
    if plan is None or not plan.holds():
        if type(func) is not types.BuiltinFunctionType:  # before any id is remembered
            raise InvalidTypeError(f"not a builtin function: {func!r}")
        plan = _Plan(func)
        if key not in _plan_refs:
            _plan_refs[key] = weakref.ref(func, functools.partial(_forget_plan, key))
        _plans[key] = plan
    return plan


def _forget_plan(key: int, _ref: object) -> None:
    _plans.pop(key, None)
    _plan_refs.pop(key, None)


class Redirections:
    """A reversible set of redirections; :meth:`undo` restores every field it wrote."""

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        # (kind, target, key/address, previous) in the order applied.
        self._undo: list[tuple[str, Any, Any, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._undo)

    def redirect_function(
        self, func: types.BuiltinFunctionType, target: Callable[..., Any]
    ) -> None:
        """Make calling ``func`` (a builtin function or bound builtin method) call ``target``.

        ``target`` receives exactly the arguments ``func`` received.
        """
        plan = _plan(func)
        ml_slot, self_slot = plan.ml_slot, plan.self_slot
        _incref(target)  # the object owns a reference to its self; balanced in undo()
        # The object itself is held until undo(): its fields are written back then, and a
        # bound method dropped by the program meanwhile must not be freed under them.
        self._undo.append(("function", func, plan, target))
        # self first, then the definition: a concurrent call sees either the old pair's
        # function with the new self (the C clock ignores self) or the complete new pair.
        self_slot.value = id(target)
        ml_slot.value = plan.copy_address

    def redirect_definition(self, cls: type, name: str, address: int) -> None:
        """Point the C definition of the builtin class method ``cls.name`` at ``address``.

        Only with the compiled trampolines of ``virtualtime._clocks._cclocks``, whose signatures
        match. Every lookup of the method and every bound method, made at any time, follows.
        """
        definition = _class_method_definition(cls, name)
        self._undo.append(("definition", definition, address, definition.ml_meth))
        definition.ml_meth = address

    def replace_class_attribute(self, cls: type, name: str, value: object) -> object:
        """Put ``value`` under ``name`` in ``cls``'s own namespace; return what was there."""
        namespace = _namespace(cls)
        previous = namespace[name]
        self._undo.append(("class", cls, name, (value, previous)))
        namespace[name] = value
        _type_modified(cls)
        return previous

    def undo(self) -> None:
        """Restore everything, newest first -- except what someone else changed since.

        A class attribute or C definition that no longer holds the value written here was
        replaced by someone else after us (``monkeypatch.setattr(threading.Thread, "start",
        ...)``, another tool's C hook); writing the old value back would silently undo their
        change while they believe it in force, so it is left as they set it: they restore
        their own.
        """
        while self._undo:
            kind, target, key, value = self._undo.pop()
            if kind == "function":
                # The definition first: a concurrent call then pairs the real function with
                # either self, and the C clock ignores self.
                key.ml_slot.value = key.ml_value
                key.self_slot.value = key.self_value
                _decref(value)
            elif kind == "definition":
                if target.ml_meth == key:
                    target.ml_meth = value
            else:
                placed, previous = value
                namespace = _namespace(target)
                if namespace.get(key) is placed:
                    namespace[key] = previous
                    _type_modified(target)


def _namespace(cls: type) -> dict[str, Any]:
    """The real dict behind ``cls.__dict__`` (a read-only proxy for builtin types)."""
    referents = gc.get_referents(cls.__dict__)
    if len(referents) != 1 or not isinstance(referents[0], dict):  # pragma: no cover
        raise UnsupportedError(f"cannot reach the namespace of {cls!r}")
    namespace: dict[str, Any] = referents[0]
    return namespace


def bound_methods(classes: tuple[type, ...], names: frozenset[str]) -> list[Any]:
    """Bound builtin methods ``cls.name`` of these classes that some object holds."""
    found = []
    for holder in gc.get_referrers(*classes):
        if (
            type(holder) is types.BuiltinMethodType
            and holder.__name__ in names
            and holder.__self__ in classes
        ):
            found.append(holder)
    return found
