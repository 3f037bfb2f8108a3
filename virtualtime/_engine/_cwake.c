/* Optional compiled core of the virtual loop: the timer heap's push and pop, the firing of due
   timers, the lean call_soon and call_later, get_debug, the run of the ready queue, the
   loop's rounds themselves (plain_rounds), the in-place jump of a wait that skips its round
   (jump_to), virtualtime.sleep itself (a frame-free awaitable), and the sim kit's sleep() and now() and
   the suspension of its sleeps.

   Each function here does exactly what a piece of pure Python in virtualtime/_engine/ (the
   loop's modules: _loop.py, _cycle.py, _waits.py, _handles.py), virtualtime/_engine/_control.py
   or virtualtime/sim/_sleep.py does (that code is the reference, and the fallback: it runs
   when this module was not built, or with VIRTUALTIME_PURE_PYTHON=1); a comment starting
   "Mirrors:" above each such function names the Python it mirrors.  What C saves is the
   interpreter: a wake-up on the pure path runs about a hundred bytecodes in five Python frames
   besides the user's own; here the loop's share is a few C calls.

   Handles are asyncio.Handle / TimerHandle instances.  Their fields are __slots__, and this
   module reads and writes them through the slot offsets it takes from the classes' member
   descriptors once, in setup(): the same fields _handles.py's _Timer and _Soon set, on every
   CPython 3.11 to 3.15.  setup() refuses to run if any field is not a plain slot.

   Built when a compiler is available (setup.py, optional=True); loaded and set up by
   virtualtime/_engine/_compiled.py.

   One room: this file is one C extension module, and CPython builds one extension from one
   source here (setup.py); its parts share the slot offsets, interned strings and types that
   setup() fills in, and splitting it would mean a header of shared statics for no reader's
   gain.  The sections follow the Python it mirrors: the loop's slotted fields, the heap,
   firing, the ready queue, the rounds, the jump, the cancel() of asyncio.sleep's timer,
   virtualtime.sleep, the sim kit's sleep.

   Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <structmember.h>

/* Set by setup(). */
static PyTypeObject *waiter_type = NULL;  /* asyncio.Future (the C one) */
static PyTypeObject *timer_type = NULL;   /* asyncio.TimerHandle */
static PyTypeObject *soon_type = NULL;    /* virtualtime._engine._handles._Soon */
static PyObject *waker_a = NULL;          /* the two timer callbacks that only resolve a future */
static PyObject *waker_b = NULL;
static PyObject *wake_context = NULL;     /* the one context a waker timer is given (see below) */
static PyObject *invalid_state = NULL;    /* asyncio.InvalidStateError */
static PyObject *str_done = NULL;
static PyObject *str_set_result = NULL;
/* asyncio.Future's own done, set_result and result (method descriptors, set by setup()): an
   exact Future is asked through them, without looking the name up on every call. */
static PyObject *future_done = NULL, *future_set_result = NULL, *future_result = NULL;
static PyObject *str_run = NULL;
static PyObject *str_debug = NULL;
static PyObject *str_closed = NULL;
static PyObject *str_loop = NULL, *str_vt_heap = NULL, *str_vt_seq = NULL,
                *str_vt_history = NULL, *str_blocking = NULL, *str_result = NULL,
                *str_priority = NULL,
                *str_throw = NULL, *str_close = NULL, *kw_loop = NULL, *ticks_per_second = NULL;

static PyObject *empty_tuple = NULL;
static Py_ssize_t off_callback, off_args, off_cancelled, off_context, off_loop, off_repr,
    off_source_traceback, off_when, off_scheduled;
/* virtualtime._engine._timers.SleepTimer: asyncio.sleep's timer, its heap item and handle. */
static PyTypeObject *sleeper_type = NULL;
static Py_ssize_t off_s_future, off_s_queue, off_s_result, off_s_ticks;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* virtualtime._engine._loop.VirtualEventLoop, set by setup_loop(): the fields every round reads
   or writes are slots of that class (its __slots__), read and written here at the offsets of
   their member descriptors -- a load where a lookup in the loop's __dict__ hashed the name. */
static PyTypeObject *loop_type = NULL;
static Py_ssize_t off_l_ticks, off_l_now, off_l_plain, off_l_stopping, off_l_rearmed,
    off_l_drives, off_l_beyond, off_l_instant_count, off_l_fired, off_l_heap, off_l_seq,
    off_l_history, off_l_future_kw, off_l_debug, off_l_closed, off_l_ready, off_l_world,
    off_l_skipped;
/* For jump_to: the Python method it mirrors (its fallback), threading's table of running
   threads, and JUMP_ROUND_EVERY - 1 (_waits.py). */
static PyObject *jump_fallback = NULL, *thread_table = NULL, *str_quiet = NULL,
                *str_cancelling = NULL, *str_vt_past_horizon = NULL;
static long long jump_round_mask = 0;
/* The loop's TimerQueue (_timers.py) and OutsideWork (_outside.py): the counts each round
   compares, slots too. */
static PyTypeObject *queue_type = NULL, *world_type = NULL;
static Py_ssize_t off_q_cancelled, off_q_scan_at, off_w_calm_at, off_w_changes;

/* Is ``obj`` a virtual loop (the slotted fields are where setup_loop() found them)? */
static int
is_loop(PyObject *obj)
{
    return loop_type != NULL && PyObject_TypeCheck(obj, loop_type);
}

/* Mirrors: ``loop.<name>`` for a slotted field of a virtual loop: borrowed; NULL with
   AttributeError set if the field was never set. */
static PyObject *
field(PyObject *loop, Py_ssize_t off, const char *name)
{
    PyObject *value = SLOT(loop, off);
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, name);
    }
    return value;
}

/* Mirrors: ``loop.<name> = value`` for a slotted field of a virtual loop (value borrowed). */
static void
set_field(PyObject *loop, Py_ssize_t off, PyObject *value)
{
    PyObject *old = SLOT(loop, off);
    SLOT(loop, off) = Py_NewRef(value);
    Py_XDECREF(old);
}

/* ``obj`` (borrowed; NULL allowed) an exact int that fits a C long long: 1 and *out, or 0 --
   the caller then leaves the decision to Python. */
static int
exact_int(PyObject *obj, long long *out)
{
    if (obj == NULL || !PyLong_CheckExact(obj)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

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

/* setup(waiter_type, timer_type, soon_type, waker_a, waker_b, invalid_state_error,
         wake_context, sleep_timer_type) */
static PyObject *
setup(PyObject *module, PyObject *args)
{
    PyObject *w, *t, *s, *a, *b, *e, *c, *z;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOO!O!:setup", &PyType_Type, &w, &PyType_Type, &t,
                          &PyType_Type, &s, &a, &b, &e, &PyContext_Type, &c, &PyType_Type, &z)) {
        return NULL;
    }
    PyTypeObject *sleeper = (PyTypeObject *)z;
    if (slot_offset(sleeper, "_future", &off_s_future) < 0 ||
        slot_offset(sleeper, "_queue", &off_s_queue) < 0 ||
        slot_offset(sleeper, "_result", &off_s_result) < 0 ||
        slot_offset(sleeper, "_ticks", &off_s_ticks) < 0) {
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
    Py_XSETREF(wake_context, Py_NewRef(c));
    Py_XSETREF(sleeper_type, (PyTypeObject *)Py_NewRef(z));
    Py_XSETREF(future_done, PyObject_GetAttrString(w, "done"));
    Py_XSETREF(future_set_result, PyObject_GetAttrString(w, "set_result"));
    Py_XSETREF(future_result, PyObject_GetAttrString(w, "result"));
    if (future_done == NULL || future_set_result == NULL || future_result == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------ heap */

/* The heap invariant of heapq (heap[k] <= heap[2k+1], heap[2k+2]), so that heapq's own
   functions and these can work on one list in turn. */

/* Read a small non-negative exact int (at most two digits: below 2**60 on 64-bit builds)
   straight from its digits: 1 and the value in *out, or 0 (then the caller asks the
   public API).  The layouts are those of CPython 3.11 (ob_size) and 3.12-3.14 (lv_tag), from
   cpython/longintrepr.h; other versions always answer 0.  Every heap comparison starts
   here -- tick counts, priorities and sequence numbers -- so it matters. */
static inline int
small_int(PyObject *x, long long *out)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    Py_ssize_t ndigits = Py_SIZE(x);
    const digit *digits = ((PyLongObject *)x)->ob_digit;
    if (ndigits < 0) {
        return 0;
    }
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030F0000
    uintptr_t tag = ((PyLongObject *)x)->long_value.lv_tag;
    const digit *digits = ((PyLongObject *)x)->long_value.ob_digit;
    if ((tag & 3) == 2) { /* negative */
        return 0;
    }
    Py_ssize_t ndigits = (Py_ssize_t)(tag >> 3);
#else
    (void)x;
    (void)out;
    return 0;
#endif
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030F0000
    if (ndigits == 0) {
        *out = 0;
        return 1;
    }
    if (ndigits == 1) {
        *out = (long long)digits[0];
        return 1;
    }
    if (ndigits == 2 && 2 * PyLong_SHIFT <= 62) {
        *out = (long long)digits[0] | ((long long)digits[1] << PyLong_SHIFT);
        return 1;
    }
    return 0;
#endif
}

/* Mirrors: Python's ``a < b`` on two timer-heap entries ``(tick, priority, seq, item)``, as
   heapq compares them in virtualtime/_engine/_timers.py (TimerQueue) and _cycle.py (_run_once). */
static int
lt(PyObject *a, PyObject *b)
{
    /* Entries are (tick, priority, seq, item) with unique seq: compare the first three. */
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 4 &&
        PyTuple_GET_SIZE(b) == 4) {
        for (Py_ssize_t i = 0; i < 3; i++) {
            PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
            if (x == y) {
                continue; /* the same int (a priority of 0, mostly): equal */
            }
            if (PyLong_CheckExact(x) && PyLong_CheckExact(y)) {
                long long sx, sy;
                if (small_int(x, &sx) && small_int(y, &sy)) {
                    if (sx != sy) {
                        return sx < sy;
                    }
                    continue;
                }
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

/* Mirrors: heapq.heappush(heap, entry) -- the pushes of VirtualEventLoop.call_later's inline
   path (_loop.py) and of TimerQueue.push (_timers.py). */
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
/* Mirrors: heapq.heappop(heap) -- the pops of CycleMixin._run_once (_cycle.py). */
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

/* The ticks of a positive delay, as the pure path computes them: max(1, round(delay * 10**9))
   -- for a float, the float product rounded half to even; for an int, the exact product.  A
   new reference; NULL with an error set, or NULL without one if ``delay`` is neither an exact
   float nor an exact int (or an int too large for the C arithmetic). */
/* Mirrors: the step of VirtualEventLoop.call_later's inline path (_loop.py) and of
   WaitsMixin._vt_wake_after (_waits.py): ``step = round(delay * TICKS_PER_SECOND)``, at least 1. */
static PyObject *
delay_step(PyObject *delay)
{
    if (PyFloat_CheckExact(delay)) {
        double scaled = nearbyint(PyFloat_AS_DOUBLE(delay) * 1e9);
        if (scaled < 1.0) {
            return PyLong_FromLong(1);
        }
        if (scaled < 9.0e18) {
            return PyLong_FromLongLong((long long)scaled);
        }
        return PyLong_FromDouble(scaled);
    }
    if (PyLong_CheckExact(delay)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(delay, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (!overflow && v > 0 && v < 9000000000LL) {
            return PyLong_FromLongLong(v * 1000000000LL);
        }
        if (!overflow && v <= 0) {
            return PyLong_FromLong(1);
        }
        return PyNumber_Multiply(delay, ticks_per_second);
    }
    return NULL;
}

/* push_after(heap, next_seq, ticks, delay, priority, item) -> seq

   The entry of a sleep of ``delay`` seconds (a float or int, 0 < delay < 1e18) from tick
   ``ticks``: (ticks + max(1, round(delay * 1e9)), priority, seq, item).  */
/* Mirrors: WaitsMixin._vt_wake_after (virtualtime/_engine/_waits.py) for 0 < delay < 1e18
   on a loop without history (sim/_native.wake_after and the kit's sleep call it). */
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
    PyObject *step = delay_step(args[3]);
    if (step == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "push_after(): delay must be a float or an int");
        }
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

/* ``future.<name>(*args)``: through asyncio.Future's own method for an exact Future (``desc``),
   else looked up by name. */
static PyObject *
future_call(PyObject *future, PyObject *desc, PyObject *name, PyObject *arg)
{
    if (Py_IS_TYPE(future, waiter_type)) {
        PyObject *args[2] = {future, arg};
        return PyObject_Vectorcall(desc, args, arg == NULL ? 1 : 2, NULL);
    }
    return arg == NULL ? PyObject_CallMethodNoArgs(future, name)
                       : PyObject_CallMethodOneArg(future, name, arg);
}

/* Mirrors: ``try: future.set_result(value) except InvalidStateError: pass`` in the pop loop of
   CycleMixin._run_once (_cycle.py) and in _handles.set_result_unless_cancelled. */
static int
set_result(PyObject *future, PyObject *value)
{
    PyObject *res = future_call(future, future_set_result, str_set_result, value);
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
/* Mirrors: ``future.done()``. */
static int
is_done(PyObject *future)
{
    PyObject *res = future_call(future, future_done, str_done, NULL);
    if (res == NULL) {
        return -1;
    }
    int done = PyObject_IsTrue(res);
    Py_DECREF(res);
    return done;
}

/* What ``await future`` gives once the task is woken: the future's result (a new reference),
   or NULL with its exception set -- and RuntimeError, as Future.__await__ raises it, if the
   future is not done. */
/* Mirrors: the return of Future.__await__ (``future.result()``) after the task is woken. */
static PyObject *
future_outcome(PyObject *future)
{
    PyObject *res = future_call(future, future_result, str_result, NULL);
    if (res != NULL || !PyErr_ExceptionMatches(invalid_state)) {
        return res;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int done = is_done(future);
    if (done == 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        PyErr_SetString(PyExc_RuntimeError, "await wasn't used with future");
    }
    else if (done > 0) {
        PyErr_Restore(type, value, tb);
    }
    else {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return NULL;
}

/* The body of fire() (and of each round of plain_rounds): pops and fires every entry due at
   or before ``now``; ``*seconds`` (a strong reference, replaced when a later float deadline is
   seen) and the two counts are updated.  0, or -1 with an error set. */
/* Mirrors: the pop loop of CycleMixin._run_once (virtualtime/_engine/_cycle.py). */
static int
fire_due(PyObject *heap, PyObject *now, PyObject **seconds_ref, PyObject *append,
         Py_ssize_t *fired_out, Py_ssize_t *dead_out)
{
    PyObject *seconds = *seconds_ref;
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
            /* set_result refuses a future already done (cancelled, or resolved early): its
               entry is dead, and was never counted -- the pure path's test too. */
            PyObject *res = future_call(item, future_set_result, str_set_result, Py_None);
            if (res != NULL) {
                Py_DECREF(res);
                fired++;
            }
            else if (PyErr_ExceptionMatches(invalid_state)) {
                PyErr_Clear();
            }
            else {
                rc = -1;
            }
        }
        else if (Py_IS_TYPE(item, sleeper_type)) {
            /* asyncio.sleep's timer: no future, it was cancelled in the heap (and counted);
               a future already done refuses the value (its sleep was cancelled). */
            PyObject *fut = SLOT(item, off_s_future);
            if (fut == NULL || fut == Py_None) {
                dead++;
            }
            else {
                SLOT(item, off_s_future) = Py_NewRef(Py_None); /* the reference moves to fut */
                PyObject *value = SLOT(item, off_s_result);
                PyObject *res = future_call(fut, future_set_result, str_set_result,
                                            value != NULL ? value : Py_None);
                Py_DECREF(fut);
                if (res != NULL) {
                    Py_DECREF(res);
                    fired++;
                }
                else if (PyErr_ExceptionMatches(invalid_state)) {
                    PyErr_Clear();
                }
                else {
                    rc = -1;
                }
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
    *seconds_ref = seconds;
    *fired_out = fired;
    *dead_out = dead;
    return 0;
error:
    *seconds_ref = seconds;
    *fired_out = fired;
    *dead_out = dead;
    return -1;
}

/* fire(heap, now, seconds, ready_append) -> (fired, dead, seconds)

   The pop loop of VirtualEventLoop._run_once for a loop with no history and not in debug
   mode: every entry due at or before tick ``now`` is removed in order; a native sleep's
   future is resolved, a sleep timer resolves its future, any other live timer goes to the
   ready queue.  Returns how many fired, how many counted dead entries (cancelled handles and
   sleep timers: a dead native sleep was never counted) were dropped, and the latest float
   deadline (see call_at) -- ``seconds`` or more.  */
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
    if (!PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "fire(): heap must be a list");
        return NULL;
    }
    PyObject *seconds = Py_NewRef(args[2]);
    Py_ssize_t fired = 0, dead = 0;
    if (fire_due(args[0], args[1], &seconds, args[3], &fired, &dead) < 0) {
        Py_DECREF(seconds);
        return NULL;
    }
    return Py_BuildValue("nnN", fired, dead, seconds);
}

/* --------------------------------------------------------------------------- ready */

/* A new lean handle (virtualtime._engine._handles._Soon) without running its __init__: the same fields
   _Soon.__init__ sets. */
/* Mirrors: the fields VirtualEventLoop.call_soon (_loop.py) sets on a new _Soon (_handles.py). */
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

/* inspect.signature(method): what __signature__ answers for the loop methods compiled here,
   so that inspect.signature(loop.call_soon) -- and through it help(), unittest.mock's
   autospec and pytest-mock -- sees the method's parameters, not "not supported".  Each
   caller keeps its ``fallback`` (the Python method, bound), which has exactly the parameters
   the compiled path takes; NULL means "no parameters" (get_debug).  Computed when asked:
   nothing here is on a hot path. */
static PyObject *
signature_of(PyObject *method)
{
    PyObject *inspect = PyImport_ImportModule("inspect");
    if (inspect == NULL) {
        return NULL;
    }
    PyObject *sig = method == NULL ? PyObject_CallMethod(inspect, "Signature", NULL)
                                   : PyObject_CallMethod(inspect, "signature", "O", method);
    Py_DECREF(inspect);
    return sig;
}

static PyObject *
fallback_signature(PyObject *fallback)
{
    if (fallback == NULL) { /* cleared by the GC: nothing left to describe */
        PyErr_SetString(PyExc_AttributeError, "__signature__");
        return NULL;
    }
    return signature_of(fallback);
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

/* A boolean flag of the loop (1, 0, or -1 with an error): a slot of a virtual loop (at
   ``off``), else read with getattr. */
/* Mirrors: ``bool(loop.name)``. */
static int
loop_flag(PyObject *loop, Py_ssize_t off, PyObject *name)
{
    PyObject *flag = is_loop(loop) ? SLOT(loop, off) : NULL;
    if (flag == Py_True) {
        return 1;
    }
    if (flag == Py_False) {
        return 0;
    }
    if (flag != NULL) {
        return PyObject_IsTrue(flag);
    }
    flag = PyObject_GetAttr(loop, name);
    if (flag == NULL) {
        return -1;
    }
    int res = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return res;
}

/* Mirrors: VirtualEventLoop.call_soon (_loop.py): the lean handle, or the method itself (the
   fallback) in debug mode or on a closed loop. */
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
        int debug = loop_flag(loop, off_l_debug, str_debug);
        if (debug < 0) {
            return NULL;
        }
        int closed = debug ? 0 : loop_flag(loop, off_l_closed, str_closed);
        if (closed < 0) {
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

static PyObject *
soon_signature(SoonCaller *self, void *Py_UNUSED(closure))
{
    return fallback_signature(self->fallback);
}

/* __call__ as a method too (METH_COEXIST: it takes the slot wrapper's place in the type's
   dict; calls still go through the vectorcall slot).  Its docstring's first line is the
   signature, in Argument Clinic's convention, because unittest.mock's autospec reads the
   signature of ``obj.__call__`` for a callable that is not a function: with it, a mocked
   loop method refuses the calls the stock method refuses. */
static PyObject *
soon_call_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return soon_vectorcall(self, args, (size_t)nargs, kwnames);
}

static PyMethodDef soon_methods[] = {
    {"__call__", (PyCFunction)(void (*)(void))soon_call_method,
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST,
     "__call__($self, callback, *args, context=None)\n--\n\nCall self as loop.call_soon."},
    {NULL},
};

static PyGetSetDef soon_getset[] = {
    {"__signature__", (getter)soon_signature, NULL, "the signature of loop.call_soon", NULL},
    {NULL},
};

static PyTypeObject SoonCaller_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.SoonCaller",
    .tp_basicsize = sizeof(SoonCaller),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The virtual loop's call_soon(callback, *args, context=None), compiled: "
              "as asyncio's loop.call_soon (see virtualtime._engine._loop).",
    .tp_new = soon_new,
    .tp_traverse = (traverseproc)soon_traverse,
    .tp_clear = (inquiry)soon_clear,
    .tp_dealloc = (destructor)soon_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SoonCaller, vectorcall),
    .tp_members = soon_members,
    .tp_getset = soon_getset,
    .tp_methods = soon_methods,
};


/* LaterCaller(loop, timer_type, fallback): the loop's call_later.  For the common case -- no
   priority, not in debug mode, an open loop keeping no history, a float or int delay below
   1e18 -- it does what the inline path of VirtualEventLoop.call_later does: a lean timer
   (virtualtime._engine._handles._Timer, its fields set as _Timer.__init__ sets them) pushed as
   (ticks, 0, seq, timer) into the loop's heap -- or, for asyncio.sleep's callback with no
   context, a SleepTimer (virtualtime._engine._timers) in the timer's place.  Anything else
   goes to ``fallback`` (the pure-Python method) with the same arguments. */
typedef struct {
    PyObject_HEAD
    PyObject *loop;
    PyObject *timer; /* the lean timer type */
    PyObject *heap;
    PyObject *next_seq;
    PyObject *queue; /* the loop's TimerQueue: a SleepTimer counts its cancellation there */
    PyObject *fallback;
    int history;     /* the loop keeps a history: always the fallback */
    vectorcallfunc vectorcall;
} LaterCaller;

/* Mirrors: VirtualEventLoop.call_later's inline path (_loop.py): a SleepTimer for
   asyncio.sleep's timer, a lean _Timer for any other callback; anything unusual calls the
   method itself (the fallback). */
static PyObject *
later_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LaterCaller *self = (LaterCaller *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *context = NULL;
    int slow = nargs < 2 || self->history;
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
    double delay = 0.0;
    if (!slow) {
        PyObject *d = args[0];
        if (PyFloat_CheckExact(d)) {
            delay = PyFloat_AS_DOUBLE(d);
        }
        else if (PyLong_CheckExact(d)) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(d, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                slow = 1;
            }
            delay = (double)v;
        }
        else {
            slow = 1;
        }
        if (!(delay < 1e18)) { /* NaN, inf and astronomically long delays included */
            slow = 1;
        }
    }
    if (!slow) {
        int debug = loop_flag(self->loop, off_l_debug, str_debug);
        if (debug < 0) {
            return NULL;
        }
        int closed = debug ? 0 : loop_flag(self->loop, off_l_closed, str_closed);
        if (closed < 0) {
            return NULL;
        }
        slow = debug || closed;
    }
    if (slow) {
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    PyObject *now = field(self->loop, off_l_ticks, "_vt_ticks"); /* borrowed */
    if (now == NULL) {
        return NULL;
    }
    PyObject *ticks;
    if (delay > 0) {
        PyObject *step = delay_step(args[0]);
        if (step == NULL) {
            return NULL;
        }
        ticks = PyNumber_Add(now, step);
        Py_DECREF(step);
        if (ticks == NULL) {
            return NULL;
        }
    }
    else {
        ticks = Py_NewRef(now);
    }
    PyObject *when = NULL, *cargs = NULL, *handle = NULL, *seq = NULL, *entry = NULL, *ctx = NULL;
    if ((context == NULL || context == Py_None) && nargs == 4 &&
        (args[1] == waker_a || args[1] == waker_b)) {
        /* asyncio.sleep's timer, as in call_later: a SleepTimer, the entry's item and the
           handle at once. */
        handle = sleeper_type->tp_alloc(sleeper_type, 0);
        if (handle == NULL) {
            goto error;
        }
        SLOT(handle, off_s_future) = Py_NewRef(args[2]);
        SLOT(handle, off_s_result) = Py_NewRef(args[3]);
        SLOT(handle, off_s_queue) = Py_NewRef(self->queue);
        SLOT(handle, off_s_ticks) = Py_NewRef(ticks);
        goto push_it;
    }
    when = PyNumber_TrueDivide(ticks, ticks_per_second); /* exactly as in Python: int / int */
    if (when == NULL) {
        goto error;
    }
    cargs = PyTuple_New(nargs - 2);
    if (cargs == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 2; i < nargs; i++) {
        PyTuple_SET_ITEM(cargs, i - 2, Py_NewRef(args[i]));
    }
    if ((context == NULL || context == Py_None) && (args[1] == waker_a || args[1] == waker_b)) {
        ctx = Py_NewRef(wake_context); /* as in call_later: a waker never runs in its context */
    }
    else if (context == NULL || context == Py_None) {
        ctx = PyContext_CopyCurrent();
        if (ctx == NULL) {
            goto error;
        }
    }
    else {
        ctx = Py_NewRef(context);
    }
    PyTypeObject *type = (PyTypeObject *)self->timer;
    handle = type->tp_alloc(type, 0);
    if (handle == NULL) {
        goto error;
    }
    SLOT(handle, off_context) = ctx;
    ctx = NULL;
    SLOT(handle, off_loop) = Py_NewRef(self->loop);
    SLOT(handle, off_callback) = Py_NewRef(args[1]);
    SLOT(handle, off_args) = cargs;
    cargs = NULL;
    SLOT(handle, off_cancelled) = Py_NewRef(Py_False);
    SLOT(handle, off_repr) = Py_NewRef(Py_None);
    SLOT(handle, off_source_traceback) = Py_NewRef(Py_None);
    SLOT(handle, off_when) = when;
    when = NULL;
    SLOT(handle, off_scheduled) = Py_NewRef(Py_True);
push_it:
    seq = PyObject_CallNoArgs(self->next_seq);
    if (seq == NULL) {
        goto error;
    }
    entry = PyTuple_New(4);
    if (entry == NULL) {
        goto error;
    }
    PyTuple_SET_ITEM(entry, 0, ticks);
    ticks = NULL;
    PyTuple_SET_ITEM(entry, 1, PyLong_FromLong(0));
    PyTuple_SET_ITEM(entry, 2, seq);
    seq = NULL;
    PyTuple_SET_ITEM(entry, 3, Py_NewRef(handle));
    if (PyTuple_GET_ITEM(entry, 1) == NULL || push(self->heap, entry) < 0) {
        goto error;
    }
    Py_DECREF(entry);
    return handle;
error:
    Py_XDECREF(ticks);
    Py_XDECREF(when);
    Py_XDECREF(cargs);
    Py_XDECREF(ctx);
    Py_XDECREF(handle);
    Py_XDECREF(seq);
    Py_XDECREF(entry);
    return NULL;
}

static PyObject *
later_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *loop, *timer, *fallback;
    if (!PyArg_ParseTuple(args, "OO!O:LaterCaller", &loop, &PyType_Type, &timer, &fallback)) {
        return NULL;
    }
    if (timer_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)timer, timer_type)) {
        PyErr_SetString(PyExc_TypeError, "virtualtime._engine._cwake: the lean timer is not a TimerHandle");
        return NULL;
    }
    Py_ssize_t timer_callback;
    if (slot_offset((PyTypeObject *)timer, "_callback", &timer_callback) < 0) {
        return NULL;
    }
    if (timer_callback != off_callback ||
        ((PyTypeObject *)timer)->tp_basicsize != timer_type->tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "virtualtime._engine._cwake: the lean timer's layout differs");
        return NULL;
    }
    PyObject *heap = PyObject_GetAttr(loop, str_vt_heap);
    PyObject *next_seq = heap == NULL ? NULL : PyObject_GetAttr(loop, str_vt_seq);
    PyObject *history = next_seq == NULL ? NULL : PyObject_GetAttr(loop, str_vt_history);
    PyObject *queue = history == NULL ? NULL : PyObject_GetAttrString(loop, "_vt_timers");
    if (queue == NULL || !PyList_CheckExact(heap)) {
        if (queue != NULL) {
            PyErr_SetString(PyExc_TypeError, "virtualtime._engine._cwake: the loop's heap is not a list");
        }
        Py_XDECREF(heap);
        Py_XDECREF(next_seq);
        Py_XDECREF(history);
        Py_XDECREF(queue);
        return NULL;
    }
    LaterCaller *self = is_loop(loop) ? (LaterCaller *)type->tp_alloc(type, 0) : NULL;
    if (self == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "LaterCaller() takes a virtual loop (setup_loop)");
        }
        Py_DECREF(heap);
        Py_DECREF(next_seq);
        Py_DECREF(history);
        Py_DECREF(queue);
        return NULL;
    }
    self->queue = queue;
    self->history = history != Py_None;
    Py_DECREF(history);
    self->loop = Py_NewRef(loop);
    self->timer = Py_NewRef(timer);
    self->heap = heap;
    self->next_seq = next_seq;
    self->fallback = Py_NewRef(fallback);
    self->vectorcall = later_vectorcall;
    return (PyObject *)self;
}

static int
later_traverse(LaterCaller *self, visitproc visit, void *arg)
{
    Py_VISIT(self->loop);
    Py_VISIT(self->timer);
    Py_VISIT(self->heap);
    Py_VISIT(self->next_seq);
    Py_VISIT(self->queue);
    Py_VISIT(self->fallback);
    return 0;
}

static int
later_clear(LaterCaller *self)
{
    Py_CLEAR(self->loop);
    Py_CLEAR(self->timer);
    Py_CLEAR(self->heap);
    Py_CLEAR(self->next_seq);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
later_dealloc(LaterCaller *self)
{
    PyObject_GC_UnTrack(self);
    later_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef later_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(LaterCaller, vectorcall), READONLY, NULL},
    {NULL},
};

static PyObject *
later_signature(LaterCaller *self, void *Py_UNUSED(closure))
{
    return fallback_signature(self->fallback);
}

/* __call__ as a method too, for autospec: see soon_call_method. */
static PyObject *
later_call_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return later_vectorcall(self, args, (size_t)nargs, kwnames);
}

static PyMethodDef later_methods[] = {
    {"__call__", (PyCFunction)(void (*)(void))later_call_method,
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST,
     "__call__($self, delay, callback, *args, context=None, priority=0)\n--\n\n"
     "Call self as loop.call_later."},
    {NULL},
};

static PyGetSetDef later_getset[] = {
    {"__signature__", (getter)later_signature, NULL, "the signature of loop.call_later", NULL},
    {NULL},
};

static PyTypeObject LaterCaller_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.LaterCaller",
    .tp_basicsize = sizeof(LaterCaller),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The virtual loop's call_later(delay, callback, *args, context=None, priority=0), "
              "compiled: as asyncio's loop.call_later, with a priority "
              "(see virtualtime._engine._loop).",
    .tp_new = later_new,
    .tp_traverse = (traverseproc)later_traverse,
    .tp_clear = (inquiry)later_clear,
    .tp_dealloc = (destructor)later_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(LaterCaller, vectorcall),
    .tp_members = later_members,
    .tp_getset = later_getset,
    .tp_methods = later_methods,
};

/* DebugFlag(loop): a callable returning loop._debug -- the loop's get_debug, reading the
   flag from its slot (every Future built on the loop calls it). */
typedef struct {
    PyObject_HEAD
    PyObject *loop;
    vectorcallfunc vectorcall;
} DebugFlag;

/* Mirrors: BaseEventLoop.get_debug(), as the pure path's stand-in in
   VirtualEventLoop._vt_lean_get_debug (_loop.py) reads it: the slot ``_debug``. */
static PyObject *
flag_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    DebugFlag *self = (DebugFlag *)self_obj;
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "get_debug() takes no arguments");
        return NULL;
    }
    PyObject *value = field(self->loop, off_l_debug, "_debug");
    return value == NULL ? NULL : Py_NewRef(value);
}

static PyObject *
flag_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *loop;
    if (!PyArg_ParseTuple(args, "O:DebugFlag", &loop)) {
        return NULL;
    }
    if (!is_loop(loop)) {
        PyErr_SetString(PyExc_TypeError, "DebugFlag() takes a virtual loop (setup_loop)");
        return NULL;
    }
    DebugFlag *self = (DebugFlag *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->loop = Py_NewRef(loop);
    self->vectorcall = flag_vectorcall;
    return (PyObject *)self;
}

static int
flag_traverse(DebugFlag *self, visitproc visit, void *arg)
{
    Py_VISIT(self->loop);
    return 0;
}

static int
flag_clear(DebugFlag *self)
{
    Py_CLEAR(self->loop);
    return 0;
}

static void
flag_dealloc(DebugFlag *self)
{
    PyObject_GC_UnTrack(self);
    flag_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
flag_signature(DebugFlag *Py_UNUSED(self), void *Py_UNUSED(closure))
{
    return signature_of(NULL);
}

/* __call__ as a method too, for autospec: see soon_call_method. */
static PyObject *
flag_call_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return flag_vectorcall(self, args, (size_t)nargs, kwnames);
}

static PyMethodDef flag_methods[] = {
    {"__call__", (PyCFunction)(void (*)(void))flag_call_method,
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST,
     "__call__($self)\n--\n\nCall self as loop.get_debug."},
    {NULL},
};

static PyGetSetDef flag_getset[] = {
    {"__signature__", (getter)flag_signature, NULL, "no parameters, as loop.get_debug", NULL},
    {NULL},
};

static PyTypeObject DebugFlag_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.DebugFlag",
    .tp_basicsize = sizeof(DebugFlag),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The virtual loop's get_debug(), compiled: as asyncio's loop.get_debug "
              "(see virtualtime._engine._loop).",
    .tp_new = flag_new,
    .tp_traverse = (traverseproc)flag_traverse,
    .tp_clear = (inquiry)flag_clear,
    .tp_dealloc = (destructor)flag_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(DebugFlag, vectorcall),
    .tp_getset = flag_getset,
    .tp_methods = flag_methods,
};

/* run_ready(popleft, ntodo, failed) -> None

   The last part of _run_once: run the first ``ntodo`` handles of the ready queue in order.
   A lean handle's callback is run in its context here, and a failure is handed to
   ``failed(handle, exc)`` (which reports it as Handle._run does); SystemExit and
   KeyboardInterrupt propagate, leaving the rest queued.  Other handles run their _run(). */
/* Mirrors: the last loop of CycleMixin._run_once (_cycle.py), which runs the ready queue;
   failures go to CycleMixin._vt_callback_failed as there. */
static int run_ready_n(PyObject *popleft, Py_ssize_t ntodo, PyObject *failed);

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
    Py_ssize_t ntodo = PyLong_AsSsize_t(args[1]);
    if (ntodo == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (run_ready_n(args[0], ntodo, args[2]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The body of run_ready(): 0, or -1 with an error set. */
static int
run_ready_n(PyObject *popleft, Py_ssize_t ntodo, PyObject *failed)
{
    for (Py_ssize_t i = 0; i < ntodo; i++) {
        PyObject *handle = PyObject_CallNoArgs(popleft);
        if (handle == NULL) {
            return -1;
        }
        if (!PyObject_TypeCheck(handle, timer_type->tp_base) &&
            !PyObject_TypeCheck(handle, soon_type)) {
            /* Not a Handle at all: run it as the stock loop would. */
            PyObject *res = PyObject_CallMethodNoArgs(handle, str_run);
            Py_DECREF(handle);
            if (res == NULL) {
                return -1;
            }
            Py_DECREF(res);
            continue;
        }
        PyObject *cancelled = SLOT(handle, off_cancelled);
        int is_cancelled = cancelled != NULL ? PyObject_IsTrue(cancelled) : 0;
        if (is_cancelled) {
            Py_DECREF(handle);
            if (is_cancelled < 0) {
                return -1;
            }
            continue;
        }
        if (!Py_IS_TYPE(handle, soon_type)) {
            PyObject *res = PyObject_CallMethodNoArgs(handle, str_run);
            Py_DECREF(handle);
            if (res == NULL) {
                return -1;
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
            return -1;
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
            return -1;
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
            return -1;
        }
        Py_DECREF(report);
    }
    return 0;
}




/* ------------------------------------------------------------------------- rounds */



static PyObject *str_vt_max_instant = NULL, *str_vt_fired = NULL,
                *str_cancelled = NULL, *str_calm_at = NULL, *str_changes = NULL,
                *str_vt_runaway = NULL, *str_vt_selector = NULL, *str_registered = NULL,
                *str_scan_at = NULL;

/* A loop field that is an exact int, as a C long long: 1 and *out, or 0 if it is not one (or
   is too large: the caller then leaves the round to Python). */
static int
int_item(PyObject *dict, PyObject *name, long long *out)
{
    return exact_int(PyDict_GetItemWithError(dict, name), out);
}

/* An int attribute of a helper object (the timer queue's ``cancelled``, the outside world's
   ``changes``): as int_item. */
static int
int_attr(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = exact_int(value, out);
    Py_DECREF(value);
    return ok;
}

/* A count kept in a slot of a helper of the loop (an exact ``type``: at ``off``), else read
   as an attribute: as int_attr. */
static int
int_slot(PyObject *obj, PyTypeObject *type, Py_ssize_t off, PyObject *name, long long *out)
{
    return Py_IS_TYPE(obj, type) ? exact_int(SLOT(obj, off), out) : int_attr(obj, name, out);
}

/* The round the compiled core may take now: 1 the plain round (nothing ready: jump to the
   head, whose tick is then in *head_ticks), 2 a busy round (something ready: time stays, what
   is due now fires, the ready queue runs), 0 neither (the Python round decides: a purge, a
   poll, the outside world, a drive, a stop...), -1 on error.  ``selector`` is the loop's
   (it does not change while the loop runs). */
/* Mirrors: the tests at the top of CycleMixin._run_once (_cycle.py): the plain round's, and
   the general round's when something is ready and nothing needs a purge or a poll. */
static int
round_kind(PyObject *loop, PyObject *heap, PyObject *ready, PyObject *timers, PyObject *world,
           PyObject *threads, PyObject *selector, long long *head_ticks)
{
    /* _vt_plain: the fast path with lean timers (no history, not in debug mode: set_debug
       updates it).  Never while stopping, nor with a drive or a re-armed timer in play. */
    if (SLOT(loop, off_l_plain) != Py_True || SLOT(loop, off_l_stopping) != Py_False ||
        SLOT(loop, off_l_rearmed) != Py_False) {
        return 0;
    }
    PyObject *drives = SLOT(loop, off_l_drives);
    if (drives == NULL || !PyList_CheckExact(drives) || PyList_GET_SIZE(drives) != 0) {
        return 0;
    }
    long long cancelled;
    if (!int_slot(timers, queue_type, off_q_cancelled, str_cancelled, &cancelled) ||
        cancelled != 0) {
        return 0;
    }
    Py_ssize_t size = PyList_GET_SIZE(heap);
    PyObject *head = size > 0 ? PyList_GET_ITEM(heap, 0) : NULL;
    if (head != NULL) {
        if (!PyTuple_CheckExact(head) || PyTuple_GET_SIZE(head) != 4) {
            return 0;
        }
        PyObject *item = PyTuple_GET_ITEM(head, 3);
        if (Py_IS_TYPE(item, waiter_type)) {
            /* A dead waiter at the head: the Python round drops it (and time must never
               jump to one). */
            int done = is_done(item);
            if (done != 0) {
                return done < 0 ? -1 : 0;
            }
        }
    }
    Py_ssize_t pending = PyObject_Size(ready);
    if (pending < 0) {
        return -1;
    }
    if (pending > 0) {
        long long scan_at, registered;
        if (!int_attr(selector, str_registered, &registered) || registered > 1 ||
            !int_slot(timers, queue_type, off_q_scan_at, str_scan_at, &scan_at) ||
            size >= scan_at) {
            return 0; /* a poll, or the heap's growth scan, is due */
        }
        return 2;
    }
    if (head == NULL || !PyLong_CheckExact(PyTuple_GET_ITEM(head, 0))) {
        return 0;
    }
    long long calm_at, changes, beyond;
    if (!int_slot(world, world_type, off_w_calm_at, str_calm_at, &calm_at) ||
        !int_slot(world, world_type, off_w_changes, str_changes, &changes) ||
        calm_at != changes || PyDict_GET_SIZE(threads) != 1) {
        return 0; /* something outside may be going on */
    }
    PyObject *beyond_obj = SLOT(loop, off_l_beyond);
    if (beyond_obj == NULL || !PyLong_CheckExact(beyond_obj)) {
        return 0;
    }
    int overflow;
    beyond = PyLong_AsLongLongAndOverflow(beyond_obj, &overflow);
    if (overflow > 0) {
        beyond = LLONG_MAX; /* NEVER (2**125): no horizon watched */
    }
    else if (overflow < 0 || (beyond == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    long long tick = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(head, 0), &overflow);
    if (overflow || (tick == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (!(tick < beyond)) {
        return 0; /* never, or past a watched horizon */
    }
    *head_ticks = tick;
    return 1;
}

/* Store ``value`` as the loop's float clock (_vt_now) if it is later: 0, or -1 with an error. */
/* Mirrors: ``if seconds > self._vt_now: self._vt_now = seconds`` (_cycle.py). */
static int
raise_now(PyObject *loop, PyObject *value)
{
    PyObject *was = field(loop, off_l_now, "_vt_now");
    if (was == NULL) {
        return -1;
    }
    if (was == value) {
        return 0;
    }
    int later = PyObject_RichCompareBool(value, was, Py_GT);
    if (later < 0) {
        return -1;
    }
    if (later) {
        set_field(loop, off_l_now, value);
    }
    return 0;
}

/* A slotted field of the loop that is an exact int, as a C long long: as int_item. */
static int
int_field(PyObject *loop, Py_ssize_t off, long long *out)
{
    return exact_int(SLOT(loop, off), out);
}

/* Store a C integer as a slotted field of the loop: 0, or -1 with an error set. */
static int
set_int_field(PyObject *loop, Py_ssize_t off, long long value)
{
    PyObject *obj = PyLong_FromLongLong(value);
    if (obj == NULL) {
        return -1;
    }
    set_field(loop, off, obj);
    Py_DECREF(obj);
    return 0;
}

/* plain_rounds(loop, heap, ready, timers, world, threads, popleft, failed) -> rounds

   Rounds of the loop, one after the other, for as long as each is one the Python round
   would take without looking outside: the plain round (pure virtual time, nothing ready,
   nothing dead at the head, nothing outside: jump to the head's instant) or a busy one
   (something ready, no purge or poll due: time stays).  Each fires what is due and runs what
   is ready, as CycleMixin._run_once does.  Returns how many rounds it ran; 0 means the first
   was neither, and the caller takes its general round.  Running several rounds in one call
   of _run_once is what run_forever would do: it only checks ``_stopping`` between rounds,
   and so does this. */
/* Mirrors: CycleMixin._run_once (_cycle.py), called again and again. */
static PyObject *
plain_rounds(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "plain_rounds() takes 8 arguments");
        return NULL;
    }
    if (waiter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    PyObject *loop = args[0], *heap = args[1], *ready = args[2], *timers = args[3],
             *world = args[4], *threads = args[5], *popleft = args[6], *failed = args[7];
    if (!PyList_CheckExact(heap) || !PyDict_Check(threads)) {
        PyErr_SetString(PyExc_TypeError, "plain_rounds(): heap must be a list, threads a dict");
        return NULL;
    }
    if (!is_loop(loop)) {
        return PyLong_FromLong(0); /* not the loop this was written for: the Python round */
    }
    PyObject *dict = PyObject_GenericGetDict(loop, NULL);
    if (dict == NULL) {
        return NULL;
    }
    PyObject *append = NULL, *selector = NULL;
    long long max_count;
    Py_ssize_t rounds = 0;
    /* Fields that do not change while the loop runs: read once. */
    selector = PyDict_GetItemWithError(dict, str_vt_selector);
    Py_XINCREF(selector);
    if (selector == NULL || !int_item(dict, str_vt_max_instant, &max_count)) {
        goto done; /* not the loop this was written for: the Python round decides */
    }
    append = PyObject_GetAttrString(ready, "append");
    if (append == NULL) {
        goto error;
    }
    for (;;) {
        long long head = 0, ticks, count;
        int kind = round_kind(loop, heap, ready, timers, world, threads, selector, &head);
        if (kind <= 0) {
            if (kind < 0) {
                goto error;
            }
            break;
        }
        if (!int_field(loop, off_l_ticks, &ticks) ||
            !int_field(loop, off_l_instant_count, &count)) {
            break;
        }
        PyObject *now = kind == 1 ? PyTuple_GET_ITEM(PyList_GET_ITEM(heap, 0), 0)
                                  : SLOT(loop, off_l_ticks);
        Py_INCREF(now);
        if (kind == 1 && head > ticks) { /* _vt_set_ticks, inlined */
            /* ``now / TICKS_PER_SECOND``: below 2**53 both convert to doubles exactly, and
               one IEEE division is the correctly rounded quotient Python's int division
               gives; beyond, Python's own. */
            PyObject *seconds = head < (1LL << 53) ? PyFloat_FromDouble((double)head / 1e9)
                                                   : PyNumber_TrueDivide(now, ticks_per_second);
            if (seconds == NULL) {
                Py_DECREF(now);
                goto error;
            }
            set_field(loop, off_l_ticks, now);
            if (raise_now(loop, seconds) < 0) {
                Py_DECREF(seconds);
                Py_DECREF(now);
                goto error;
            }
            Py_DECREF(seconds);
            count = 0;
        }
        PyObject *seconds = field(loop, off_l_now, "_vt_now");
        if (seconds == NULL) {
            Py_DECREF(now);
            goto error;
        }
        PyObject *before = seconds;
        Py_INCREF(seconds);
        Py_ssize_t fired = 0, dead = 0;
        int rc = fire_due(heap, now, &seconds, append, &fired, &dead);
        Py_DECREF(now);
        if (rc == 0 && dead) {
            long long cancelled;
            if (!int_attr(timers, str_cancelled, &cancelled)) {
                PyErr_SetString(PyExc_RuntimeError, "plain_rounds(): timers.cancelled is not an int");
                rc = -1;
            }
            else {
                PyObject *left = PyLong_FromLongLong(cancelled - dead);
                rc = left == NULL ? -1 : PyObject_SetAttr(timers, str_cancelled, left);
                Py_XDECREF(left);
            }
        }
        if (rc == 0 && seconds != before) {
            rc = raise_now(loop, seconds); /* a later float deadline (see call_at) */
        }
        Py_DECREF(seconds);
        if (rc == 0 && fired) {
            long long total;
            rc = int_field(loop, off_l_fired, &total)
                     ? set_int_field(loop, off_l_fired, total + fired)
                     : -1;
        }
        if (rc < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_AttributeError, str_vt_fired);
            }
            goto error;
        }
        count += 1;
        if (set_int_field(loop, off_l_instant_count, count) < 0) {
            goto error;
        }
        if (count > max_count) {
            PyObject *res = PyObject_CallMethodNoArgs(loop, str_vt_runaway);
            if (res == NULL) {
                goto error;
            }
            Py_DECREF(res);
        }
        rounds++;
        Py_ssize_t ntodo = PyObject_Size(ready);
        if (ntodo < 0 || run_ready_n(popleft, ntodo, failed) < 0) {
            goto error;
        }
    }
done:
    if (PyErr_Occurred()) {
        goto error;
    }
    Py_DECREF(dict);
    Py_XDECREF(selector);
    Py_XDECREF(append);
    return PyLong_FromSsize_t(rounds);
error:
    Py_DECREF(dict);
    Py_XDECREF(selector);
    Py_XDECREF(append);
    return NULL;
}

/* ------------------------------------------------------------------------ the jump */

/* Is the first entry of ``queue`` -- a list of tuples that start with a tick: the timer heap,
   the drives -- due at or before ``ticks``?  1 yes, 0 no (or empty), -1 not plain values. */
static int
due_by(PyObject *queue, long long ticks)
{
    long long head;
    if (queue == NULL || !PyList_CheckExact(queue)) {
        return -1;
    }
    if (PyList_GET_SIZE(queue) == 0) {
        return 0;
    }
    PyObject *first = PyList_GET_ITEM(queue, 0);
    if (!PyTuple_CheckExact(first) || PyTuple_GET_SIZE(first) < 1 ||
        !exact_int(PyTuple_GET_ITEM(first, 0), &head)) {
        return -1;
    }
    return head <= ticks;
}

/* jump_to(loop, ticks, task) -> bool */
/* Mirrors: WaitsMixin._vt_jump_to (virtualtime/_engine/_waits.py), with _vt_set_ticks
   (_driving.py) and OutsideWork.calm (_outside.py) inlined; whatever it cannot read as a plain
   C value (a huge tick, a missing task, a world that is not calm at a glance) goes to the
   method itself or to the world's quiet(), as the Python does. */
static PyObject *
jump_to(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "jump_to() takes 3 arguments");
        return NULL;
    }
    PyObject *loop = args[0], *target = args[1], *task = args[2];
    long long ticks, now;
    if (!is_loop(loop) || task == Py_None || !exact_int(target, &ticks) ||
        !exact_int(SLOT(loop, off_l_ticks), &now)) {
        if (jump_fallback == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup_loop() was not called");
            return NULL;
        }
        return PyObject_Vectorcall(jump_fallback, args, 3, NULL);
    }
    PyObject *ready = SLOT(loop, off_l_ready);
    Py_ssize_t pending = ready == NULL ? -1 : PyObject_Size(ready);
    if (pending != 0 || ticks <= now) {
        if (pending < 0 && ready == NULL) {
            PyErr_SetString(PyExc_AttributeError, "_ready");
        }
        if (pending < 0) {
            return NULL;
        }
        Py_RETURN_FALSE;
    }
    /* a timer (live or cancelled) or a drive due at or before the target fires first */
    int due = due_by(SLOT(loop, off_l_heap), ticks);
    if (due == 0) {
        due = due_by(SLOT(loop, off_l_drives), ticks);
    }
    if (due < 0) {
        return PyObject_Vectorcall(jump_fallback, args, 3, NULL);
    }
    if (due) {
        Py_RETURN_FALSE;
    }
    if (SLOT(loop, off_l_plain) != Py_True || SLOT(loop, off_l_stopping) != Py_False) {
        Py_RETURN_FALSE;
    }
    PyObject *world = SLOT(loop, off_l_world);
    long long calm_at, changes;
    if (world == NULL || !Py_IS_TYPE(world, world_type) ||
        !int_slot(world, world_type, off_w_calm_at, str_calm_at, &calm_at) ||
        !int_slot(world, world_type, off_w_changes, str_changes, &changes)) {
        return PyObject_Vectorcall(jump_fallback, args, 3, NULL);
    }
    if (calm_at != changes || PyDict_GET_SIZE(thread_table) != 1) {
        PyObject *quiet = PyObject_CallMethodNoArgs(world, str_quiet);
        if (quiet == NULL) {
            return NULL;
        }
        int yes = PyObject_IsTrue(quiet);
        Py_DECREF(quiet);
        if (yes <= 0) {
            if (yes < 0) {
                return NULL;
            }
            Py_RETURN_FALSE;
        }
    }
    PyObject *cancelling = PyObject_CallMethodNoArgs(task, str_cancelling);
    if (cancelling == NULL) {
        return NULL;
    }
    int busy = PyObject_IsTrue(cancelling);
    Py_DECREF(cancelling);
    if (busy != 0) {
        if (busy < 0) {
            return NULL;
        }
        Py_RETURN_FALSE;
    }
    long long skipped;
    if (!exact_int(SLOT(loop, off_l_skipped), &skipped)) {
        return PyObject_Vectorcall(jump_fallback, args, 3, NULL);
    }
    skipped += 1;
    if (set_int_field(loop, off_l_skipped, skipped) < 0) {
        return NULL;
    }
    if (!(skipped & jump_round_mask)) {
        Py_RETURN_FALSE;
    }
    /* _vt_set_ticks, inlined (see plain_rounds for the division) */
    PyObject *seconds = ticks < (1LL << 53) ? PyFloat_FromDouble((double)ticks / 1e9)
                                            : PyNumber_TrueDivide(target, ticks_per_second);
    if (seconds == NULL) {
        return NULL;
    }
    set_field(loop, off_l_ticks, target);
    int rc = raise_now(loop, seconds);
    Py_DECREF(seconds);
    if (rc < 0 || set_int_field(loop, off_l_instant_count, 0) < 0) {
        return NULL;
    }
    PyObject *beyond_obj = SLOT(loop, off_l_beyond);
    int overflow = 0;
    long long beyond = beyond_obj != NULL && PyLong_CheckExact(beyond_obj)
                           ? PyLong_AsLongLongAndOverflow(beyond_obj, &overflow)
                           : 0;
    if (beyond_obj == NULL || !PyLong_CheckExact(beyond_obj) || overflow < 0 ||
        (overflow == 0 && ticks >= beyond)) {
        /* past a watched horizon (or a horizon we cannot read: the method decides) */
        PyErr_Clear();
        PyObject *res = PyObject_CallMethodNoArgs(loop, str_vt_past_horizon);
        if (res == NULL) {
            return NULL;
        }
        Py_DECREF(res);
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ asyncio.sleep's timer */

static PyObject *timer_cancelled = NULL; /* _timers._CANCELLED: a SleepTimer's result once cancelled */

/* Mirrors: SleepTimer.cancel (virtualtime/_engine/_timers.py), which every asyncio.sleep
   calls as it ends (its ``finally: h.cancel()``): a Python frame per wake-up, saved here. */
static PyObject *
sleeper_cancel(PyObject *self, PyObject *Py_UNUSED(unused))
{
    PyObject *future = SLOT(self, off_s_future);
    if (future != NULL && future != Py_None) { /* still in the heap: its entry is dead now */
        PyObject *queue = SLOT(self, off_s_queue);
        if (queue == NULL) {
            PyErr_SetString(PyExc_AttributeError, "_queue");
            return NULL;
        }
        PyObject *one = PyLong_FromLong(1);
        PyObject *count = one == NULL ? NULL : PyObject_GetAttr(queue, str_cancelled);
        PyObject *more = count == NULL ? NULL : PyNumber_Add(count, one);
        Py_XDECREF(one);
        Py_XDECREF(count);
        if (more == NULL) {
            return NULL;
        }
        SLOT(self, off_s_future) = Py_NewRef(Py_None);
        Py_DECREF(future);
        int rc = PyObject_SetAttr(queue, str_cancelled, more);
        Py_DECREF(more);
        if (rc < 0) {
            return NULL;
        }
    }
    PyObject *old = SLOT(self, off_s_result);
    SLOT(self, off_s_result) = Py_NewRef(timer_cancelled);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyMethodDef sleeper_cancel_def = {
    "cancel", (PyCFunction)sleeper_cancel, METH_NOARGS,
    "Cancel the timer: its future is left alone (as TimerHandle.cancel() leaves it)."};

/* sleep_timer_cancel(cancelled) -> a method of SleepTimer: its cancel(), compiled. */
static PyObject *
sleep_timer_cancel(PyObject *module, PyObject *cancelled)
{
    if (sleeper_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    Py_XSETREF(timer_cancelled, Py_NewRef(cancelled));
    return PyDescr_NewMethod(sleeper_type, &sleeper_cancel_def);
}

/* ---------------------------------------------------------------------------- sleep */

/* sleep(delay, *, priority=0): virtualtime.sleep, compiled.

   It returns a Sleep, an awaitable that behaves as the pure-Python ``PureSleep`` of
   virtualtime/_engine/_control.py does, in C: awaited in a task of a running virtual loop
   that keeps no history, with a finite float or int delay 0 < delay < 1e18 and an int
   priority, it pushes its future straight into the loop's heap -- the entry PureSleep
   pushes -- and yields it, exactly as ``await future`` does.  Anything else (no virtual loop,
   history kept, a zero, infinite or unusual delay, a bad priority) is handed, at the same
   moment, to the coroutine ``_control.general_sleep`` (the reference), which it then drives:
   the same checks, errors and behaviour.  A cancelled sleep's entry is dead, and the
   loop finds it (a waiter's death is never reported: see virtualtime/_engine/_timers.py). */

static PyObject *running_here = NULL; /* virtualtime._engine._running.RUNNING_HERE */

/* What RUNNING_HERE.loop holds in one thread (here_thread), as the loop last told
   note_running(): reading a thread-local's attribute costs two dict lookups on every sleep,
   comparing a thread ident one load.  Every write of RUNNING_HERE.loop tells note_running()
   too (VirtualEventLoop.run_forever, and a forked child); another thread's sleeps read the
   thread-local itself. */
static unsigned long here_thread = 0;
static PyObject *here_loop = NULL; /* strong; NULL: nothing noted */

/* note_running(loop): RUNNING_HERE.loop was just set to ``loop`` (or None) in this thread. */
static PyObject *
note_running(PyObject *module, PyObject *loop)
{
    here_thread = PyThread_get_thread_ident();
    Py_XSETREF(here_loop, Py_NewRef(loop));
    Py_RETURN_NONE;
}

/* Mirrors: ``RUNNING_HERE.loop`` (virtualtime/_engine/_running.py): a new reference. */
static PyObject *
loop_running_here(void)
{
    if (here_loop != NULL && here_thread == PyThread_get_thread_ident()) {
        return Py_NewRef(here_loop);
    }
    return PyObject_GetAttr(running_here, str_loop);
}
static PyObject *py_sleep = NULL;     /* _control.general_sleep, a coroutine function */

typedef struct {
    PyObject_HEAD
    PyObject *delay;
    PyObject *priority;
    PyObject *future; /* the awaited future (fast path), or NULL */
    PyObject *inner;  /* the pure-Python sleep this one drives, or NULL */
    int state;        /* 0 not started, 1 suspended, 2 finished */
} Sleep;

static PyTypeObject Sleep_Type;

static int
sleep_traverse(Sleep *self, visitproc visit, void *arg)
{
    Py_VISIT(self->delay);
    Py_VISIT(self->priority);
    Py_VISIT(self->future);
    Py_VISIT(self->inner);
    return 0;
}

static int
sleep_clear(Sleep *self)
{
    Py_CLEAR(self->delay);
    Py_CLEAR(self->priority);
    Py_CLEAR(self->future);
    Py_CLEAR(self->inner);
    return 0;
}

static void
sleep_dealloc(Sleep *self)
{
    PyObject_GC_UnTrack(self);
    if (self->state == 0 && self->inner == NULL) {
        /* Never awaited (nor closed): warn as CPython does for a coroutine, so a forgotten
           ``await`` before virtualtime.sleep() is as loud compiled as it is pure. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (PyErr_WarnEx(PyExc_RuntimeWarning,
                         "coroutine 'virtualtime.sleep' was never awaited", 1) < 0) {
            PyErr_WriteUnraisable((PyObject *)self);
        }
        PyErr_Restore(type, value, tb);
    }
    sleep_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Mirrors: _control.pure_sleep(delay, *, priority=0) (virtualtime/_engine/_control.py), which
   makes a PureSleep as this makes a Sleep; the priority is checked when the sleep is awaited. */
static PyObject *
sleep_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *priority = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs != 1 || nkw > 1 ||
        (nkw == 1 && PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), str_priority) != 0)) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        PyErr_SetString(PyExc_TypeError,
                        "sleep() takes one positional argument (delay) and the keyword priority");
        return NULL;
    }
    if (py_sleep == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup_sleep() was not called");
        return NULL;
    }
    priority = nkw == 1 ? args[1] : NULL;
    Sleep *self = PyObject_GC_New(Sleep, &Sleep_Type);
    if (self == NULL) {
        return NULL;
    }
    self->delay = Py_NewRef(args[0]);
    self->priority = priority == NULL ? NULL : Py_NewRef(priority);
    self->future = NULL;
    self->inner = NULL;
    self->state = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* The general_sleep coroutine for this sleep's arguments (a new reference). */
/* Mirrors: ``_control.general_sleep(delay, priority=priority)``, the call PureSleep makes
   when its fast path does not apply. */
static PyObject *
make_inner(Sleep *self)
{
    PyObject *args[2] = {self->delay, self->priority};
    if (self->priority == NULL) {
        return PyObject_Vectorcall(py_sleep, args, 1, NULL);
    }
    PyObject *kwnames = PyTuple_Pack(1, str_priority);
    if (kwnames == NULL) {
        return NULL;
    }
    PyObject *res = PyObject_Vectorcall(py_sleep, args, 1, kwnames);
    Py_DECREF(kwnames);
    return res;
}

/* ticks + the ticks of a positive delay (what the pure path computes: ticks + max(1,
   round(delay * 10**9))), a new reference; machine integers when they are small enough. */
/* Mirrors: WaitsMixin._vt_wake_after's tick (_waits.py) for 0 < delay < 1e18. */
static PyObject *
due_ticks(PyObject *ticks, PyObject *delay)
{
    if (PyFloat_CheckExact(delay) && PyLong_CheckExact(ticks)) {
        double scaled = nearbyint(PyFloat_AS_DOUBLE(delay) * 1e9);
        int overflow;
        long long now = PyLong_AsLongLongAndOverflow(ticks, &overflow);
        if (!overflow && !(now == -1 && PyErr_Occurred()) && now >= 0 &&
            now < 4000000000000000000LL && scaled < 4.0e18) {
            return PyLong_FromLongLong(now + (scaled < 1.0 ? 1 : (long long)scaled));
        }
        PyErr_Clear();
    }
    PyObject *step = delay_step(delay);
    if (step == NULL) {
        return NULL;
    }
    PyObject *due = PyNumber_Add(ticks, step);
    Py_DECREF(step);
    return due;
}

/* A new future of ``loop`` in the heap: the entry (ticks + step(delay), priority, next_seq(),
   future) -- what _control's sleeps and the kit's sleep push.  Returns the future (a new
   reference), or NULL with an error set.  ``priority`` NULL means 0. */
/* Mirrors: WaitsMixin._vt_wake_after (_waits.py) on its common path, as _control's sleep
   inlines it: a future of ``loop`` pushed as the heap entry itself. */
static PyObject *
push_waiter(PyObject *loop, PyObject *heap, PyObject *next_seq, PyObject *ticks, PyObject *delay,
            PyObject *priority)
{
    /* Future(loop=loop): with the loop's own {"loop": loop} (_vt_future_kw), the type's call
       takes the keywords as they are, where a call with keyword names first builds that
       dict and then frees it, on every sleep. */
    PyObject *kw = SLOT(loop, off_l_future_kw);
    PyObject *future;
    if (kw != NULL && PyDict_CheckExact(kw)) {
        future = PyObject_Call((PyObject *)waiter_type, empty_tuple, kw);
    }
    else {
        PyObject *fargs[1] = {loop};
        future = PyObject_Vectorcall((PyObject *)waiter_type, fargs, 0, kw_loop);
    }
    if (future == NULL) {
        return NULL;
    }
    PyObject *due = due_ticks(ticks, delay);
    PyObject *seq = due == NULL ? NULL : PyObject_CallNoArgs(next_seq);
    PyObject *entry = seq == NULL ? NULL : PyTuple_New(4);
    int ok = 0;
    if (entry != NULL) {
        PyTuple_SET_ITEM(entry, 0, Py_NewRef(due));
        PyTuple_SET_ITEM(entry, 1, priority == NULL ? PyLong_FromLong(0) : Py_NewRef(priority));
        PyTuple_SET_ITEM(entry, 2, Py_NewRef(seq));
        PyTuple_SET_ITEM(entry, 3, Py_NewRef(future));
        ok = PyTuple_GET_ITEM(entry, 1) != NULL && push(heap, entry) == 0;
    }
    Py_XDECREF(entry);
    Py_XDECREF(seq);
    Py_XDECREF(due);
    if (!ok) {
        Py_DECREF(future);
        return NULL;
    }
    return future;
}

/* Arm the fast path: 1 armed (self->future set), 0 not applicable, -1 error. */
/* Mirrors: the fast-path checks of PureSleep.send (_control.py) -- a virtual loop running
   here, no history, a plain delay and priority -- and the push it then makes. */
static int
arm(Sleep *self)
{
    PyObject *delay_obj = self->delay;
    double delay;
    if (PyFloat_CheckExact(delay_obj)) {
        delay = PyFloat_AS_DOUBLE(delay_obj);
    }
    else if (PyLong_CheckExact(delay_obj)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(delay_obj, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        delay = (double)v;
    }
    else {
        return 0;
    }
    if (!(delay > 0.0 && delay < 1e18)) {
        return 0;
    }
    if (self->priority != NULL && !PyLong_CheckExact(self->priority)) {
        return 0;
    }
    PyObject *loop = loop_running_here();
    if (loop == NULL) {
        return -1;
    }
    if (loop == Py_None) {
        Py_DECREF(loop);
        return 0;
    }
    if (!is_loop(loop)) {
        Py_DECREF(loop);
        return 0;
    }
    /* The loop's own fields, read where they are (nothing about it is kept). */
    PyObject *history = field(loop, off_l_history, "_vt_history");
    PyObject *heap = history == NULL ? NULL : field(loop, off_l_heap, "_vt_heap");
    PyObject *next_seq = heap == NULL ? NULL : field(loop, off_l_seq, "_vt_seq");
    PyObject *ticks = next_seq == NULL ? NULL : field(loop, off_l_ticks, "_vt_ticks");
    if (ticks == NULL) {
        Py_DECREF(loop);
        return -1;
    }
    if (history != Py_None || !PyList_CheckExact(heap)) {
        Py_DECREF(loop);
        return 0; /* a kept history (or something unexpected): general_sleep's way */
    }
    Py_INCREF(heap);
    Py_INCREF(next_seq);
    Py_INCREF(ticks);
    PyObject *future = push_waiter(loop, heap, next_seq, ticks, self->delay, self->priority);
    Py_DECREF(heap);
    Py_DECREF(next_seq);
    Py_DECREF(ticks);
    Py_DECREF(loop);
    if (future == NULL) {
        return -1;
    }
    self->future = future;
    return 1;
}

static void
sleep_finish(Sleep *self)
{
    self->state = 2;
    Py_CLEAR(self->future);
}

/* Mirrors: PureSleep.send (_control.py): arm and yield the future, then return its outcome;
   or drive the general coroutine. */
static PySendResult
sleep_send(Sleep *self, PyObject *arg, PyObject **presult)
{
    *presult = NULL;
    if (self->inner != NULL) {
        PySendResult r = PyIter_Send(self->inner, arg, presult);
        if (r != PYGEN_NEXT) {
            self->state = 2;
            Py_CLEAR(self->inner);
        }
        return r;
    }
    if (self->state == 0) {
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError,
                            "can't send non-None value to a just-started coroutine");
            return PYGEN_ERROR;
        }
        int armed = arm(self);
        if (armed < 0) {
            self->state = 2;
            return PYGEN_ERROR;
        }
        if (armed == 0) {
            self->inner = make_inner(self);
            if (self->inner == NULL) {
                self->state = 2;
                return PYGEN_ERROR;
            }
            self->state = 1;
            return sleep_send(self, arg, presult);
        }
        /* What Future.__await__ does on its first step: mark the future awaited, yield it. */
        if (PyObject_SetAttr(self->future, str_blocking, Py_True) < 0) {
            sleep_finish(self);
            return PYGEN_ERROR;
        }
        self->state = 1;
        *presult = Py_NewRef(self->future);
        return PYGEN_NEXT;
    }
    if (self->state == 2) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    }
    /* Resumed: the future's result (None), or its exception, as ``await future`` ends. */
    PyObject *res = future_outcome(self->future);
    sleep_finish(self);
    if (res == NULL) {
        return PYGEN_ERROR; /* cancelled: its entry is dead, and the loop finds it */
    }
    *presult = res;
    return PYGEN_RETURN;
}

static void
set_stop_iteration(PyObject *value)
{
    if (value == Py_None) {
        PyErr_SetNone(PyExc_StopIteration);
        return;
    }
    PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, value);
    if (exc != NULL) {
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
    }
}

/* A send's outcome as __next__() and send() give it: the value yielded, or NULL with
   StopIteration(value) -- or the send's error -- set. */
static PyObject *
iter_result(PySendResult r, PyObject *result)
{
    if (r == PYGEN_NEXT) {
        return result;
    }
    if (r == PYGEN_RETURN) {
        set_stop_iteration(result);
        Py_DECREF(result);
    }
    return NULL;
}

/* Mirrors: ``next()`` of the iterator PureSleep.__await__ returns (PureSleep.send(None)). */
static PyObject *
sleep_iternext(Sleep *self)
{
    PyObject *result;
    PySendResult r = sleep_send(self, Py_None, &result);
    return iter_result(r, result);
}

/* Mirrors: PureSleep.send (_control.py), as a method. */
static PyObject *
sleep_send_method(Sleep *self, PyObject *arg)
{
    PyObject *result;
    PySendResult r = sleep_send(self, arg, &result);
    return iter_result(r, result);
}

/* throw() passed on to the coroutine or generator a sleep drives; ``*inner`` is cleared when it
   ends (raises). */
static PyObject *
throw_inner(PyObject **inner, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *meth = PyObject_GetAttr(*inner, str_throw);
    if (meth == NULL) {
        return NULL;
    }
    PyObject *res = PyObject_Vectorcall(meth, args, nargs, NULL);
    Py_DECREF(meth);
    if (res == NULL) {
        Py_CLEAR(*inner);
    }
    return res;
}

/* The exception throw(typ[, val[, tb]]) raises, as a generator's throw() builds it (a new
   reference), or NULL with an error set. */
static PyObject *
thrown_exception(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw() takes 1 to 3 arguments");
        return NULL;
    }
    PyObject *typ = args[0];
    PyObject *val = nargs > 1 ? args[1] : NULL;
    PyObject *tb = nargs > 2 ? args[2] : NULL;
    if (tb == Py_None) {
        tb = NULL;
    }
    if (tb != NULL && !PyTraceBack_Check(tb)) {
        PyErr_SetString(PyExc_TypeError, "throw() third argument must be a traceback object");
        return NULL;
    }
    PyObject *exc;
    if (PyExceptionInstance_Check(typ)) {
        if (val != NULL && val != Py_None) {
            PyErr_SetString(PyExc_TypeError, "instance exception may not have a separate value");
            return NULL;
        }
        exc = Py_NewRef(typ);
    }
    else if (PyExceptionClass_Check(typ)) {
        if (val != NULL && PyExceptionInstance_Check(val) &&
            PyObject_IsInstance(val, typ) == 1) {
            exc = Py_NewRef(val);
        }
        else if (val == NULL || val == Py_None) {
            exc = PyObject_CallNoArgs(typ);
        }
        else if (PyTuple_Check(val)) {
            exc = PyObject_Call(typ, val, NULL);
        }
        else {
            exc = PyObject_CallOneArg(typ, val);
        }
        if (exc == NULL) {
            return NULL;
        }
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "exceptions must be classes or instances deriving from BaseException, "
                     "not %s",
                     Py_TYPE(typ)->tp_name);
        return NULL;
    }
    if (tb != NULL && PyException_SetTraceback(exc, tb) < 0) {
        Py_DECREF(exc);
        return NULL;
    }
    return exc;
}

/* Mirrors: PureSleep.throw (_control.py). */
static PyObject *
sleep_throw(Sleep *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->inner != NULL) { /* the driven generator checks its own arguments */
        PyObject *res = throw_inner(&self->inner, args, nargs);
        if (self->inner == NULL) {
            self->state = 2;
        }
        return res;
    }
    PyObject *exc = thrown_exception(args, nargs);
    if (exc == NULL) {
        return NULL;
    }
    sleep_finish(self); /* raised at ``await future``; a cancelled future's entry is dead */
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

/* Mirrors: PureSleep.close (_control.py). */
static PyObject *
sleep_close(Sleep *self, PyObject *unused)
{
    if (self->inner != NULL) {
        PyObject *res = PyObject_CallMethod(self->inner, "close", NULL);
        self->state = 2;
        Py_CLEAR(self->inner);
        return res;
    }
    /* As a coroutine closed at ``await future``: GeneratorExit; the entry is left alive. */
    sleep_finish(self);
    Py_RETURN_NONE;
}

/* Mirrors: PureSleep.__await__ (_control.py): the sleep is its own iterator. */
static PyObject *
sleep_await(Sleep *self)
{
    return Py_NewRef(self);
}

static PyObject *
sleep_get_name(Sleep *self, void *closure)
{
    return PyUnicode_FromString("sleep");
}

/* Mirrors: PureSleep.cr_await (_control.py): what the sleep is suspended on. */
static PyObject *
sleep_get_await(Sleep *self, void *closure)
{
    if (self->inner != NULL) {
        return Py_NewRef(self->inner);
    }
    if (self->state == 1 && self->future != NULL) {
        return Py_NewRef(self->future);
    }
    Py_RETURN_NONE;
}

static PyObject *
sleep_get_running(Sleep *self, void *closure)
{
    Py_RETURN_FALSE;
}

static PyObject *
sleep_get_none(Sleep *self, void *closure)
{
    Py_RETURN_NONE;
}

static PyMethodDef sleep_methods[] = {
    {"send", (PyCFunction)sleep_send_method, METH_O, "send(value): as coroutine.send()"},
    {"throw", (PyCFunction)(void (*)(void))sleep_throw, METH_FASTCALL,
     "throw(exc): as coroutine.throw()"},
    {"close", (PyCFunction)sleep_close, METH_NOARGS, "close(): as coroutine.close()"},
    {NULL},
};

static PyGetSetDef sleep_getset[] = {
    {"__name__", (getter)sleep_get_name, NULL, NULL, NULL},
    {"__qualname__", (getter)sleep_get_name, NULL, NULL, NULL},
    {"cr_await", (getter)sleep_get_await, NULL, "what the sleep waits for", NULL},
    {"cr_running", (getter)sleep_get_running, NULL, NULL, NULL},
    {"cr_frame", (getter)sleep_get_none, NULL, "None: a compiled sleep has no frame", NULL},
    {"cr_code", (getter)sleep_get_none, NULL, NULL, NULL},
    {NULL},
};

static PyAsyncMethods sleep_async = {
    .am_await = (unaryfunc)sleep_await,
    .am_send = (sendfunc)sleep_send,
};

static PyTypeObject Sleep_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.Sleep",
    .tp_basicsize = sizeof(Sleep),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A pending virtualtime.sleep(), compiled: a coroutine (see virtualtime.sleep).",
    .tp_traverse = (traverseproc)sleep_traverse,
    .tp_clear = (inquiry)sleep_clear,
    .tp_dealloc = (destructor)sleep_dealloc,
    .tp_as_async = &sleep_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)sleep_iternext,
    .tp_methods = sleep_methods,
    .tp_getset = sleep_getset,
};

/* setup_sleep(running_here, py_sleep) */
static PyObject *
setup_sleep(PyObject *module, PyObject *args)
{
    PyObject *here, *fallback;
    if (!PyArg_ParseTuple(args, "OO:setup_sleep", &here, &fallback)) {
        return NULL;
    }
    if (waiter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    Py_XSETREF(running_here, Py_NewRef(here));
    Py_XSETREF(py_sleep, Py_NewRef(fallback));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------- kit sleep */

/* KitSleep: the base of the sim kit's sleep (virtualtime.sim._sleep._Sleep, whose
   ``_await_general`` generator is the reference).  Awaiting it gives a KitNap, which does, in
   C, what that generator does in a process of a simulation on the virtual asyncio loop when
   the sleep must suspend: push a future into the loop's heap (the entry sim/_native.wake_after pushes), record
   it as the process's interrupt target, yield it, and on the way out -- SimPy's order -- yield
   while started processes have not run yet.  Everything else (no simulation, trio, a stock
   loop, history kept, an interrupt already pending, a sleep that may move time in place, an
   unusual delay) is handed, at the same moment, to the generator, which the KitNap then
   drives.  An abandoned wait is given back through _sleep._drop_native, as the generator's
   ``except`` does.

   ``_awaited`` is set once the sleep is awaited (here), or begun or abandoned (by _sleep's
   _begin and _abandon): a sleep that goes without it was never used, and its finalizer warns
   as CPython warns about a coroutine never awaited, in the words of _sleep._never_awaited. */

static PyObject *kit_sim_var = NULL;  /* _kit._SIM */
static PyObject *kit_proc_var = NULL; /* _kit._PROC */
static PyObject *kit_drop = NULL;     /* _sleep._drop_native */
static PyObject *str_fast = NULL, *str_native = NULL, *str_env_loop = NULL, *str_pending = NULL,
                *str_target = NULL,
                *str_general = NULL, *str_final = NULL, *str_clock = NULL;

typedef struct {
    PyObject_HEAD
    PyObject *delay;
    PyObject *undo;
    char awaited; /* _awaited (T_BOOL reads and writes a char) */
} KitSleep;

typedef struct {
    PyObject_HEAD
    PyObject *sleep;  /* the KitSleep awaited */
    PyObject *inner;  /* the generator this nap drives (general case), or NULL */
    PyObject *env;    /* the simulation (fast case) */
    PyObject *proc;   /* its process, or NULL outside processes */
    PyObject *future; /* the future in the heap */
    int state;        /* 0 not started, 1 on the future, 2 after it (SimPy's order), 3 done */
} KitNap;

static PyTypeObject KitSleep_Type;
static PyTypeObject KitNap_Type;

static int
kitsleep_traverse(KitSleep *self, visitproc visit, void *arg)
{
    Py_VISIT(self->delay);
    Py_VISIT(self->undo);
    return 0;
}

static int
kitsleep_clear(KitSleep *self)
{
    Py_CLEAR(self->delay);
    Py_CLEAR(self->undo);
    return 0;
}

/* A sleep never awaited, begun nor abandoned: warn (what _sleep._never_awaited says), without
   disturbing an exception on its way -- a sleep is often dropped as one unwinds a frame.  A
   warning turned into an error cannot be raised from here: it is reported as unraisable, as
   CPython reports one about a coroutine never awaited. */
/* Mirrors: _Sleep.__del__ and _never_awaited (virtualtime/sim/_sleep.py). */
static void
kitsleep_finalize(KitSleep *self)
{
    if (self->awaited) {
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "coroutine 'sim.sleep' was never awaited: %R waits only when awaited "
                         "(write 'await sim.sleep(...)')",
                         (PyObject *)self) < 0) {
        PyErr_WriteUnraisable((PyObject *)self);
    }
    PyErr_Restore(type, value, tb);
}

static void
kitsleep_dealloc(KitSleep *self)
{
    /* A subclass's dealloc (subtype_dealloc) has run the finalizer already; a bare KitSleep
       runs it here. */
    if (Py_IS_TYPE(self, &KitSleep_Type) &&
        PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) {
        return; /* resurrected by the warning's machinery */
    }
    PyObject_GC_UnTrack(self);
    kitsleep_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Mirrors: _Sleep.__await__ (virtualtime/sim/_sleep.py): mark it awaited, and return the nap
   that runs _Sleep._await_general's steps. */
static PyObject *
kitsleep_await(KitSleep *self)
{
    self->awaited = 1;
    KitNap *nap = PyObject_GC_New(KitNap, &KitNap_Type);
    if (nap == NULL) {
        return NULL;
    }
    nap->sleep = Py_NewRef(self);
    nap->inner = NULL;
    nap->env = NULL;
    nap->proc = NULL;
    nap->future = NULL;
    nap->state = 0;
    PyObject_GC_Track(nap);
    return (PyObject *)nap;
}

static PyMemberDef kitsleep_members[] = {
    {"_delay", T_OBJECT, offsetof(KitSleep, delay), 0, "the delay asked for"},
    {"_undo", T_OBJECT, offsetof(KitSleep, undo), 0, "what _begin armed, to take back"},
    {"_awaited", T_BOOL, offsetof(KitSleep, awaited), 0,
     "set once awaited, begun or abandoned (unset when it goes: a warning)"},
    {NULL},
};

static PyAsyncMethods kitsleep_async = {
    .am_await = (unaryfunc)kitsleep_await,
};

static PyTypeObject KitSleep_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.KitSleep",
    .tp_basicsize = sizeof(KitSleep),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled base of the sim kit's sleep (see virtualtime.sim._sleep._Sleep).",
    .tp_traverse = (traverseproc)kitsleep_traverse,
    .tp_clear = (inquiry)kitsleep_clear,
    .tp_dealloc = (destructor)kitsleep_dealloc,
    .tp_finalize = (destructor)kitsleep_finalize,
    .tp_as_async = &kitsleep_async,
    .tp_members = kitsleep_members,
    .tp_new = PyType_GenericNew,
};

static int
nap_traverse(KitNap *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sleep);
    Py_VISIT(self->inner);
    Py_VISIT(self->env);
    Py_VISIT(self->proc);
    Py_VISIT(self->future);
    return 0;
}

static int
nap_clear(KitNap *self)
{
    Py_CLEAR(self->sleep);
    Py_CLEAR(self->inner);
    Py_CLEAR(self->env);
    Py_CLEAR(self->proc);
    Py_CLEAR(self->future);
    return 0;
}

static void
nap_dealloc(KitNap *self)
{
    PyObject_GC_UnTrack(self);
    nap_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The truth of obj.name: 1, 0, or -1 with an error. */
static int
attr_true(PyObject *obj, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* Does an entry fall due before ``limit`` (a float), compared exactly as Python compares an
   int with a float?  1 yes, 0 no, -1 cannot tell here (too large). */
/* Mirrors: ``heap and heap[0][0] < limit`` in _Sleep._await_general (virtualtime/sim/_sleep.py). */
static int
due_before(PyObject *heap, double limit)
{
    if (PyList_GET_SIZE(heap) == 0) {
        return 0;
    }
    PyObject *entry = PyList_GET_ITEM(heap, 0);
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 1) {
        return -1;
    }
    int overflow;
    long long head = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(entry, 0), &overflow);
    if (overflow || (head == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    double floor_limit = floor(limit);
    if (!(floor_limit > -9.0e18 && floor_limit < 9.0e18)) {
        return -1;
    }
    long long whole = (long long)floor_limit;
    return floor_limit == limit ? head < whole : head <= whole;
}

/* Arm the fast case: 1 armed (the future pushed and recorded), 0 the general case, -1 error.
   Nothing is changed before every check has passed. */
/* Mirrors: the native branch of _Sleep._await_general (virtualtime/sim/_sleep.py) up to its
   ``yield from future``: the pending interrupt, the push (_fast.wake_after, inlined) and
   ``proc._target = future``. */
static int
nap_arm(KitNap *self)
{
    PyObject *delay_obj = ((KitSleep *)self->sleep)->delay;
    double delay;
    if (delay_obj != NULL && PyFloat_CheckExact(delay_obj)) {
        delay = PyFloat_AS_DOUBLE(delay_obj);
    }
    else if (delay_obj != NULL && PyLong_CheckExact(delay_obj)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(delay_obj, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        delay = (double)v;
    }
    else {
        return 0;
    }
    if (!(delay > 0.0 && delay < 1e18)) {
        return 0;
    }
    PyObject *env = NULL, *proc = NULL, *loop = NULL;
    int rc = -1;
    if (PyContextVar_Get(kit_sim_var, Py_None, &env) < 0) {
        return -1;
    }
    if (env == Py_None) {
        rc = 0;
        goto done;
    }
    int fast = attr_true(env, str_fast);
    int native = fast > 0 ? attr_true(env, str_native) : fast;
    if (native <= 0) {
        rc = native;
        goto done;
    }
    if (PyContextVar_Get(kit_proc_var, Py_None, &proc) < 0) {
        goto done;
    }
    if (proc != Py_None) {
        int pending = attr_true(proc, str_pending);
        if (pending != 0) {
            rc = pending < 0 ? -1 : 0; /* an interrupt to raise first: the generator's way */
            goto done;
        }
    }
    loop = PyObject_GetAttr(env, str_env_loop);
    if (loop == NULL) {
        goto done;
    }
    if (!is_loop(loop)) {
        rc = 0;
        goto done;
    }
    PyObject *history = field(loop, off_l_history, "_vt_history");
    PyObject *heap = history == NULL ? NULL : field(loop, off_l_heap, "_vt_heap");
    PyObject *next_seq = heap == NULL ? NULL : field(loop, off_l_seq, "_vt_seq");
    PyObject *ticks = next_seq == NULL ? NULL : field(loop, off_l_ticks, "_vt_ticks");
    PyObject *ready = ticks == NULL ? NULL : field(loop, off_l_ready, "_ready");
    if (ready == NULL) {
        goto done;
    }
    if (history != Py_None || !PyList_CheckExact(heap) || !PyLong_CheckExact(ticks)) {
        rc = 0;
        goto done;
    }
    /* The generator skips the loop round when nothing is ready and nothing falls due before
       the sleep would end (then jump_by may move time in place): that case is its own.
       asyncio-private: ``_ready`` is the stock loop's deque of ready handles, read here as
       sim/_sleep reads it (tests/test_canaries.py pins it). */
    Py_ssize_t nready = PyObject_Length(ready);
    if (nready < 0) {
        goto done;
    }
    if (nready == 0) {
        int overflow;
        long long now = PyLong_AsLongLongAndOverflow(ticks, &overflow);
        if (overflow || (now == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            rc = 0;
            goto done;
        }
        int before = due_before(heap, ((double)now + delay * 1e9) - 1.0);
        if (before <= 0) {
            rc = 0;
            goto done;
        }
    }
    Py_INCREF(heap);
    Py_INCREF(next_seq);
    Py_INCREF(ticks);
    PyObject *future = push_waiter(loop, heap, next_seq, ticks, delay_obj, NULL);
    Py_DECREF(heap);
    Py_DECREF(next_seq);
    Py_DECREF(ticks);
    if (future == NULL) {
        goto done;
    }
    if (proc != Py_None && PyObject_SetAttr(proc, str_target, future) < 0) {
        Py_DECREF(future);
        goto done;
    }
    self->future = future;
    self->env = Py_NewRef(env);
    self->proc = proc == Py_None ? NULL : Py_NewRef(proc);
    rc = 1;
done:
    Py_XDECREF(loop);
    Py_XDECREF(proc);
    Py_XDECREF(env);
    return rc;
}

/* The wait is over: the process has no interrupt target any more (the generator's finally). */
/* Mirrors: the ``finally: proc._target = None`` of _Sleep._await_general (sim/_sleep.py). */
static int
nap_untarget(KitNap *self)
{
    self->state = 3;
    if (self->proc == NULL) {
        return 0;
    }
    int rc = PyObject_SetAttr(self->proc, str_target, Py_None);
    Py_CLEAR(self->proc);
    return rc;
}

/* The generator's ``except BaseException: _drop_native(future); raise`` and its finally, for
   the exception set now (kept, unless giving the wait back fails). */
/* Mirrors: ``except BaseException: _drop_native(future); raise`` of _Sleep._await_general
   (virtualtime/sim/_sleep.py), then its finally. */
static void
nap_abandon(KitNap *self)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *res = PyObject_CallOneArg(kit_drop, self->future);
    int ok = res != NULL;
    Py_XDECREF(res);
    if (nap_untarget(self) < 0) {
        ok = 0;
    }
    if (ok) {
        PyErr_Restore(type, value, tb);
    }
    else {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
}

/* Mirrors: send() of the generator _Sleep._await_general (virtualtime/sim/_sleep.py): its
   ``yield from future``. */
static PySendResult
nap_send(KitNap *self, PyObject *arg, PyObject **presult)
{
    *presult = NULL;
    if (self->inner != NULL) {
        PySendResult r = PyIter_Send(self->inner, arg, presult);
        if (r != PYGEN_NEXT) {
            self->state = 3;
            Py_CLEAR(self->inner);
        }
        return r;
    }
    if (self->state == 0) {
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started generator");
            return PYGEN_ERROR;
        }
        int armed = nap_arm(self);
        if (armed < 0) {
            self->state = 3;
            return PYGEN_ERROR;
        }
        if (armed == 0) {
            self->inner = PyObject_CallMethodNoArgs(self->sleep, str_general);
            if (self->inner == NULL) {
                self->state = 3;
                return PYGEN_ERROR;
            }
            self->state = 1;
            return nap_send(self, arg, presult);
        }
        /* What Future.__await__ does on its first step: mark the future awaited, yield it
           (asyncio-private: the flag the Task checks; tests/test_canaries.py pins it). */
        if (PyObject_SetAttr(self->future, str_blocking, Py_True) < 0) {
            PyErr_SetString(PyExc_RuntimeError, "sim.sleep: could not mark its future awaited");
            nap_abandon(self);
            return PYGEN_ERROR;
        }
        self->state = 1;
        *presult = Py_NewRef(self->future);
        return PYGEN_NEXT;
    }
    if (self->state == 3) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited sim.sleep");
        return PYGEN_ERROR;
    }
    if (self->state == 1) {
        /* Resumed on the future: its result (None), or the interrupt or cancellation it
           carries, as ``yield from future`` ends. */
        PyObject *res = future_outcome(self->future);
        if (res == NULL) {
            nap_abandon(self);
            return PYGEN_ERROR;
        }
        Py_DECREF(res);
        self->state = 2;
    }
    if (nap_untarget(self) < 0) {
        return PYGEN_ERROR;
    }
    *presult = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

/* Mirrors: ``next()`` of the generator _Sleep._await_general (virtualtime/sim/_sleep.py). */
static PyObject *
nap_iternext(KitNap *self)
{
    PyObject *result;
    PySendResult r = nap_send(self, Py_None, &result);
    return iter_result(r, result);
}

/* Mirrors: send() of the generator _Sleep._await_general (virtualtime/sim/_sleep.py). */
static PyObject *
nap_send_method(KitNap *self, PyObject *arg)
{
    PyObject *result;
    PySendResult r = nap_send(self, arg, &result);
    return iter_result(r, result);
}

/* Mirrors: throw() of the generator _Sleep._await_general (virtualtime/sim/_sleep.py). */
static PyObject *
nap_throw(KitNap *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->inner != NULL) { /* the driven generator checks its own arguments */
        PyObject *res = throw_inner(&self->inner, args, nargs);
        if (self->inner == NULL) {
            self->state = 3;
        }
        return res;
    }
    PyObject *exc = thrown_exception(args, nargs);
    if (exc == NULL) {
        return NULL;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    if (self->state == 1 || self->state == 2) {
        nap_abandon(self);
    }
    self->state = 3;
    return NULL;
}

/* Mirrors: close() of the generator _Sleep._await_general (virtualtime/sim/_sleep.py). */
static PyObject *
nap_close(KitNap *self, PyObject *unused)
{
    if (self->inner != NULL) {
        PyObject *res = PyObject_CallMethodNoArgs(self->inner, str_close);
        self->state = 3;
        Py_CLEAR(self->inner);
        return res;
    }
    if (self->state == 1 || self->state == 2) {
        /* GeneratorExit at the generator's yield: its except gives the wait back. */
        PyObject *res = PyObject_CallOneArg(kit_drop, self->future);
        if (nap_untarget(self) < 0 || res == NULL) {
            Py_XDECREF(res);
            return NULL;
        }
        Py_DECREF(res);
    }
    self->state = 3;
    Py_RETURN_NONE;
}

static PyMethodDef nap_methods[] = {
    {"send", (PyCFunction)nap_send_method, METH_O, "send(value): as generator.send()"},
    {"throw", (PyCFunction)(void (*)(void))nap_throw, METH_FASTCALL,
     "throw(exc): as generator.throw()"},
    {"close", (PyCFunction)nap_close, METH_NOARGS, "close(): as generator.close()"},
    {NULL},
};

static PyAsyncMethods nap_async = {
    .am_send = (sendfunc)nap_send,
};

static PyTypeObject KitNap_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "virtualtime._engine._cwake.KitNap",
    .tp_basicsize = sizeof(KitNap),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An awaited sim.sleep(), compiled (see KitSleep).",
    .tp_traverse = (traverseproc)nap_traverse,
    .tp_clear = (inquiry)nap_clear,
    .tp_dealloc = (destructor)nap_dealloc,
    .tp_as_async = &nap_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)nap_iternext,
    .tp_methods = nap_methods,
};

/* kit_sleep(delay, value=None): sim.sleep, compiled -- a new _Sleep for a delay that is an
   exact float >= 0 or an int from 0 to 2**63 - 1, with no value (or None), made without a
   Python frame; anything else (a value, keywords, a delay to check, an int that may be too
   large for a float) goes to the pure-Python sim.sleep, which makes it or raises as always. */
static PyTypeObject *kit_sleep_type = NULL; /* _sleep._Sleep */
static PyObject *kit_sleep_py = NULL;       /* the pure-Python sim.sleep */
/* How many order="simpy" simulations are running (in any thread): while one is, every sleep
   is made by the pure-Python sim.sleep, which starts a SimPy timeout when it is made. */
static Py_ssize_t kit_exact = 0;
static PyObject *kit_now_py = NULL;         /* the pure-Python sim.now */

static PyObject *
kit_sleep(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int plain = 0;
    PyObject *delay = nargs > 0 ? args[0] : NULL;
    if ((nargs == 1 || (nargs == 2 && args[1] == Py_None)) &&
        (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0)) {
        if (PyFloat_CheckExact(delay)) {
            plain = PyFloat_AS_DOUBLE(delay) >= 0.0; /* NaN is not */
        }
        else if (PyLong_CheckExact(delay)) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(delay, &overflow);
            if (v == -1 && PyErr_Occurred()) {
                return NULL;
            }
            plain = overflow == 0 && v >= 0;
        }
    }
    if (!plain || kit_sleep_type == NULL || kit_exact > 0) {
        if (kit_sleep_py == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup_kit() was not called");
            return NULL;
        }
        return PyObject_Vectorcall(kit_sleep_py, args, (size_t)nargs, kwnames);
    }
    KitSleep *nap = (KitSleep *)kit_sleep_type->tp_alloc(kit_sleep_type, 0);
    if (nap == NULL) {
        return NULL;
    }
    nap->delay = Py_NewRef(delay);
    nap->undo = NULL; /* reads as None */
    return (PyObject *)nap;
}

/* kit_now(): sim.now, compiled -- the current simulation's time, read as the pure function
   reads it; outside a simulation the pure function says why there is none. */
static PyObject *
kit_now(PyObject *module, PyObject *unused)
{
    PyObject *env;
    if (PyContextVar_Get(kit_sim_var, Py_None, &env) < 0) {
        return NULL;
    }
    if (env == Py_None) {
        Py_DECREF(env);
        return PyObject_CallNoArgs(kit_now_py);
    }
    PyObject *final = PyObject_GetAttr(env, str_final);
    if (final == NULL || final != Py_None) {
        Py_DECREF(env);
        return final;
    }
    Py_DECREF(final);
    PyObject *clock = PyObject_GetAttr(env, str_clock);
    Py_DECREF(env);
    if (clock == NULL) {
        return NULL;
    }
    PyObject *res = PyObject_CallNoArgs(clock);
    Py_DECREF(clock);
    return res;
}

/* kit_exact_runs(delta): count order="simpy" simulations starting (+1) and ending (-1). */
static PyObject *
kit_exact_runs(PyObject *module, PyObject *arg)
{
    Py_ssize_t delta = PyLong_AsSsize_t(arg);
    if (delta == -1 && PyErr_Occurred()) {
        return NULL;
    }
    kit_exact += delta;
    if (kit_exact < 0) {
        kit_exact = 0;
    }
    return PyLong_FromSsize_t(kit_exact);
}

/* setup_kit(sim_var, proc_var, drop_native, sleep_type, py_sleep, py_now) */
static PyObject *
setup_kit(PyObject *module, PyObject *args)
{
    PyObject *sim_var, *proc_var, *drop, *sleep_type, *py_sleep_fn, *py_now_fn;
    if (!PyArg_ParseTuple(args, "O!O!OO!OO:setup_kit", &PyContextVar_Type, &sim_var,
                          &PyContextVar_Type, &proc_var, &drop, &PyType_Type, &sleep_type,
                          &py_sleep_fn, &py_now_fn)) {
        return NULL;
    }
    if (waiter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "virtualtime._engine._cwake: setup() was not called");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)sleep_type, &KitSleep_Type)) {
        PyErr_SetString(PyExc_TypeError, "setup_kit(): sleep_type must subclass KitSleep");
        return NULL;
    }
    Py_XSETREF(kit_sim_var, Py_NewRef(sim_var));
    Py_XSETREF(kit_proc_var, Py_NewRef(proc_var));
    Py_XSETREF(kit_drop, Py_NewRef(drop));
    Py_XSETREF(kit_sleep_type, (PyTypeObject *)Py_NewRef(sleep_type));
    Py_XSETREF(kit_sleep_py, Py_NewRef(py_sleep_fn));
    Py_XSETREF(kit_now_py, Py_NewRef(py_now_fn));
    Py_RETURN_NONE;
}

/* setup_loop(loop_type, queue_type, world_type): the offsets of the slotted fields of the
   virtual loop, its timer queue and its outside-work model. */
static PyObject *
setup_loop(PyObject *module, PyObject *args)
{
    PyObject *arg, *queue, *world, *fallback, *threads;
    long long every;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!L:setup_loop", &PyType_Type, &arg, &PyType_Type,
                          &queue, &PyType_Type, &world, &fallback, &PyDict_Type, &threads,
                          &every)) {
        return NULL;
    }
    if (every < 1 || (every & (every - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "setup_loop(): the jump round is not a power of two");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)arg;
    if (slot_offset((PyTypeObject *)queue, "cancelled", &off_q_cancelled) < 0 ||
        slot_offset((PyTypeObject *)queue, "scan_at", &off_q_scan_at) < 0 ||
        slot_offset((PyTypeObject *)world, "calm_at", &off_w_calm_at) < 0 ||
        slot_offset((PyTypeObject *)world, "changes", &off_w_changes) < 0 ||
        slot_offset(type, "_vt_ticks", &off_l_ticks) < 0 ||
        slot_offset(type, "_vt_now", &off_l_now) < 0 ||
        slot_offset(type, "_vt_plain", &off_l_plain) < 0 ||
        slot_offset(type, "_stopping", &off_l_stopping) < 0 ||
        slot_offset(type, "_vt_rearmed", &off_l_rearmed) < 0 ||
        slot_offset(type, "_vt_drives", &off_l_drives) < 0 ||
        slot_offset(type, "_vt_beyond", &off_l_beyond) < 0 ||
        slot_offset(type, "_vt_instant_count", &off_l_instant_count) < 0 ||
        slot_offset(type, "_vt_fired", &off_l_fired) < 0 ||
        slot_offset(type, "_vt_heap", &off_l_heap) < 0 ||
        slot_offset(type, "_vt_seq", &off_l_seq) < 0 ||
        slot_offset(type, "_vt_history", &off_l_history) < 0 ||
        slot_offset(type, "_vt_future_kw", &off_l_future_kw) < 0 ||
        slot_offset(type, "_debug", &off_l_debug) < 0 ||
        slot_offset(type, "_closed", &off_l_closed) < 0 ||
        slot_offset(type, "_ready", &off_l_ready) < 0 ||
        slot_offset(type, "_vt_world", &off_l_world) < 0 ||
        slot_offset(type, "_vt_skipped", &off_l_skipped) < 0) {
        return NULL;
    }
    jump_round_mask = every - 1;
    Py_XSETREF(jump_fallback, Py_NewRef(fallback));
    Py_XSETREF(thread_table, Py_NewRef(threads));
    Py_XSETREF(queue_type, (PyTypeObject *)Py_NewRef(queue));
    Py_XSETREF(world_type, (PyTypeObject *)Py_NewRef(world));
    Py_XSETREF(loop_type, (PyTypeObject *)Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup_loop", (PyCFunction)setup_loop, METH_VARARGS,
     "setup_loop(loop_type, queue_type, world_type, jump_to, threads, jump_round_every): "
     "where the slotted fields are"},
    {"jump_to", (PyCFunction)(void (*)(void))jump_to, METH_FASTCALL,
     "jump_to(loop, ticks, task) -> bool: loop._vt_jump_to(ticks, task), compiled"},
    {"setup", (PyCFunction)setup, METH_VARARGS,
     "setup(waiter_type, timer_type, soon_type, waker_a, waker_b, invalid_state_error, "
     "wake_context)"},
    {"push_after", (PyCFunction)(void (*)(void))push_after, METH_FASTCALL,
     "push_after(heap, next_seq, ticks, delay, priority, item) -> seq"},
    {"fire", (PyCFunction)(void (*)(void))fire, METH_FASTCALL,
     "fire(heap, now, seconds, ready_append) -> (fired, dead, seconds)"},
    {"run_ready", (PyCFunction)(void (*)(void))run_ready, METH_FASTCALL,
     "run_ready(popleft, ntodo, failed) -> None"},
    {"sleep_timer_cancel", (PyCFunction)sleep_timer_cancel, METH_O,
     "sleep_timer_cancel(cancelled) -> SleepTimer.cancel, compiled (a method descriptor)"},
    {"plain_rounds", (PyCFunction)(void (*)(void))plain_rounds, METH_FASTCALL,
     "plain_rounds(loop, heap, ready, timers, world, threads, popleft, failed) -> rounds"},
    {"setup_sleep", (PyCFunction)setup_sleep, METH_VARARGS, "setup_sleep(running_here, py_sleep)"},
    {"note_running", (PyCFunction)note_running, METH_O,
     "note_running(loop): RUNNING_HERE.loop was just set to loop in this thread"},
    {"kit_exact_runs", (PyCFunction)kit_exact_runs, METH_O,
     "kit_exact_runs(delta) -> running order='simpy' simulations"},
    {"setup_kit", (PyCFunction)setup_kit, METH_VARARGS,
     "setup_kit(sim_var, proc_var, drop_native, sleep_type, py_sleep, py_now)"},
    {"kit_sleep", (PyCFunction)(void (*)(void))kit_sleep, METH_FASTCALL | METH_KEYWORDS,
     "sleep(delay, value=None)\n--\n\nsim.sleep, compiled (see virtualtime.sim.sleep)."},
    {"kit_now", (PyCFunction)kit_now, METH_NOARGS,
     "now()\n--\n\nsim.now, compiled (see virtualtime.sim.now)."},
    {"sleep", (PyCFunction)(void (*)(void))sleep_call, METH_FASTCALL | METH_KEYWORDS,
     "sleep(delay, *, priority=0)\n--\n\n"
     "virtualtime.sleep, compiled: sleep ``delay`` virtual seconds; at one instant smaller\n"
     "``priority`` wakes first (see virtualtime._engine._control.sleep)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "virtualtime._engine._cwake",
    "Optional compiled core of the virtual loop (see virtualtime._engine._loop).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cwake(void)
{
    if (PyType_Ready(&SoonCaller_Type) < 0 || PyType_Ready(&Sleep_Type) < 0 ||
        PyType_Ready(&DebugFlag_Type) < 0 || PyType_Ready(&LaterCaller_Type) < 0 ||
        PyType_Ready(&KitSleep_Type) < 0 || PyType_Ready(&KitNap_Type) < 0) {
        return NULL;
    }
    str_done = PyUnicode_InternFromString("done");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_run = PyUnicode_InternFromString("_run");
    str_debug = PyUnicode_InternFromString("_debug");
    str_closed = PyUnicode_InternFromString("_closed");
    str_loop = PyUnicode_InternFromString("loop");
    str_vt_heap = PyUnicode_InternFromString("_vt_heap");
    str_vt_seq = PyUnicode_InternFromString("_vt_seq");
    str_vt_history = PyUnicode_InternFromString("_vt_history");
    str_blocking = PyUnicode_InternFromString("_asyncio_future_blocking");
    str_result = PyUnicode_InternFromString("result");
    str_priority = PyUnicode_InternFromString("priority");
    str_fast = PyUnicode_InternFromString("_fast");
    str_native = PyUnicode_InternFromString("_native");
    str_env_loop = PyUnicode_InternFromString("_loop");
    str_pending = PyUnicode_InternFromString("_pending");
    str_target = PyUnicode_InternFromString("_target");
    str_quiet = PyUnicode_InternFromString("quiet");
    str_cancelling = PyUnicode_InternFromString("cancelling");
    str_vt_past_horizon = PyUnicode_InternFromString("_vt_past_horizon");
    str_general = PyUnicode_InternFromString("_await_general");
    str_throw = PyUnicode_InternFromString("throw");
    str_close = PyUnicode_InternFromString("close");
    str_final = PyUnicode_InternFromString("_final");
    str_clock = PyUnicode_InternFromString("_clock");
    str_vt_max_instant = PyUnicode_InternFromString("_vt_max_instant");
    str_vt_fired = PyUnicode_InternFromString("_vt_fired");
    str_cancelled = PyUnicode_InternFromString("cancelled");
    str_calm_at = PyUnicode_InternFromString("calm_at");
    str_changes = PyUnicode_InternFromString("changes");
    str_vt_runaway = PyUnicode_InternFromString("_vt_runaway");
    str_vt_selector = PyUnicode_InternFromString("_vt_selector");
    str_registered = PyUnicode_InternFromString("registered");
    str_scan_at = PyUnicode_InternFromString("scan_at");
    if (!str_done || !str_set_result || !str_run || !str_debug || !str_closed || !str_loop ||
        !str_vt_heap || !str_vt_seq || !str_vt_history || !str_blocking ||
        !str_result || !str_priority || !str_fast ||
        !str_native || !str_env_loop || !str_pending || !str_target || !str_quiet || !str_cancelling ||
        !str_vt_past_horizon ||
        !str_general || !str_throw || !str_close || !str_final ||
        !str_clock || !str_vt_max_instant ||
        !str_vt_fired || !str_cancelled || !str_calm_at || !str_changes || !str_vt_runaway ||
        !str_vt_selector || !str_registered || !str_scan_at) {
        return NULL;
    }
    kw_loop = PyTuple_Pack(1, str_loop);
    empty_tuple = PyTuple_New(0);
    ticks_per_second = PyLong_FromLong(1000000000L);
    if (kw_loop == NULL || empty_tuple == NULL || ticks_per_second == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "SoonCaller", (PyObject *)&SoonCaller_Type) < 0 ||
        PyModule_AddObjectRef(module, "Sleep", (PyObject *)&Sleep_Type) < 0 ||
        PyModule_AddObjectRef(module, "DebugFlag", (PyObject *)&DebugFlag_Type) < 0 ||
        PyModule_AddObjectRef(module, "LaterCaller", (PyObject *)&LaterCaller_Type) < 0 ||
        PyModule_AddObjectRef(module, "KitSleep", (PyObject *)&KitSleep_Type) < 0 ||
        /* kit_sleep takes ``value`` itself, and KitSleep marks and warns (see _kit). */
        PyModule_AddIntConstant(module, "KIT_SLEEP_VALUE", 1) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
