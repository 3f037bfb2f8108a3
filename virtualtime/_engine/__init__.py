"""The engine on asyncio: the virtual event loop and what it is made of.

``_loop`` (the loop: when time moves, the run loop, deadlock reports), ``_timers``
(the timer queue), ``_outside`` (work outside the loop: threads, processes, I/O),
``_runner`` (``new_event_loop``/``run``), ``_policy`` (the legacy policy) and
``_control`` (the driving verbs used from a task: ``step``, ``evolve``, ``sleep``...).
It may use ``_shared`` and ``_clocks``; see tests/test_layout.py for the rule.
"""
