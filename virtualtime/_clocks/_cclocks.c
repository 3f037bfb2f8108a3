/* Optional compiled helper for patch_time: the redirected clocks' hot path, in C.

   What it is for.  patch_time redirects the C clock objects in place (virtualtime._clocks._hook), so
   every reference to them -- module attribute, `from time import monotonic`, a default
   argument, a bound `datetime.now` stored before the run -- calls virtualtime's replacement.
   The pure-Python replacements (virtualtime._clocks._patch) cost a few Python calls each: the thread
   lookup, the caller-module check, reading the clock.  This module does the same three steps
   in C for the clocks programs call in loops (monotonic, perf_counter, time and their _ns
   forms; datetime.now(UTC)), and gives datetime's class methods the C entry points that no
   public call helper can provide (their C function receives the class as first argument).

   The rule it implements is virtualtime._clocks._patch's, unchanged:
     1. the calling thread's patch: routes[thread ident], or none -> the real clock;
     2. the caller's module (the globals of the innermost Python frame, i.e. the code that
        called the clock): verdicts[__name__] true -> the real clock (the stdlib's own real
        waits, the engine); a name not seen before is classified by the Python function
        `classify`, which fills `verdicts`;
     3. the patch's clock: if patch._source is not None it is the virtual loop, whose tick
        counter (_vt_ticks, integer nanoseconds) and time (_vt_now, float seconds) are read
        directly -- the loop's contract with the patch; otherwise patch.ticks()/seconds().
   Anything unusual (another time zone, keyword arguments, a subclass, an instant outside
   datetime's range) is handed to the Python replacement, which handles every case.

   Built when a compiler is available (setup.py, optional=True); set VIRTUALTIME_PURE_PYTHON=1
   to ignore it.  Python 3.11-3.15; only the limited, stable parts of the C API plus datetime's
   capsule.

   Part of ``clocks``: may import ``shared`` (see tests/layout.py).  */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <pythread.h>

/* Set by configure(). */
static PyObject *routes = NULL;     /* dict: thread ident -> patch */
static PyObject *verdicts = NULL;   /* dict: module name -> bool (True: keeps real time) */
static PyObject *classify = NULL;   /* name -> bool, fills verdicts */
static PyObject *utc = NULL;        /* datetime.timezone.utc */
static PyObject *real_clock[4];     /* real copies: monotonic, perf_counter, time, time_ns... */
static PyObject *real_monotonic_ns = NULL;
static PyObject *real_perf_counter_ns = NULL;
static PyObject *now_target = NULL;    /* Python replacements, for every other case */
static PyObject *utcnow_target = NULL;
static PyObject *today_target = NULL;

static PyObject *s_name, *s_source, *s_offset, *s_vt_ticks, *s_vt_now, *s_ticks, *s_seconds;
static PyObject *billion = NULL;

enum { REAL_MONOTONIC, REAL_PERF_COUNTER, REAL_TIME, REAL_TIME_NS };

static int
configured(void)
{
    if (routes == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._clocks._cclocks: configure() not called");
        return 0;
    }
    return 1;
}

/* The patch whose clock this call reads (borrowed), or NULL for the real clock.  Returns -1
   with an exception set on error. */
static int
route(PyObject **patch)
{
    *patch = NULL;
    PyObject *key = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (key == NULL) {
        return -1;
    }
    PyObject *found = PyDict_GetItemWithError(routes, key);
    Py_DECREF(key);
    if (found == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *globals = PyEval_GetGlobals(); /* borrowed; the caller's module */
    if (globals == NULL) {
        return 0; /* no Python frame at all: nothing to virtualise */
    }
    PyObject *name = PyDict_GetItemWithError(globals, s_name);
    if (name == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        name = Py_None;
    }
    PyObject *verdict = PyDict_GetItemWithError(verdicts, name);
    int real;
    if (verdict != NULL) {
        real = verdict == Py_True;
    }
    else {
        if (PyErr_Occurred()) {
            return -1;
        }
        PyObject *computed = PyObject_CallOneArg(classify, name);
        if (computed == NULL) {
            return -1;
        }
        real = PyObject_IsTrue(computed);
        Py_DECREF(computed);
        if (real < 0) {
            return -1;
        }
    }
    if (!real) {
        *patch = found;
    }
    return 0;
}

/* The patch's clock in integer nanoseconds (new reference). */
static PyObject *
patch_ticks(PyObject *patch)
{
    PyObject *source = PyObject_GetAttr(patch, s_source);
    if (source == NULL) {
        return NULL;
    }
    PyObject *result;
    if (source == Py_None) {
        result = PyObject_CallMethodNoArgs(patch, s_ticks);
    }
    else {
        result = PyObject_GetAttr(source, s_vt_ticks);
    }
    Py_DECREF(source);
    return result;
}

/* The patch's clock as float seconds: monotonic()/perf_counter() (new reference). */
static PyObject *
patch_seconds(PyObject *patch)
{
    PyObject *source = PyObject_GetAttr(patch, s_source);
    if (source == NULL) {
        return NULL;
    }
    PyObject *result;
    if (source == Py_None) {
        result = PyObject_CallMethodNoArgs(patch, s_seconds);
    }
    else {
        result = PyObject_GetAttr(source, s_vt_now);
    }
    Py_DECREF(source);
    return result;
}

/* The virtual wall clock: nanoseconds since 1970 (new reference). */
static PyObject *
patch_wall_ns(PyObject *patch)
{
    PyObject *ticks = patch_ticks(patch);
    if (ticks == NULL) {
        return NULL;
    }
    PyObject *offset = PyObject_GetAttr(patch, s_offset);
    if (offset == NULL) {
        Py_DECREF(ticks);
        return NULL;
    }
    PyObject *result = PyNumber_Add(offset, ticks);
    Py_DECREF(offset);
    Py_DECREF(ticks);
    return result;
}

/* ------------------------------------------------------------ time.* (METH_NOARGS) */

static PyObject *
seconds_clock(PyObject *real)
{
    if (!configured()) {
        return NULL;
    }
    PyObject *patch;
    if (route(&patch) < 0) {
        return NULL;
    }
    return patch == NULL ? PyObject_CallNoArgs(real) : patch_seconds(patch);
}

static PyObject *
ticks_clock(PyObject *real)
{
    if (!configured()) {
        return NULL;
    }
    PyObject *patch;
    if (route(&patch) < 0) {
        return NULL;
    }
    return patch == NULL ? PyObject_CallNoArgs(real) : patch_ticks(patch);
}

static PyObject *
c_monotonic(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return seconds_clock(real_clock[REAL_MONOTONIC]);
}

static PyObject *
c_perf_counter(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return seconds_clock(real_clock[REAL_PERF_COUNTER]);
}

static PyObject *
c_monotonic_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return ticks_clock(real_monotonic_ns);
}

static PyObject *
c_perf_counter_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return ticks_clock(real_perf_counter_ns);
}

static PyObject *
c_time_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    if (!configured()) {
        return NULL;
    }
    PyObject *patch;
    if (route(&patch) < 0) {
        return NULL;
    }
    return patch == NULL ? PyObject_CallNoArgs(real_clock[REAL_TIME_NS]) : patch_wall_ns(patch);
}

static PyObject *
c_time(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    if (!configured()) {
        return NULL;
    }
    PyObject *patch;
    if (route(&patch) < 0) {
        return NULL;
    }
    if (patch == NULL) {
        return PyObject_CallNoArgs(real_clock[REAL_TIME]);
    }
    PyObject *wall = patch_wall_ns(patch);
    if (wall == NULL) {
        return NULL;
    }
    /* int / int: correctly rounded, as the Python replacement's wall_ns() / 10**9. */
    PyObject *result = PyNumber_TrueDivide(wall, billion);
    Py_DECREF(wall);
    return result;
}

/* ------------------------------------------------------- datetime's class methods */

static long long
floor_div(long long a, long long b)
{
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Civil date (proleptic Gregorian) of a day count from 1970-01-01: the era arithmetic of
   "days from civil" run backwards (400-year eras of 146097 days). */
static void
civil_from_days(long long days, int *year, int *month, int *day)
{
    long long z = days + 719468; /* days since 0000-03-01 */
    long long era = floor_div(z, 146097);
    long long doe = z - era * 146097;                                  /* [0, 146096] */
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);            /* [0, 365] */
    long long mp = (5 * doy + 2) / 153;                                 /* [0, 11], from March */
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = (int)(yoe + era * 400 + (*month <= 2));
}

/* datetime(...) in UTC for the wall clock `wall` (ns since 1970, truncated to the
   microsecond like the real clock), or NULL without an exception when out of range. */
static PyObject *
utc_datetime(PyObject *wall)
{
    int overflow = 0;
    long long ns = PyLong_AsLongLongAndOverflow(wall, &overflow);
    if (overflow || (ns == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return NULL;
    }
    long long micros = floor_div(ns, 1000);
    long long days = floor_div(micros, 86400000000LL);
    long long rest = micros - days * 86400000000LL;
    int year, month, day;
    civil_from_days(days, &year, &month, &day);
    if (year < 1 || year > 9999) {
        return NULL;
    }
    int hour = (int)(rest / 3600000000LL);
    rest %= 3600000000LL;
    int minute = (int)(rest / 60000000LL);
    rest %= 60000000LL;
    int second = (int)(rest / 1000000LL);
    int usecond = (int)(rest % 1000000LL);
    return PyDateTimeAPI->DateTime_FromDateAndTime(
        year, month, day, hour, minute, second, usecond, utc, PyDateTimeAPI->DateTimeType);
}

static PyObject *
not_set(void)
{
    PyErr_SetString(PyExc_RuntimeError, "virtualtime._clocks._cclocks: targets not set");
    return NULL;
}

/* The Python replacement: target(cls, *args, **kwargs). */
static PyObject *
call_target(PyObject *target, PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
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

/* datetime.now: METH_FASTCALL | METH_KEYWORDS with the class as first argument.  The case
   programs call in loops -- datetime.now(UTC) on the exact class, on the patched thread -- is
   answered here; every other call goes to the Python replacement. */
static PyObject *
trampoline_now(PyObject *cls, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (routes != NULL && nargs == 1 && kwnames == NULL && args[0] == utc &&
        cls == (PyObject *)PyDateTimeAPI->DateTimeType) {
        PyObject *patch;
        if (route(&patch) < 0) {
            return NULL;
        }
        if (patch != NULL) {
            PyObject *wall = patch_wall_ns(patch);
            if (wall == NULL) {
                return NULL;
            }
            PyObject *value = utc_datetime(wall);
            Py_DECREF(wall);
            if (value != NULL || PyErr_Occurred()) {
                return value;
            }
        }
    }
    return call_target(now_target, cls, args, nargs, kwnames);
}

/* METH_NOARGS: (cls, NULL) -> target(cls) */
static PyObject *
trampoline_utcnow(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    return call_target(utcnow_target, cls, NULL, 0, NULL);
}

static PyObject *
trampoline_today(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    return call_target(today_target, cls, NULL, 0, NULL);
}

/* ------------------------------------------------------------------ module */

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *r, *v, *c, *tz, *reals, *now, *utcnow, *today;
    if (!PyArg_ParseTuple(args, "O!O!OOO!OOO:configure", &PyDict_Type, &r, &PyDict_Type, &v,
                          &c, &tz, &PyTuple_Type, &reals, &now, &utcnow, &today)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(reals) != 6) {
        PyErr_SetString(PyExc_ValueError,
                        "reals must be (monotonic, perf_counter, time, time_ns, "
                        "monotonic_ns, perf_counter_ns)");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        Py_INCREF(PyTuple_GET_ITEM(reals, i));
        Py_XSETREF(real_clock[i], PyTuple_GET_ITEM(reals, i));
    }
    Py_INCREF(PyTuple_GET_ITEM(reals, 4));
    Py_XSETREF(real_monotonic_ns, PyTuple_GET_ITEM(reals, 4));
    Py_INCREF(PyTuple_GET_ITEM(reals, 5));
    Py_XSETREF(real_perf_counter_ns, PyTuple_GET_ITEM(reals, 5));
    PyObject *keep[] = {r, v, c, tz, now, utcnow, today};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        Py_INCREF(keep[i]);
    }
    Py_XSETREF(routes, r);
    Py_XSETREF(verdicts, v);
    Py_XSETREF(classify, c);
    Py_XSETREF(utc, tz);
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
    {"configure", configure, METH_VARARGS,
     "configure(routes, verdicts, classify, utc, reals, now, utcnow, today): the routing "
     "state shared with virtualtime._clocks._patch and the Python replacements for other cases."},
    {"addresses", addresses, METH_NOARGS,
     "addresses() -> {name: address of the C trampoline for that class method}."},
    {"monotonic", c_monotonic, METH_NOARGS, "time.monotonic while patched."},
    {"monotonic_ns", c_monotonic_ns, METH_NOARGS, "time.monotonic_ns while patched."},
    {"perf_counter", c_perf_counter, METH_NOARGS, "time.perf_counter while patched."},
    {"perf_counter_ns", c_perf_counter_ns, METH_NOARGS, "time.perf_counter_ns while patched."},
    {"time", c_time, METH_NOARGS, "time.time while patched."},
    {"time_ns", c_time_ns, METH_NOARGS, "time.time_ns while patched."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "virtualtime._clocks._cclocks",
    "The redirected clocks' hot path in C (optional; see virtualtime._clocks._patch).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cclocks(void)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return NULL;
    }
    s_name = PyUnicode_InternFromString("__name__");
    s_source = PyUnicode_InternFromString("_source");
    s_offset = PyUnicode_InternFromString("_offset_ns");
    s_vt_ticks = PyUnicode_InternFromString("_vt_ticks");
    s_vt_now = PyUnicode_InternFromString("_vt_now");
    s_ticks = PyUnicode_InternFromString("ticks");
    s_seconds = PyUnicode_InternFromString("seconds");
    billion = PyLong_FromLong(1000000000L);
    if (!s_name || !s_source || !s_offset || !s_vt_ticks || !s_vt_now || !s_ticks ||
        !s_seconds || !billion) {
        return NULL;
    }
    return PyModule_Create(&module);
}
