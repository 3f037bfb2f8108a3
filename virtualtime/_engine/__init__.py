"""The engine on asyncio: the virtual event loop and what it is made of.

Where to start: ``_loop`` holds :class:`VirtualEventLoop` (its options and every public
method; its module docstring says how the loop decides what happens next).  The loop's
private machinery is one mixin module per concern, stacked on ``_fields`` (the fields they
share): ``_history`` (the records a loop with history keeps), ``_driving`` (the clock's
setter, drives), ``_waits`` (the native wait and the in-place jump of the sim kit),
``_reports`` (deadlock and runaway reports), ``_idle`` (waiting for the outside world) and
``_cycle`` (one round of the loop: the hot path).  Beside them: ``_handles`` (lean handles,
numbered tasks, the wakers), ``_timers`` (the timer queue), ``_checks`` (time arguments and
the horizon), ``_compiled`` (loading the C core, ``_cwake.c``, which mirrors the hot path),
``_running`` (the loop running in this thread).

Outside work -- what the world outside the loop may still deliver -- is modelled in
``_outside``, which reads the world through ``_sockets``, ``_thread_jobs``, ``_children``,
``_foreign`` (gRPC calls in flight) and ``_allowances``.  The entry points are ``_runner``
(``new_event_loop``/``run``) and ``_policy`` (the legacy policy); ``_control`` holds the
driving verbs used from a task (``step``, ``evolve``, ``sleep``...) and ``_anyio_sleep``
routes anyio's sleep to them.  It may use ``_shared``, ``_clocks`` and ``_options``; see
tests/test_layout.py for the rule.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""
