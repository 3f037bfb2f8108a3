"""What every part shares, below both backends.

Time and errors: ``_time`` (ticks, exact time arithmetic, the checks of time arguments),
``_units`` (durations for people), ``_errors`` (the error family).  What the machine says:
``_machine`` (a package: threads, processes, sockets and their peers, read from ``/proc``,
netlink and ``TCP_INFO``), ``_threads`` (the process's other threads as the models of outside
work see them), ``_peers`` (whether a connection's other end may still answer) and ``_awaits``
(following a task's awaits, for both backends' looks at what a task waits for).  The contract
between the backends: ``_drivers``, the registry through which the driving verbs reach a
virtual clock that is not asyncio's.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""
