"""The progress display of ``virtualtime run --until``: a bar of virtual time on stderr.

It only *reads* the clocks (from its own thread), so a run with the bar fires exactly the
timers of a run without it.  rich draws it when installed; otherwise a plain text line is
redrawn in place.

The one thing it changes: while the run goes on, ``sys.stdout`` and ``sys.stderr`` -- those of
them that write to the bar's terminal -- are wrapped, so that the script's own output lands
*above* the bar instead of being glued to it.  With the text bar, a write first erases the
bar, which is redrawn under the output at the next tick (never over a half-written line).
With rich, each complete line of output is printed above the live bar by rich's console, and
a line the script has not finished yet waits for its newline.  A stream that goes elsewhere
(``> results.csv``) is left alone, and the streams are put back when the run ends.

Part of ``cli``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net``, ``api``, ``sim``, ``experiment`` (see tests/layout.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from .._shared._units import format_duration

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["Progress", "render_bar"]


def render_bar(fraction: float, now: float, until: float, width: int = 30) -> str:
    """One line of text progress: ``[#########.........]  30%  t=7.2 h of 24 h``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    return f"[{bar}] {fraction * 100:3.0f}%  t={format_duration(now)} of {format_duration(until)}"


class Progress:
    """A progress bar of virtual time on stderr, from a thread that only reads the clock.

    Reading the loop's time from another thread never disturbs the run (no timer is added,
    so ``--until`` runs fire exactly the same timers as plain ones).  It stays hidden for the
    first ``show_after`` real seconds, so quick runs print nothing, and it never appears in
    the middle of a line the script is writing.  rich draws it when installed (``use_rich``
    None: if importable); otherwise a plain text line is redrawn in place.  Use it as a
    context manager around the run: entering wraps the script's streams (see the module),
    leaving erases the bar and puts them back.
    """

    def __init__(
        self,
        session: Session,
        until: float,
        stream: TextIO,
        *,
        show_after: float = 0.3,
        use_rich: bool | None = None,
    ) -> None:
        self.session = session
        self.until = until
        self.stream = stream
        self.show_after = show_after
        self.began = time.monotonic()
        self.shown = False
        self.use_rich = (
            importlib.util.find_spec("rich") is not None if use_rich is None else use_rich
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rich: Any = None
        self._rich_task: Any = None
        self._lock = threading.RLock()
        self._drawn = False
        self._at_line_start = True
        self._closed = False
        self._relays: list[tuple[str, _Relay]] = []

    def fraction(self) -> tuple[float, float]:
        """How far the current run is from its start to ``--until``, and its time now."""
        latest = self.session.latest
        if latest is None:
            return 0.0, 0.0
        start, now = latest.start, latest.now()
        span = self.until - start
        return (1.0 if span <= 0 else (now - start) / span), now

    def _start_rich(self, fraction: float, label: str) -> None:
        # Started only when the bar is first shown: a live display, even an empty one,
        # erases the terminal's current line at every refresh.
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        progress = Progress(
            TextColumn("[bold]virtual time"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[now]}"),
            console=Console(file=self.stream),
            transient=True,
            refresh_per_second=10,
            # rich's own redirection would capture stdout even when it goes to a file; the
            # relays (see the module) send only the terminal's output above the bar.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._rich_task = progress.add_task(
            "run", total=1000, completed=int(fraction * 1000), now=label
        )
        for _, relay in self._relays:
            relay.flush()  # what went straight to the terminal so far comes first
        progress.start()
        self._rich = progress

    def tick(self) -> None:
        """Redraw once (called ten times a second by the thread; callable directly)."""
        if not self.shown and time.monotonic() - self.began < self.show_after:
            return
        fraction, now = self.fraction()
        label = f"t={format_duration(now)} of {format_duration(self.until)}"
        with self._lock:
            if self._closed or not self._at_line_start:
                return  # the script is half-way through a line: do not draw over it
            if self.use_rich:
                if self._rich is None:
                    self._start_rich(fraction, label)
                self._rich.update(self._rich_task, completed=fraction * 1000, now=label)
                self.shown = True
                return
            self.shown = True
            self.stream.write("\r" + render_bar(fraction, now, self.until) + "\x1b[K")
            self.stream.flush()
            self._drawn = True

    def clear_line(self) -> None:
        """Erase the text bar, if it is drawn, so that other output starts on a clean line."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False

    def wrote(self, text: str) -> None:
        """Note output that went past the bar (whether it ended a line)."""
        if text:
            self._at_line_start = text.endswith("\n")

    def relay(self, inner: TextIO, text: str) -> str:
        """Pass the script's ``text`` for ``inner`` on; returns what is left to write later.

        Called by the stream wrappers with the lock held.  Before the bar shows (and after
        it is gone) text goes straight through; the text bar is erased first; with rich,
        complete lines are printed above the bar and an unfinished line is handed back.
        """
        if self._rich is None or self._closed:
            self.clear_line()
            self.stream.flush()
            inner.write(text)
            self.wrote(text)
            return ""
        lines, newline, rest = text.rpartition("\n")
        if newline:
            from rich.text import Text

            self._rich.console.print(Text.from_ansi(lines), soft_wrap=True)
        return rest

    def wrap_streams(self) -> None:
        """Wrap the script's streams that write to the bar's terminal (entering does it)."""
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if _same_terminal(stream, self.stream):
                relay = _Relay(stream, self)
                setattr(sys, name, relay)
                self._relays.append((name, relay))

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.tick()

    def __enter__(self) -> Progress:
        self.wrap_streams()
        self._thread = threading.Thread(target=self._run, name="virtualtime-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._rich is not None:
                self._rich.stop()
            self._closed = True
            self.clear_line()
            for name, relay in self._relays:
                relay.close_relay()
                if getattr(sys, name) is relay:
                    setattr(sys, name, relay.inner)
            self._relays.clear()
            with contextlib.suppress(OSError, ValueError):
                self.stream.flush()


def _same_terminal(stream: object, terminal: TextIO) -> bool:
    """Whether writing to ``stream`` shows on ``terminal`` (the bar's stream, a terminal)."""
    if stream is terminal:
        return True
    try:
        if not stream.isatty():  # type: ignore[attr-defined]
            return False
        mine = os.fstat(stream.fileno())  # type: ignore[attr-defined]
        theirs = os.fstat(terminal.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return os.path.samestat(mine, theirs)


class _Relay:
    """Wraps ``sys.stdout`` or ``sys.stderr`` during the run: the script's output goes above
    the bar (see :meth:`Progress.relay`); everything but ``write`` is the stream's own."""

    def __init__(self, inner: TextIO, progress: Progress) -> None:
        self.inner = inner
        self._progress = progress
        self._pending = ""

    def write(self, text: str) -> int:
        with self._progress._lock:
            self._pending = self._progress.relay(self.inner, self._pending + text)
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def close_relay(self) -> None:
        """The bar is gone: write out an unfinished line, then pass everything through."""
        if self._pending:
            self.inner.write(self._pending)
            self._pending = ""
        with contextlib.suppress(OSError, ValueError):
            self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
