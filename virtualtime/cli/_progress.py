"""The progress display of ``virtualtime run --until``: a bar of virtual time on stderr.

It only *reads* the clocks (from its own thread), so a run with the bar fires exactly the
timers of a run without it.  rich draws it when installed; otherwise a plain text line is
redrawn in place.

The one thing it changes: while the *text* bar is visible, ``sys.stdout`` and ``sys.stderr``
are wrapped so that the script's own output first erases the bar (else a ``print`` lands in
the middle of the bar's line and leaves fragments of it on the terminal).  That happens only
when stderr is a terminal, ``--until`` is given and rich is not installed; the wrappers pass
everything else through, and the streams are put back when the bar goes.
"""

from __future__ import annotations

import importlib.util
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
    first ``show_after`` real seconds, so quick runs print nothing.  rich draws it when
    installed; otherwise a plain text line is redrawn in place.
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rich: Any = None
        self._rich_task: Any = None
        self._lock = threading.RLock()
        self._drawn = False
        self._at_line_start = True
        self._saved: tuple[TextIO, TextIO] | None = None
        if use_rich is None:
            use_rich = importlib.util.find_spec("rich") is not None
        if use_rich:
            self._start_rich()

    def fraction(self) -> tuple[float, float]:
        """How far the current run is from its start to ``--until``, and its time now."""
        latest = self.session.latest
        if latest is None:
            return 0.0, 0.0
        start, now = latest.start, latest.now()
        span = self.until - start
        return (1.0 if span <= 0 else (now - start) / span), now

    def _start_rich(self) -> None:
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
            # The script's own output must stay where it was going (a file, a pipe), not be
            # captured and re-rendered on the progress bar's stream.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._rich_task = progress.add_task("run", total=1000, visible=False, now="")
        progress.start()
        self._rich = progress

    def tick(self) -> None:
        """Redraw once (called ten times a second by the thread; callable directly)."""
        if not self.shown and time.monotonic() - self.began < self.show_after:
            return
        fraction, now = self.fraction()
        label = f"t={format_duration(now)} of {format_duration(self.until)}"
        if self._rich is not None:
            self._rich.update(self._rich_task, completed=fraction * 1000, now=label, visible=True)
            self.shown = True
            return
        with self._lock:
            if not self.shown:
                self._wrap_streams()
            self.shown = True
            if not self._at_line_start:
                return  # the script is half-way through a line: do not draw over it
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

    def _wrap_streams(self) -> None:
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _ClearingStream(sys.stdout, self)
        sys.stderr = _ClearingStream(sys.stderr, self)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.tick()

    def __enter__(self) -> Progress:
        self._thread = threading.Thread(target=self._run, name="virtualtime-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._rich is not None:
            self._rich.stop()
            return
        with self._lock:
            if self._saved is not None:
                if isinstance(sys.stdout, _ClearingStream):
                    sys.stdout = self._saved[0]
                if isinstance(sys.stderr, _ClearingStream):
                    sys.stderr = self._saved[1]
            self.clear_line()
            self.stream.flush()


class _ClearingStream:
    """Wraps stdout/stderr while the text bar shows: erase the bar before other output."""

    def __init__(self, inner: TextIO, progress: Progress) -> None:
        self._inner = inner
        self._progress = progress

    def write(self, text: str) -> int:
        with self._progress._lock:
            self._progress.clear_line()
            self._progress.stream.flush()
            written = self._inner.write(text)
            self._progress.wrote(text)
            return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
