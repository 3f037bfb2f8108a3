"""Tracing: what happened when, as a Chrome trace and a timeline picture.

When to use this
----------------
``virtualtime run --trace out.json script.py`` writes a trace of the whole run; open it in
https://ui.perfetto.dev (or ``chrome://tracing``), or draw it with
``virtualtime plot out.json -o timeline.png``.  From Python, build one from any loop that kept
history (``virtualtime.new_event_loop(history=100_000)``) with :func:`chrome_trace` and
:func:`write_trace`, and draw it with :func:`plot_trace`.

How the history becomes rows and spans
--------------------------------------
The loop's history (:class:`~virtualtime.HistoryRecord`) lists every timer it dispatched: the
instant it was scheduled, the instant it fired and what it woke.  A timer that woke a task (its
``kind`` is :attr:`RecordKind.TASK`: an ``asyncio.sleep``, anyio's ``sleep``, a
``virtualtime.sleep``) is a stretch that task spent **asleep**, drawn as a ``sleep`` span on
the task's row from ``scheduled`` to ``time``.  Running takes no virtual time (the clock only
moves from timer to timer), so a stretch of virtual time between a task waking up and its next
timed sleep is time it spent **waiting** on something that is not a timer -- a queue, a lock,
an event, another task, real I/O: that stretch is a ``waiting`` span.  The moment a task runs is
the tick drawn where a sleep ends.  A timer whose callback is not a task wake-up (a
``call_later`` callback, the expiry of ``asyncio.timeout``) is an instant event on the
``timers`` row.  Sleeps that were cancelled before they fired never reach the history, so a task
whose sleep was cut short by a timeout shows that stretch as waiting.

A loop that keeps history also keeps the tasks it made (``loop.task_history``: each
:class:`TaskRecord` says when a task was created and when it ended).  Given those, each task's
row spans its whole life: ``waiting`` from its creation to its first sleep and from its last
sleep to its end, so a task that never sleeps on a timer -- a dispatcher that only waits on a
queue -- is one ``waiting`` span, as long as it lived (a task that ended at the instant it began
has nothing to draw).  Each task keeps one lane of its row for its whole life.  trio keeps no
timer history: ``virtualtime run --trace`` draws each trio task's life as one ``alive`` span.

Other layers add their own spans through :func:`record_span`, and describe their span
categories (colour, legend, how they are drawn) with :func:`register_category`: the
simulation toolkit reports each vehicle journey there, with its outcome, and registers the
outcomes as categories.  A category can ask for the stretch after each of its spans to be
drawn too (:attr:`Category.until_next`): a journey that ended ``halted`` leaves its vehicle
standing until its next journey begins, or until the run ends, and that stretch becomes a
``stopped`` span of its own, so a breakdown shows as long as it lasted.  The trace keeps the
style of every category it uses (``otherData.categories``), so a file plots the same in a
process that never imported the layer that wrote it.  Spans that share a row never overlap: a row
whose spans would overlap (two tasks with the same name) is split into lanes
(``"worker (2)"``).  When history records carry a ``task_id``, a gap between the spans of two
different tasks that share a name is left empty rather than drawn as waiting; without it, tasks
that share a name one after another (anyio names tasks after their function) look like one
task that waited in between.

Who records
-----------
The active :class:`TraceRecorder` lives in a :class:`contextvars.ContextVar`: entering one
makes it active in the current context, and so in every task started from there and in
``asyncio.to_thread`` workers (which copy the context).  A thread started directly with
:class:`threading.Thread` begins with a fresh context and records nothing unless its target
runs under :meth:`contextvars.Context.run` of a copied context.

Units and layout
----------------
Trace time is virtual time: one virtual second is 1,000,000 trace microseconds, so Perfetto's
time axis reads in virtual seconds.  Each loop (each ``asyncio.run``) is a trace *process*
(``pid``) and each row a *thread* (``tid``), numbered in order of the row's first span;
``tid`` 0 of every process is the ``timers`` row, sorted last.  Events are sorted by row and
then by time.

Where the code lives
--------------------
``_record`` holds the recorder and :func:`record_span`; ``_chrome`` builds, writes and reads
Chrome traces; ``_categories`` holds :class:`Category` and the registry; ``_plot`` draws the
picture with :func:`plot_trace` (matplotlib is imported only when it is called); ``_text``
shortens the values quoted in messages and span names.  Each imports only the ones before it
in the order ``_text``, ``_categories``, ``_chrome``, ``_record`` / ``_plot``.

Part of ``trace``: may import ``shared``, ``engine`` (see tests/layout.py).
"""

from __future__ import annotations

from .._engine._history import RecordKind, TaskRecord
from ._categories import Category, categories, register_category
from ._chrome import MICROSECONDS, TIMERS_ROW, Span, chrome_trace, load_trace, write_trace
from ._plot import NoSuchRows, plot_trace
from ._record import TraceRecorder, record_span, recording

__all__ = [
    "MICROSECONDS",
    "TIMERS_ROW",
    "Category",
    "NoSuchRows",
    "RecordKind",
    "Span",
    "TaskRecord",
    "TraceRecorder",
    "categories",
    "chrome_trace",
    "load_trace",
    "plot_trace",
    "record_span",
    "recording",
    "register_category",
    "write_trace",
]
