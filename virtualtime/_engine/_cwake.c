/* Optional compiled core of the virtual loop: the timer heap's push and pop, the firing of due
   timers, the lean call_soon and the run of the ready queue.

   Each function here does exactly what a piece of pure Python in virtualtime/_engine/_loop.py and
   virtualtime/_engine/_control.py does (that code is the reference, and the fallback: it runs when this
   module was not built, or with VIRTUALTIME_PURE_PYTHON=1).  What C saves is the interpreter:
   a wake-up on the pure path runs about a hundred bytecodes in five Python frames besides the
   user's own; here the loop's share is a few C calls.

   Handles are asyncio.Handle / TimerHandle instances.  Their fields are __slots__, and this
   module reads and writes them through the slot offsets it takes from the classes' member
   descriptors once, in setup(): the same fields _loop.py's _Timer and _Soon set, on every
   CPython 3.11 to 3.15.  setup() refuses to run if any field is not a plain slot.

   Built when a compiler is available (setup.py, optional=True). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <structmember.h>

/* Set by setup(). */
static PyTypeObject *waiter_type = NULL;  /* asyncio.Future (the C one) */
static PyTypeObject *timer_type = NULL;   /* asyncio.TimerHandle */
static PyTypeObject *soon_type = NULL;    /* virtualtime._engine._loop._Soon */
static PyObject *waker_a = NULL;          /* the two timer callbacks that only resolve a future */
static PyObject *waker_b = NULL;
static PyObject *invalid_state = NULL;    /* asyncio.InvalidStateError */
static PyObject *str_done = NULL;
static PyObject *str_set_result = NULL;
static PyObject *str_run = NULL;
static PyObject *str_debug = NULL;
static PyObject *str_closed = NULL;

static Py_ssize_t off_callback, off_args, off_cancelled, off_context, off_loop, off_repr,
    off_source_traceback, off_when, off_scheduled;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        return -1;
    }
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "virtualtime._engine._cwake: %s.%s is not a slot", type->tp_name,
                     name);
        Py_DECREF(descr);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "virtualtime._engine._cwake: %s.%s is not an object slot",
                     type->tp_name, name);
        Py_DECREF(descr);
        return -1;
    }
    *out = member->offset;
    Py_DECREF(descr);
    return 0;
}

/* setup(waiter_type, timer_type, soon_type, waker_a, waker_b, invalid_state_error) */
static PyObject *
setup(PyObject *module, PyObject *args)
{
    PyObject *w, *t, *s, *a, *b, *e;
    if (!PyArg_ParseTuple(args, "O!O!O!OOO:setup", &PyType_Type, &w, &PyType_Type, &t,
                          &PyType_Type, &s, &a, &b, &e)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)s, ((PyTypeObject *)t)->tp_base)) {
        PyErr_SetString(PyExc_TypeError, "virtualtime._engine._cwake: the lean handle is not a Handle");
        return NULL;
    }
    PyTypeObject *timer = (PyTypeObject *)t;
    if (slot_offset(timer, "_callback", &off_callback) < 0 ||
        slot_offset(timer, "_args", &off_args) < 0 ||
        slot_offset(timer, "_cancelled", &off_cancelled) < 0 ||
        slot_offset(timer, "_context", &off_context) < 0 ||
        slot_offset(timer, "_loop", &off_loop) < 0 || slot_offset(timer, "_repr", &off_repr) < 0 ||
        slot_offset(timer, "_source_traceback", &off_source_traceback) < 0 ||
        slot_offset(timer, "_when", &off_when) < 0 ||
        slot_offset(timer, "_scheduled", &off_scheduled) < 0) {
        return NULL;
    }
    /* The lean handle must share the base Handle's layout (it adds no slot of its own). */
    Py_ssize_t soon_callback;
    if (slot_offset((PyTypeObject *)s, "_callback", &soon_callback) < 0) {
        return NULL;
    }
    if (soon_callback != off_callback) {
        PyErr_SetString(PyExc_TypeError, "virtualtime._engine._cwake: the lean handle's layout differs");
        return NULL;
    }
    Py_XSETREF(waiter_type, (PyTypeObject *)Py_NewRef(w));
    Py_XSETREF(timer_type, (PyTypeObject *)Py_NewRef(t));
    Py_XSETREF(soon_type, (PyTypeObject *)Py_NewRef(s));
    Py_XSETREF(waker_a, Py_NewRef(a));
    Py_XSETREF(waker_b, Py_NewRef(b));
    Py_XSETREF(invalid_state, Py_NewRef(e));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------ heap */

/* The heap invariant of heapq (heap[k] <= heap[2k+1], heap[2k+2]), so that heapq's own
   functions and these can work on one list in turn. */

static int
lt(PyObject *a, PyObject *b)
{
    /* Entries are (tick, priority, seq, item) with unique seq: compare the first three. */
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 4 &&
        PyTuple_GET_SIZE(b) == 4) {
        for (Py_ssize_t i = 0; i < 3; i++) {
            PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
            if (PyLong_CheckExact(x) && PyLong_CheckExact(y)) {
                int overflow_x, overflow_y;
                long long vx = PyLong_AsLongLongAndOverflow(x, &overflow_x);
                long long vy = PyLong_AsLongLongAndOverflow(y, &overflow_y);
                if (!overflow_x && !overflow_y) {
                    if (vx != vy) {
                        return vx < vy;
                    }
                    continue;
                }
            }
            int eq = PyObject_RichCompareBool(x, y, Py_EQ);
            if (eq < 0) {
                return -1;
            }
            if (!eq) {
                return PyObject_RichCompareBool(x, y, Py_LT);
            }
        }
        return 0;
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

static int
push(PyObject *heap, PyObject *entry)
{
    if (PyList_Append(heap, entry) < 0) {
        return -1;
    }
    PyObject **items = ((PyListObject *)heap)->ob_item;
    Py_ssize_t pos = PyList_GET_SIZE(heap) - 1;
    PyObject *item = items[pos];
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        int less = lt(item, items[parent]);
        if (less < 0) {
            return -1;
        }
        if (!less) {
            break;
        }
        items = ((PyListObject *)heap)->ob_item;
        items[pos] = items[parent];
        pos = parent;
    }
    items[pos] = item;
    return 0;
}

/* Remove and return the smallest entry (a new reference). */
static PyObject *
pop(PyObject *heap)
{
    Py_ssize_t n = PyList_GET_SIZE(heap);
    PyObject **items = ((PyListObject *)heap)->ob_item;
    PyObject *top = items[0];
    PyObject *last = items[n - 1];
    /* Shrink the list by one without touching reference counts: ``last`` moves to the hole. */
    Py_SET_SIZE(heap, n - 1);
    n -= 1;
    if (n == 0) {
        return top; /* the list's reference to top is now ours */
    }
    /* Sift the hole at 0 down to a leaf along the smaller children, then bubble ``last`` up
       (heapq's strategy: fewer comparisons than a plain sift-down). */
    Py_ssize_t pos = 0;
    Py_ssize_t child = 1;
    while (child < n) {
        Py_ssize_t right = child + 1;
        if (right < n) {
            int less = lt(items[right], items[child]);
            if (less < 0) {
                goto fail;
            }
            if (less) {
                child = right;
            }
        }
        items[pos] = items[child];
        pos = child;
        child = 2 * pos + 1;
    }
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        int less = lt(last, items[parent]);
        if (less < 0) {
            goto fail;
        }
        if (!less) {
            break;
        }
        items[pos] = items[parent];
        pos = parent;
    }
    items[pos] = last;
    return top;
fail:
    /* A comparison failed -- it cannot for the loop's (int, int, int, item) keys.  Keep
       every entry (the order may then be off, as with heapq after a failed comparison). */
    items[pos] = last;
    if (PyList_Append(heap, top) < 0) {
        PyErr_Clear();
    }
    Py_DECREF(top);
    return NULL;
}

/* push_after(heap, next_seq, ticks, delay, priority, item) -> seq

   The entry of a sleep of ``delay`` seconds (a float or int, 0 < delay < 1e18) from tick
   ``ticks``: (ticks + max(1, round(delay * 1e9)), priority, seq, item).  */
static PyObject *
push_after(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "push_after() takes 6 arguments");
        return NULL;
    }
    PyObject *heap = args[0];
    if (!PyList_CheckExact(heap)) {
        PyErr_SetString(PyExc_TypeError, "push_after(): heap must be a list");
        return NULL;
    }
    double delay = PyFloat_AsDouble(args[3]);
    if (delay == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    double scaled = nearbyint(delay * 1e9); /* round half to even, as Python's round() */
    PyObject *step;
    if (scaled < 1.0) {
        step = PyLong_FromLong(1);
    }
    else if (scaled < 9.0e18) {
        step = PyLong_FromLongLong((long long)scaled);
    }
    else {
        step = PyLong_FromDouble(scaled);
    }
    if (step == NULL) {
        return NULL;
    }
    PyObject *due = PyNumber_Add(args[2], step);
    Py_DECREF(step);
    if (due == NULL) {
        return NULL;
    }
    PyObject *seq = PyObject_CallNoArgs(args[1]);
    if (seq == NULL) {
        Py_DECREF(due);
        return NULL;
    }
    PyObject *entry = PyTuple_New(4);
    if (entry == NULL) {
        Py_DECREF(due);
        Py_DECREF(seq);
        return NULL;
    }
    PyTuple_SET_ITEM(entry, 0, due);
    PyTuple_SET_ITEM(entry, 1, Py_NewRef(args[4]));
    PyTuple_SET_ITEM(entry, 2, Py_NewRef(seq));
    PyTuple_SET_ITEM(entry, 3, Py_NewRef(args[5]));
    int rc = push(heap, entry);
    Py_DECREF(entry);
    if (rc < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    return seq;
}

/* --------------------------------------------------------------------------- firing */

static int
set_result(PyObject *future, PyObject *value)
{
    PyObject *res = PyObject_CallMethodOneArg(future, str_set_result, value);
    if (res == NULL) {
        if (PyErr_ExceptionMatches(invalid_state)) {
            PyErr_Clear(); /* cancelled in between by a signal handler (Ctrl-C) */
            return 0;
        }
        return -1;
    }
    Py_DECREF(res);
    return 0;
}

/* 1 if the future is done, 0 if not, -1 on error. */
static int
is_done(PyObject *future)
{
    PyObject *res = PyObject_CallMethodNoArgs(future, str_done);
    if (res == NULL) {
        return -1;
    }
    int done = PyObject_IsTrue(res);
    Py_DECREF(res);
    return done;
}

/* fire(heap, now, seconds, ready_append) -> (fired, dead, seconds)

   The pop loop of VirtualEventLoop._run_once for a loop with no history and not in debug
   mode: every entry due at or before tick ``now`` is removed in order; a native sleep's
   future is resolved, a sleep timer resolves its future, any other live timer goes to the
   ready queue.  Returns how many fired, how many dead entries were dropped, and the latest
   float deadline (see call_at) -- ``seconds`` or more.  */
static PyObject *
fire(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fire() takes 4 arguments");
        return NULL;
    }
    if (waiter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    PyObject *heap = args[0];
    PyObject *now = args[1];
    PyObject *seconds = Py_NewRef(args[2]);
    PyObject *append = args[3];
    if (!PyList_CheckExact(heap)) {
        PyErr_SetString(PyExc_TypeError, "fire(): heap must be a list");
        Py_DECREF(seconds);
        return NULL;
    }
    Py_ssize_t fired = 0, dead = 0;
    while (PyList_GET_SIZE(heap) > 0) {
        PyObject *head = PyList_GET_ITEM(heap, 0);
        if (!PyTuple_CheckExact(head) || PyTuple_GET_SIZE(head) != 4) {
            PyErr_SetString(PyExc_TypeError, "fire(): a heap entry is not a 4-tuple");
            goto error;
        }
        int due = PyObject_RichCompareBool(PyTuple_GET_ITEM(head, 0), now, Py_LE);
        if (due < 0) {
            goto error;
        }
        if (!due) {
            break;
        }
        PyObject *entry = pop(heap);
        if (entry == NULL) {
            goto error;
        }
        PyObject *item = PyTuple_GET_ITEM(entry, 3);
        int rc = 0;
        if (Py_IS_TYPE(item, waiter_type)) {
            int done = is_done(item);
            if (done < 0) {
                rc = -1;
            }
            else if (done) {
                dead++;
            }
            else {
                fired++;
                rc = set_result(item, Py_None);
            }
        }
        else if (PyObject_TypeCheck(item, timer_type)) {
            PyObject *old = SLOT(item, off_scheduled);
            SLOT(item, off_scheduled) = Py_NewRef(Py_False);
            Py_XDECREF(old);
            PyObject *cancelled = SLOT(item, off_cancelled);
            PyObject *callback = SLOT(item, off_callback);
            PyObject *cargs = SLOT(item, off_args);
            if (cancelled != NULL && PyObject_IsTrue(cancelled)) {
                dead++;
            }
            else {
                int waker = callback != NULL && (callback == waker_a || callback == waker_b) &&
                            cargs != NULL && PyTuple_CheckExact(cargs) &&
                            PyTuple_GET_SIZE(cargs) == 2;
                int skip = 0;
                if (waker) {
                    int done = is_done(PyTuple_GET_ITEM(cargs, 0));
                    if (done < 0) {
                        rc = -1;
                    }
                    skip = done;
                }
                if (rc == 0 && !skip) {
                    fired++;
                    PyObject *when = SLOT(item, off_when);
                    if (when != NULL) {
                        int later = PyObject_RichCompareBool(when, seconds, Py_GT);
                        if (later < 0) {
                            rc = -1;
                        }
                        else if (later) {
                            Py_SETREF(seconds, Py_NewRef(when));
                        }
                    }
                    if (rc == 0) {
                        if (waker) {
                            PyObject *fut = Py_NewRef(PyTuple_GET_ITEM(cargs, 0));
                            PyObject *value = Py_NewRef(PyTuple_GET_ITEM(cargs, 1));
                            rc = set_result(fut, value);
                            Py_DECREF(fut);
                            Py_DECREF(value);
                        }
                        else {
                            PyObject *res = PyObject_CallOneArg(append, item);
                            if (res == NULL) {
                                rc = -1;
                            }
                            Py_XDECREF(res);
                        }
                    }
                }
            }
        }
        else {
            PyErr_Format(PyExc_TypeError, "fire(): unexpected timer item %R", item);
            rc = -1;
        }
        Py_DECREF(entry);
        if (rc < 0) {
            goto error;
        }
    }
    return Py_BuildValue("nnN", fired, dead, seconds);
error:
    Py_DECREF(seconds);
    return NULL;
}

/* --------------------------------------------------------------------------- ready */

/* A new lean handle (virtualtime._engine._loop._Soon) without running its __init__: the same fields
   _Soon.__init__ sets. */
static PyObject *
new_soon(PyObject *callback, PyObject *cargs, PyObject *loop, PyObject *context)
{
    PyObject *handle = soon_type->tp_alloc(soon_type, 0);
    if (handle == NULL) {
        return NULL;
    }
    PyObject *ctx;
    if (context == NULL || context == Py_None) {
        ctx = PyContext_CopyCurrent();
        if (ctx == NULL) {
            Py_DECREF(handle);
            return NULL;
        }
    }
    else {
        ctx = Py_NewRef(context);
    }
    SLOT(handle, off_context) = ctx;
    SLOT(handle, off_loop) = Py_NewRef(loop);
    SLOT(handle, off_callback) = Py_NewRef(callback);
    SLOT(handle, off_args) = Py_NewRef(cargs);
    SLOT(handle, off_cancelled) = Py_NewRef(Py_False);
    SLOT(handle, off_repr) = Py_NewRef(Py_None);
    SLOT(handle, off_source_traceback) = Py_NewRef(Py_None);
    return handle;
}

/* SoonCaller(loop, ready_append, fallback): the loop's call_soon.  Outside debug mode, on an
   open loop, it makes a lean handle and appends it to the ready queue; otherwise it calls
   ``fallback`` (the pure-Python method) with the same arguments. */
typedef struct {
    PyObject_HEAD
    PyObject *loop; /* the loop holds this object: a cycle the GC sees (tp_traverse) */
    PyObject *append;
    PyObject *fallback;
    vectorcallfunc vectorcall;
} SoonCaller;

static PyObject *
soon_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SoonCaller *self = (SoonCaller *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *loop = self->loop;
    PyObject *context = NULL;
    int slow = nargs < 1;
    if (!slow && kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        if (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                                          "context") == 0) {
            context = args[nargs];
        }
        else if (nkw != 0) {
            slow = 1;
        }
    }
    if (!slow) {
        PyObject *flag = PyObject_GetAttr(loop, str_debug);
        if (flag == NULL) {
            return NULL;
        }
        int debug = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        flag = PyObject_GetAttr(loop, str_closed);
        if (flag == NULL) {
            return NULL;
        }
        int closed = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        if (debug < 0 || closed < 0) {
            return NULL;
        }
        slow = debug || closed;
    }
    if (slow) {
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    PyObject *cargs = PyTuple_New(nargs - 1);
    if (cargs == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 1; i < nargs; i++) {
        PyTuple_SET_ITEM(cargs, i - 1, Py_NewRef(args[i]));
    }
    PyObject *handle = new_soon(args[0], cargs, loop, context);
    Py_DECREF(cargs);
    if (handle == NULL) {
        return NULL;
    }
    PyObject *res = PyObject_CallOneArg(self->append, handle);
    if (res == NULL) {
        Py_DECREF(handle);
        return NULL;
    }
    Py_DECREF(res);
    return handle;
}

static PyObject *
soon_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *loop, *append, *fallback;
    if (!PyArg_ParseTuple(args, "OOO:SoonCaller", &loop, &append, &fallback)) {
        return NULL;
    }
    if (soon_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    SoonCaller *self = (SoonCaller *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->loop = Py_NewRef(loop);
    self->append = Py_NewRef(append);
    self->fallback = Py_NewRef(fallback);
    self->vectorcall = soon_vectorcall;
    return (PyObject *)self;
}

static int
soon_traverse(SoonCaller *self, visitproc visit, void *arg)
{
    Py_VISIT(self->loop);
    Py_VISIT(self->append);
    Py_VISIT(self->fallback);
    return 0;
}

static int
soon_clear(SoonCaller *self)
{
    Py_CLEAR(self->loop);
    Py_CLEAR(self->append);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
soon_dealloc(SoonCaller *self)
{
    PyObject_GC_UnTrack(self);
    soon_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef soon_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SoonCaller, vectorcall), READONLY, NULL},
    {NULL},
};

static PyTypeObject SoonCaller_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.SoonCaller",
    .tp_basicsize = sizeof(SoonCaller),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The virtual loop's call_soon, compiled (see virtualtime._engine._loop).",
    .tp_new = soon_new,
    .tp_traverse = (traverseproc)soon_traverse,
    .tp_clear = (inquiry)soon_clear,
    .tp_dealloc = (destructor)soon_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SoonCaller, vectorcall),
    .tp_members = soon_members,
};

/* run_ready(popleft, ntodo, failed) -> None

   The last part of _run_once: run the first ``ntodo`` handles of the ready queue in order.
   A lean handle's callback is run in its context here, and a failure is handed to
   ``failed(handle, exc)`` (which reports it as Handle._run does); SystemExit and
   KeyboardInterrupt propagate, leaving the rest queued.  Other handles run their _run(). */
static PyObject *
run_ready(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run_ready() takes 3 arguments");
        return NULL;
    }
    if (soon_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    PyObject *popleft = args[0];
    Py_ssize_t ntodo = PyLong_AsSsize_t(args[1]);
    if (ntodo == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *failed = args[2];
    for (Py_ssize_t i = 0; i < ntodo; i++) {
        PyObject *handle = PyObject_CallNoArgs(popleft);
        if (handle == NULL) {
            return NULL;
        }
        if (!PyObject_TypeCheck(handle, timer_type->tp_base) &&
            !PyObject_TypeCheck(handle, soon_type)) {
            /* Not a Handle at all: run it as the stock loop would. */
            PyObject *res = PyObject_CallMethodNoArgs(handle, str_run);
            Py_DECREF(handle);
            if (res == NULL) {
                return NULL;
            }
            Py_DECREF(res);
            continue;
        }
        PyObject *cancelled = SLOT(handle, off_cancelled);
        int is_cancelled = cancelled != NULL ? PyObject_IsTrue(cancelled) : 0;
        if (is_cancelled) {
            Py_DECREF(handle);
            if (is_cancelled < 0) {
                return NULL;
            }
            continue;
        }
        if (!Py_IS_TYPE(handle, soon_type)) {
            PyObject *res = PyObject_CallMethodNoArgs(handle, str_run);
            Py_DECREF(handle);
            if (res == NULL) {
                return NULL;
            }
            Py_DECREF(res);
            continue;
        }
        PyObject *context = SLOT(handle, off_context);
        PyObject *callback = SLOT(handle, off_callback);
        PyObject *cargs = SLOT(handle, off_args);
        if (context == NULL || callback == NULL || cargs == NULL || !PyTuple_Check(cargs)) {
            PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: a broken lean handle");
            Py_DECREF(handle);
            return NULL;
        }
        Py_INCREF(context);
        Py_INCREF(callback);
        Py_INCREF(cargs);
        PyObject *res = NULL;
        if (PyContext_Enter(context) == 0) {
            res = PyObject_Call(callback, cargs, NULL);
            if (PyContext_Exit(context) < 0) {
                Py_CLEAR(res);
            }
        }
        Py_DECREF(context);
        Py_DECREF(callback);
        Py_DECREF(cargs);
        if (res != NULL) {
            Py_DECREF(res);
            Py_DECREF(handle);
            continue;
        }
        if (PyErr_ExceptionMatches(PyExc_SystemExit) ||
            PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
            Py_DECREF(handle);
            return NULL;
        }
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL) {
            PyException_SetTraceback(value, tb);
        }
        PyObject *report = PyObject_CallFunctionObjArgs(failed, handle, value, NULL);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Py_DECREF(handle);
        if (report == NULL) {
            return NULL;
        }
        Py_DECREF(report);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)setup, METH_VARARGS,
     "setup(waiter_type, timer_type, soon_type, waker_a, waker_b, invalid_state_error)"},
    {"push_after", (PyCFunction)(void (*)(void))push_after, METH_FASTCALL,
     "push_after(heap, next_seq, ticks, delay, priority, item) -> seq"},
    {"fire", (PyCFunction)(void (*)(void))fire, METH_FASTCALL,
     "fire(heap, now, seconds, ready_append) -> (fired, dead, seconds)"},
    {"run_ready", (PyCFunction)(void (*)(void))run_ready, METH_FASTCALL,
     "run_ready(popleft, ntodo, failed) -> None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "virtualtime._engine._cwake",
    "Optional compiled core of the virtual loop (see virtualtime._engine._loop).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cwake(void)
{
    if (PyType_Ready(&SoonCaller_Type) < 0) {
        return NULL;
    }
    str_done = PyUnicode_InternFromString("done");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_run = PyUnicode_InternFromString("_run");
    str_debug = PyUnicode_InternFromString("_debug");
    str_closed = PyUnicode_InternFromString("_closed");
    if (!str_done || !str_set_result || !str_run || !str_debug || !str_closed) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "SoonCaller", (PyObject *)&SoonCaller_Type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
