"""Virtual time for trio: :class:`VirtualClock`, a clock you hand to ``trio.run``.

``trio.run(main, clock=virtualtime.trio.VirtualClock())`` makes ``trio.sleep(3600)`` return at
once with ``trio.current_time()`` advanced by exactly 3600; :func:`run` does the same and turns
a deadlock into :class:`~virtualtime.DeadlockError`.  This is the only package of virtualtime
that imports trio; ``import virtualtime`` never loads it.

Why trio needs its own clock
----------------------------
trio already ships a virtual clock, ``trio.testing.MockClock(autojump_threshold=0)``, but the
part that makes it jump is private: the run loop reads a hidden runner attribute and calls a
private ``MockClock._autojump()`` method, so a third-party clock cannot reuse it (trio issues
#1587 and #3369, PR #3371).  MockClock also lets a virtual timeout overtake a worker thread
(trio #456), spins a core when every task is blocked for ever, and drifts because it adds
floats.  :class:`VirtualClock` is built only on trio's public interfaces:

* ``trio.abc.Clock.deadline_to_sleep_time`` is called by the run loop exactly when no task is
  runnable, with the next deadline.  With nothing outside the run to wait for, the clock
  answers 0: trio polls I/O *without blocking*, and a small ``trio.abc.Instrument`` jumps the
  clock to that deadline in ``after_io_wait`` if the poll woke nobody -- so every jump comes
  after trio has looked at I/O, and the deadline expires in the same turn of the loop.  No
  wake-up socket, no extra turn (MockClock needs two turns per jump).
* The instrument's ``task_scheduled`` hook (a bare ``list.append``) records every task that
  becomes runnable.  At the next idle question the clock reads what each of those tasks now
  waits for from its chain of awaited coroutines (public ``Task.coro``; ``cr_await``): a
  ``trio.testing.wait_all_tasks_blocked`` call, a ``trio.to_thread.run_sync`` job, or a
  ``trio.lowlevel.wait_readable``/``wait_writable`` on some descriptor.  A task's wait can only
  change when it runs, so this sees every change at a cost per task that ran.  (The
  instrument is installed at the run's first idle question, which reads every task once
  instead: a run that never waits pays for none of its calls.)
* A task in ``wait_all_tasks_blocked`` goes before any jump: the clock then answers with a
  long *probe* instead of 0; trio lowers the wait to that task's cushion and wakes it, and the
  clock leaves time alone (with ``autojump_threshold > 0`` the probe is the threshold, and the
  clock jumps only after that much real quiet).

The outside world
-----------------
Virtual time must never overtake something outside the run that may still answer.  The clock
asks the same model as the asyncio loop, read from the machine where it can be (see
``docs/loop.md``, "When may time jump?"):

* **thread jobs**: a worker thread running a ``trio.to_thread.run_sync`` job (anyio's
  ``to_thread`` too); a job blocked calling back into trio with ``from_thread`` does not
  count, only trio can move it;
* **threads that call into the run** -- ``trio.from_thread``, anyio's ``BlockingPortal``,
  ``TrioToken.run_sync_soon`` from another thread -- while the kernel says that thread works
  (:class:`~virtualtime._shared._threads.Speakers`): it may be about to cancel what it just
  started.  The clock hears such calls on the run's entry queue
  (:func:`~virtualtime.trio._instruments.listen_to`).  A plain thread that started during the
  run holds time for its first 50 ms (a blocking client about to connect to the run's server:
  a listening socket is not outside work);
* **children** still running (trio waits on their pidfd), pipes to them, connects in flight,
  connected datagram sockets;
* **connections to peers outside the run** (TCP, and Unix stream sockets to other processes):
  :class:`~virtualtime._shared._peers.Connections` decides -- bytes in flight, the peer
  working, an answer it still owes us (we are the client unless a listener of this run
  accepted the connection); data that wakes a reader is noted as an answer before the reader
  runs, and acknowledged at once (``TCP_QUICKACK``).

Not outside work: sockets whose both ends are in this run (an in-process server and its client
-- the peer's address is one this run's own sockets have), listening sockets, pipes with both
ends in this process, trio's wake-up socket, and an *idle* connection (answered, the peer
asleep).  A wait is read from the task's chain of awaits, through async generators too (a body
read inside ``async for``).

While outside work is pending, time does not jump: it stands still, and a deadline fires only
once as much real time has passed as its virtual delay, then time steps to exactly that
deadline.  So a real answer never loses to a virtual timeout, quick answers arrive at the same
virtual instant on every machine, and a peer that never answers still times out after about
its real timeout.  The real-time count restarts whenever the run makes progress (any task
runs, except a reader going back to the same outside wait under the same timeouts), since that
step may have set the timer now due: trio does not say which deadline is whose, so this stands
for the asyncio loop's allowance per timer -- never early, possibly late while other tasks keep
making progress.  ``autojump_threshold`` remains for what the model cannot see, such as a
socket pair handed to a plain thread.

Exact time
----------
Time is kept as integer nanoseconds (:mod:`virtualtime._shared._time`), so ten ``trio.sleep(0.1)``
end at exactly ``1.0`` (MockClock: ``0.9999999999999999``).  trio, though, hands the clock
absolute float deadlines computed as ``now + delay``, and such a sum can land a few ulps above
the instant it means (``0.2 + 0.1`` is ``0.30000000000000004``).  The clock recovers the delay
as ``deadline - now``, rounds it to the nearest tick and carries the remainder to the next
delay (so long runs of ``sleep(1/3)`` drift neither up nor down), and reports the larger of
its ticks and the deadline that fired: trio's expiry check and anyio's ``fail_after`` (which
re-checks ``current_time() >= deadline``) both need the reported time to reach the deadline.
What is left is the float error of trio's own ``now + delay`` sums, the same as MockClock's:
about 5e-8 s after 10,000 sleeps from one day, 1.5e-5 s after 10,000 ``sleep(0.1)`` from one
year, and a second after 1,000 sleeps at a million years (floats are 4 ms apart there).  (The
asyncio loop receives relative delays and has no such error.)  A positive delay shorter than a
tick still advances one tick; time never freezes and never goes backwards.

Deadlocks
---------
When no task can run, no deadline is pending (or, with ``autojump=False``, nobody is left to
move time), no outside work is pending, no task waits on a file descriptor and no task waits
in ``wait_all_tasks_blocked``, nothing can happen again unless another thread or a signal
wakes trio.  The clock waits ``deadlock_timeout`` real seconds for that, never spinning.  (A
program that only waits for a signal looks exactly like this: give it a long
``deadlock_timeout``.)  Under :func:`run` (and :func:`virtualtime.anyio_run`, and the pytest
plugin) it then lifts the shields of the cancel scopes the blocked tasks wait in (public
``CancelScope.shield``), cancels the main function and raises
:class:`~virtualtime.DeadlockError` listing every blocked task and where it waits, in the
asyncio loop's format -- from shielded scopes, nested nurseries and ``from_thread`` calls
alike.  Under a plain ``trio.run(..., clock=VirtualClock())`` there is no public way for a
clock to make the main task raise an exception of its choosing -- trio only offers
cancellation, which would surface as a bare ``trio.Cancelled`` -- so the clock then just
sleeps (no CPU) until something outside wakes trio, exactly as trio does with its real clock.

Kit waits
---------
The simulation toolkit (``virtualtime.sim``: ``Timer``, vehicles) sleeps on this clock without
a cancel scope: the task parks (``trio.lowlevel.wait_task_rescheduled``) in a heap the clock
owns and treats as one more deadline, or -- when it is the only thing that can happen before
its instant -- the clock jumps in place and the task does not suspend at all.  The rules, the
order at one instant and the one limit are in :mod:`virtualtime.trio._park`.

Driving verbs
-------------
``virtualtime.settle/step/evolve/run_until/fast_forward`` (awaitable) and ``virtualtime.now/
peek`` work on trio with the same meaning as on asyncio: called from a task of a run whose
clock is a VirtualClock, they drive it.  Importing this package registers their trio halves
with the verbs, which know no backend but asyncio (``virtualtime/trio/_verbs.py``).

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

try:  # trio is an extra: when it is missing, say how to get it
    import trio  # noqa: F401
except ModuleNotFoundError as _missing:
    if _missing.name != "trio":
        raise
    raise ModuleNotFoundError(
        "virtualtime.trio runs trio programs in virtual time and needs trio, which is not "
        "installed: pip install 'async-virtualtime[trio]' (or pip install trio)",
        name="trio",
    ) from None

# Where the code lives (each module's docstring says more):
#   _clock.py        VirtualClock: its options, its state, when time jumps, deadlocks
#   _outside.py      the clock's questions about the world outside the run (a mixin)
#   _instruments.py  how the clock hears the run: trio instruments, the entry queue
#   _tasks.py        reading trio tasks: what a task waits for, its cancel scopes, the tree
#   _exact.py        float deadlines to exact ticks; the horizon of virtual time
#   _park.py         kit waits: the simulation toolkit's cheap sleeps on the clock
#   _run.py          run() and RunGuard: a deadlock becomes DeadlockError
#   _verbs.py        the driving verbs' trio side, registered in _shared/_drivers.py
from . import _verbs
from ._clock import VirtualClock as VirtualClock
from ._run import RunGuard as RunGuard
from ._run import run as run

_verbs.register()

__all__ = ("RunGuard", "VirtualClock", "run")
