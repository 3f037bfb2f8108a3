"""pytest plugin: run async tests in virtual time with one marker.

Loaded automatically (entry point ``pytest11: virtualtime``) and inert unless asked: it does
nothing to a test that is not marked ``@pytest.mark.virtualtime`` while neither
``--virtualtime`` nor the ini option ``virtualtime = true`` is set.  Importing it loads neither
trio, anyio nor pytest-asyncio; each integration is imported inside the hook that needs it, so a
suite without pytest-asyncio, anyio or trio keeps every test and fixture working.

Asking for virtual time
-----------------------
``@pytest.mark.virtualtime`` on a test function, a class or a module (``pytestmark``) runs the
async tests it covers in virtual time.  ``--virtualtime`` (or ``virtualtime = true`` in the ini
file) does it for every async test; ``@pytest.mark.virtualtime(False)`` opts one test, class or
module out again.  Keyword arguments are loop options (``start``, ``autojump``,
``autojump_threshold``, ``rate``, ``history``, ``deadlock_timeout``,
``max_rounds_per_instant``, ``patch_time``, ``wall_start``, ``seed``, ``perturb``; see
:class:`virtualtime.VirtualEventLoop`).

**Merge rule.**  Marks are read from the closest (function, including ``pytest.param(...,
marks=...)``) to the farthest (class, then module).  Each option comes from the closest mark
that sets it, so a module can set ``history=100`` and one test add ``start=50``.  Whether the
test is virtual at all comes from the closest mark: a mark with no positional argument means
yes, ``virtualtime(False)`` means no.  With no mark at all, ``--virtualtime`` / the ini option
decide.  Options are validated at collection: an unknown option, a bad value or a bad
positional argument is a collection error naming the test, the option and the rule (a misspelt
option also gets the closest real one: "did you mean autojump?").  The mark is for async tests;
on a synchronous test it is a set-up error that says what to do instead.

The horizon, interrupts, deadlocks
----------------------------------
``max_time`` (the plugin's own option, not the loop's) is how much virtual time the test
function may take: past it the test is stopped and fails with the virtual time it reached, the
timers fired (on trio: the clock's jumps), and the likely cause -- a deadline read from a clock
the loop does not drive.  Seconds or a duration (``"36h"``); ``None`` means no horizon.  The
default is :data:`DEFAULT_MAX_TIME` (one virtual day), replaced by the ini option
``virtualtime_max_time`` and, above it, by ``--virtualtime-max-time``; a mark's ``max_time``
wins over both.  How it is watched without a timer of its own (which would change ``peek()``,
``step()`` and deadlock detection) is told in ``_watch._Watch``.  When a virtual test is
interrupted -- Ctrl-C, or pytest-timeout's signal method -- the same facts are printed.  A
pytest outcome raised in a loop callback (``pytest.fail()``, or pytest-timeout's alarm landing
there), which asyncio would only log, ends the test (see ``_watch._Watch._keep_outcomes``).
A test that deadlocks fails with a short report, alike on asyncio and trio
(:func:`deadlock_report`); ``--tb=long`` keeps the full traceback.  A test that looptime would
also fake (its mark, or ``--looptime``) fails at set-up: two fake clocks on one loop give wrong
results.

How it plugs in
---------------
* **pytest-asyncio** (1.4 or later) asks plugins for loop factories through its
  ``pytest_asyncio_loop_factories(config, item)`` hook: ``firstresult``, called once per test
  function while it is collected (``item`` is the function's definition, before
  parametrization); the answer must be a non-empty mapping of names to zero-argument loop
  factories, and pytest-asyncio parametrizes the test with them at the test's loop scope.  The
  plugin answers ``{"virtualtime": factory}`` for virtual tests.  Because pytest-asyncio
  demands an answer for *every* test once any plugin implements the hook -- and parametrizing a
  test that way makes pytest-asyncio rebuild its wider-loop-scope fixtures for each test --
  the implementation is registered only while a virtual test is collected or set up (see
  ``_FactoriesState``), so tests that are not virtual keep their loop and their fixtures exactly
  as without the plugin.  (With ``--virtualtime`` it stays registered, and a test opted out
  with ``virtualtime(False)`` gets another plugin's answer or ``asyncio.new_event_loop``, the
  very loop pytest-asyncio would have made.)  Factories compare equal for equal options, so
  tests with the same options share a loop of a wider ``loop_scope``.  The deprecated
  ``event_loop_policy`` fixture is left alone.  As pytest-asyncio picks the loop per test
  function, a virtualtime mark inside ``pytest.param(...)`` (or one added after collection)
  cannot change it: that is a set-up error for pytest-asyncio tests, and works for anyio tests.
* **anyio's pytest plugin** runs a test with one shared test runner, built from the test's
  ``anyio_backend`` -- ``"asyncio"``, ``"trio"`` or ``(name, options)``, parametrized at module
  scope by default.  That value is cached per module, so it cannot be changed for one test, and
  the ``anyio_backend_options`` fixture is only informative (anyio's runner does not read it).
  anyio has no hook for its runner either, so the plugin wraps the one function that builds
  it, ``anyio.pytest_plugin.get_runner(backend_name, backend_options)``, from the first virtual
  anyio test to the end of the session.  While a virtual test is set up, run or torn down, the
  wrapper adds ``loop_factory`` (a :class:`~virtualtime.VirtualEventLoop`) to ``("asyncio",
  options)`` and ``clock`` (a :class:`virtualtime.trio.VirtualClock`) to ``("trio",
  options)``; otherwise it passes everything through.  The backends the suite selects are kept,
  and so is what tests see in ``anyio_backend``.  On trio, tests and async fixtures run guarded,
  so a deadlock raises :class:`~virtualtime.DeadlockError` instead of hanging.  Should a future
  anyio drop ``get_runner``, virtual anyio tests fail with a clear error, never silently.

Fixtures and loops
------------------
With pytest-asyncio, an async fixture whose ``loop_scope`` equals the test's runs on the test's
virtual loop; with a class, module, package or session loop scope on both, every test of that
scope with equal options shares the one loop (and its clock) with the fixture.  A fixture of a
*wider* loop scope than its test also runs on a virtual loop built with the test's factory, but
pytest-asyncio ties that loop to the test's factory parameter: it tears the fixture down after
the test and builds it again for the next one.  To share a virtual fixture, give the tests its
loop scope (``pytestmark = [pytest.mark.asyncio(loop_scope="module"),
pytest.mark.virtualtime]``).  A test that is not virtual never receives a fixture built on a
virtual loop (pytest-asyncio rebuilds it on a normal one), nor the other way round.

anyio shares one runner while any async fixture holds it (for instance a module-scoped async
generator fixture).  The test or fixture that creates the runner decides whether it is virtual;
a virtual test that finds a real runner already running fails with a clear error instead of
silently running in real time.

Driving time: the ``virtual_time`` fixture
------------------------------------------
A test (or a function-scoped async fixture) that wants to read or drive the clock requests
``virtual_time``, a :class:`VirtualTime`: ``now()``, ``peek()`` and the awaitable verbs
``settle()``, ``step()``, ``evolve(dt)``, ``run_until(t)``, ``fast_forward(dt)``, on asyncio and
on trio alike.  Requesting it from a test that does not run in virtual time is a setup error.

Where the code lives
--------------------
This module is the plugin's face: pytest loads it (the ``pytest11`` entry point) and finds the
hooks and the ``virtual_time`` fixture among its names, which it imports from the modules that
hold them.  Each module owns one concern:

* ``_settings`` -- the marker, the options and ini values, the merge rule, a test's settings;
* ``_hooks`` -- every ``pytest_*`` hook, in the order pytest calls them, and the set-up checks;
* ``_asyncio_factories`` -- pytest-asyncio's loop factories and when they are offered;
* ``_anyio_runner`` -- the wrapper around anyio's ``get_runner`` and the runner it returns;
* ``_trio`` -- trio runs guarded against deadlock (pytest-trio's, and anyio's on trio);
* ``_watch`` -- the horizon watch (``max_time``), interrupts and outcomes lost in callbacks;
* ``_deadlocks`` -- the short deadlock report;
* ``_running_clock`` -- which virtual clock runs the current task;
* ``_fixture`` -- :class:`VirtualTime` and the ``virtual_time`` fixture.

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

# pytest finds the hooks and the fixture by name on this module (the entry point): the
# ``name as name`` imports put them here without making them public API (not in __all__).
from ._deadlocks import deadlock_report
from ._fixture import VirtualTime
from ._fixture import virtual_time as virtual_time
from ._hooks import pytest_addoption as pytest_addoption
from ._hooks import pytest_configure as pytest_configure
from ._hooks import pytest_generate_tests as pytest_generate_tests
from ._hooks import pytest_runtest_call as pytest_runtest_call
from ._hooks import pytest_runtest_makereport as pytest_runtest_makereport
from ._hooks import pytest_runtest_protocol as pytest_runtest_protocol
from ._hooks import pytest_runtest_setup as pytest_runtest_setup
from ._hooks import pytest_runtest_teardown as pytest_runtest_teardown
from ._hooks import pytest_unconfigure as pytest_unconfigure
from ._seeds import _virtualtime_seed as _virtualtime_seed
from ._settings import DEFAULT_MAX_TIME

__all__ = ["DEFAULT_MAX_TIME", "VirtualTime", "deadlock_report"]
