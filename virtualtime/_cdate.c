/* Optional compiled helper for patch_time: C entry points for datetime's class methods.

   datetime.datetime.now/utcnow and datetime.date.today are C functions that receive the
   class as their first argument.  CPython's public call helpers cannot turn that into a call
   of Python code (the class would be the callable), so the pure-Python path of
   virtualtime._hook replaces the methods in the classes' namespaces and redirects bound
   methods stored before the run one by one, after searching the heap for them.  With this
   module, virtualtime._hook instead points the method definitions themselves at the three
   trampolines below: every lookup and every bound method made at any time follows, with no
   search.  Each trampoline calls the Python function set with set_targets() as
   f(cls, *args, **kwargs).  Built when a compiler is available (setup.py, optional=True);
   set VIRTUALTIME_PURE_PYTHON=1 to ignore it.  */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *now_target = NULL;
static PyObject *utcnow_target = NULL;
static PyObject *today_target = NULL;

static PyObject *
not_set(void)
{
    PyErr_SetString(PyExc_RuntimeError, "virtualtime._cdate: targets not set");
    return NULL;
}

/* METH_FASTCALL | METH_KEYWORDS: (cls, args, nargs, kwnames) -> now_target(cls, *args, **kw) */
static PyObject *
trampoline_now(PyObject *cls, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *target = now_target;
    if (target == NULL) {
        return not_set();
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t total = nargs + nkw;
    PyObject *small[8];
    PyObject **stack = small;
    if (total + 1 > 8) {
        stack = PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
        if (stack == NULL) {
            return PyErr_NoMemory();
        }
    }
    stack[0] = cls;
    for (Py_ssize_t i = 0; i < total; i++) {
        stack[i + 1] = args[i];
    }
    Py_INCREF(target);
    PyObject *result = PyObject_Vectorcall(target, stack, (size_t)(nargs + 1), kwnames);
    Py_DECREF(target);
    if (stack != small) {
        PyMem_Free(stack);
    }
    return result;
}

static PyObject *
call_with_class(PyObject *target, PyObject *cls)
{
    if (target == NULL) {
        return not_set();
    }
    Py_INCREF(target);
    PyObject *result = PyObject_CallOneArg(target, cls);
    Py_DECREF(target);
    return result;
}

/* METH_NOARGS: (cls, NULL) -> target(cls) */
static PyObject *
trampoline_utcnow(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    return call_with_class(utcnow_target, cls);
}

static PyObject *
trampoline_today(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    return call_with_class(today_target, cls);
}

static PyObject *
set_targets(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *now, *utcnow, *today;
    if (!PyArg_ParseTuple(args, "OOO:set_targets", &now, &utcnow, &today)) {
        return NULL;
    }
    Py_INCREF(now);
    Py_INCREF(utcnow);
    Py_INCREF(today);
    Py_XSETREF(now_target, now);
    Py_XSETREF(utcnow_target, utcnow);
    Py_XSETREF(today_target, today);
    Py_RETURN_NONE;
}

static PyObject *
addresses(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue(
        "{s:K,s:K,s:K}",
        "now", (unsigned long long)(uintptr_t)trampoline_now,
        "utcnow", (unsigned long long)(uintptr_t)trampoline_utcnow,
        "today", (unsigned long long)(uintptr_t)trampoline_today);
}

static PyMethodDef methods[] = {
    {"set_targets", set_targets, METH_VARARGS,
     "set_targets(now, utcnow, today): the Python functions the trampolines call."},
    {"addresses", addresses, METH_NOARGS,
     "addresses() -> {name: address of the C trampoline for that class method}."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "virtualtime._cdate",
    "C trampolines for datetime's class methods (optional; see virtualtime._hook).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__cdate(void)
{
    return PyModule_Create(&module);
}
