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
end exactly as they were: same identity, same pointers, same namespace entries.  The layouts
used (``PyCFunctionObject``: method-def pointer then ``self`` right after the object header)
are stable from 3.11 to 3.15 and are checked against the live object before each write:
:func:`redirect_function` refuses an object whose fields do not read back as expected.
"""

from __future__ import annotations

import ctypes
import gc
import types
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

# Definitions handed out live for ever: an object may point at one at any moment.
_kept: list[object] = []


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
    copy = _MethodDef(
        definition.ml_name, definition.ml_meth, definition.ml_flags, definition.ml_doc
    )
    _kept.append(copy)
    return _new_class_method(cls, ctypes.addressof(copy))


def class_method_convention(cls: type, name: str) -> int:
    """The calling convention of a builtin class method (``_METH_*`` bits, without CLASS)."""
    return int(_class_method_definition(cls, name).ml_flags) & _CONVENTION


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
        definition = _definition(func)
        convention = definition.ml_flags & _CONVENTION
        caller = _CALLERS.get(convention)
        if caller is None:  # pragma: no cover - no clock of 3.11-3.15 uses another one
            raise UnsupportedError(f"cannot redirect {func!r}: calling convention {convention:#x}")
        copy = _MethodDef(
            definition.ml_name, caller, definition.ml_flags & ~_METH_CLASS, definition.ml_doc
        )
        _kept.append(copy)
        _incref(target)  # the object owns a reference to its self; balanced in undo()
        ml_slot, self_slot = _slot(func, 0), _slot(func, 1)
        self._undo.append(("function", func, (ml_slot.value, self_slot.value), target))
        # self first, then the definition: a concurrent call sees either the old pair's
        # function with the new self (the C clock ignores self) or the complete new pair.
        self_slot.value = id(target)
        ml_slot.value = ctypes.addressof(copy)

    def redirect_definition(self, cls: type, name: str, address: int) -> None:
        """Point the C definition of the builtin class method ``cls.name`` at ``address``.

        Only with the compiled trampolines of ``virtualtime._clocks._cclocks``, whose signatures
        match. Every lookup of the method and every bound method, made at any time, follows.
        """
        definition = _class_method_definition(cls, name)
        self._undo.append(("definition", definition, None, definition.ml_meth))
        definition.ml_meth = address

    def replace_class_attribute(self, cls: type, name: str, value: object) -> object:
        """Put ``value`` under ``name`` in ``cls``'s own namespace; return what was there."""
        namespace = _namespace(cls)
        previous = namespace[name]
        self._undo.append(("class", cls, name, previous))
        namespace[name] = value
        _type_modified(cls)
        return previous

    def undo(self) -> None:
        """Restore everything, newest first."""
        while self._undo:
            kind, target, key, value = self._undo.pop()
            if kind == "function":
                ml_value, self_value = key
                # The definition first: a concurrent call then pairs the real function with
                # either self, and the C clock ignores self.
                _slot(target, 0).value = ml_value
                _slot(target, 1).value = self_value
                _decref(value)
            elif kind == "definition":
                target.ml_meth = value
            else:
                _namespace(target)[key] = value
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
