"""Runs the code blocks of the documentation pages: the engine of ``test_docs_examples.py``.

Every page (README.md and docs/*.md) is executed in a fresh temporary folder of its own, all
pages by one worker process (``python tests/docs_examples.py RESULTS FOLDER PAGE...``), so the
docs cost one interpreter start-up and one pytest session, not one per block.  Use it to
write a page, too: ``DOCS_EXAMPLES_SHOW=1`` prints what each python block printed.  The
convention, block by block:

* ```` ```python ```` runs as a standalone script: a fresh namespace, ``__name__ ==
  "__main__"``, the page's folder as the working directory and first on ``sys.path``, warnings
  as errors.  (All blocks share the worker process, for speed: modules imported from a page's
  folder are forgotten before each block, but process-wide counters such as asyncio's
  ``Task-N`` names keep counting, so a page that prints a task's name names the task.)  A
  block that contains ``def test_`` is run with pytest instead (the test blocks of every page
  in one pytest session, after all the pages ran).
* A block with ``title="NAME"`` (any language except the ``Output`` title) is written to the
  file ``NAME`` in the page's folder, so later blocks can import or run it; a titled python
  block whose name starts with ``test_`` is also run with pytest.
* ```` ```text title="Output" ```` right after a python block is compared with that block's
  stdout.
* ```` ```console ````: a line starting with ``$ `` is a shell command, run in the page's
  folder with this interpreter's ``bin`` first on ``PATH`` (a leading ``virtualtime`` or
  ``python`` is this interpreter); the lines up to the next command are its expected output
  (stdout and stderr together).  A command must exit with status 0 (show a failing one with
  ``|| echo "exit status $?"``).
* In expected output, a line ``...`` matches any number of lines and ``...`` inside a line
  matches any text; trailing spaces and trailing blank lines are ignored.
* ```` ```bash ```` blocks are set-up commands that CI runs, not the suite: every command in
  one must appear verbatim in ``.ci/run`` (checked by ``test_docs_examples.py``).
* ```` ```text ```` blocks without a title are pictures and reports, not code.

The page's folder holds a link ``examples`` to the repository's ``examples/`` folder, so the
commands read as they do in a clone.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Real seconds one python block may take before the worker gives up on it (a hang guard:
#: the docs' blocks take milliseconds).
BLOCK_TIMEOUT = 30.0

#: Languages whose untitled blocks are not code (pictures, reports, set-up commands).
NOT_RUN = frozenset({"text", "bash"})
#: Languages the runner knows; an untitled block in any other language is an error.
KNOWN = frozenset({"python", "console"}) | NOT_RUN

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_ATTR = re.compile(r'(?P<key>[\w-]+)="(?P<value>[^"]*)"')


@dataclass
class Block:
    """One fenced code block of a page."""

    lang: str
    attrs: dict[str, str]
    code: str
    line: int  # 1-based line of the opening fence

    @property
    def title(self) -> str | None:
        return self.attrs.get("title")

    @property
    def is_test(self) -> bool:
        if self.lang != "python":
            return False
        if self.title is not None:
            return self.title.startswith("test_") and "def test_" in self.code
        return "def test_" in self.code


def parse_blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, dedented by its fence's indentation."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        lang = info.split(maxsplit=1)[0].lstrip(".") if info else ""
        attrs = {a["key"]: a["value"] for a in _ATTR.finditer(info)}
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and stripped.strip(fence[0]) == "":
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        blocks.append(Block(lang, attrs, "\n".join(body) + "\n", i + 1))
        i = j + 1
    return blocks


def output_matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` fits ``expected`` (``...`` wildcards, trailing spaces ignored)."""
    pattern = []
    for line in _clean(expected):
        if line.strip() == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pieces = [re.escape(p) for p in line.split("...")]
            pattern.append("[^\n]*?".join(pieces) + r"\n")
    text = "".join(line + "\n" for line in _clean(actual))
    return re.fullmatch("".join(pattern), text) is not None


def _clean(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass
class Result:
    """What happened to one block (or to one command of a console block)."""

    line: int
    what: str
    ok: bool
    message: str = ""
    seconds: float = 0.0


@dataclass
class PageRun:
    page: Path
    folder: Path
    results: list[Result] = field(default_factory=list)
    last_stdout: str | None = None
    tests: list[tuple[Block, Path]] = field(default_factory=list)

    def run(self) -> None:
        blocks = parse_blocks(self.page.read_text(encoding="utf-8"))
        link = self.folder / "examples"
        if not link.exists():
            link.symlink_to(ROOT / "examples", target_is_directory=True)
        for block in blocks:
            self.one(block)

    def one(self, block: Block) -> None:
        title = block.title
        if title == "Output":
            self.output(block)
            return
        self.last_stdout = None  # an Output block belongs to the block right before it
        if title is not None:
            (self.folder / title).write_text(block.code, encoding="utf-8")
            if block.is_test:
                self.tests.append((block, self.folder / title))
            self.results.append(Result(block.line, f"file {title}", True))
        elif block.is_test:
            path = self.folder / f"test_{self.page.stem.replace('-', '_')}_{block.line}.py"
            path.write_text(block.code, encoding="utf-8")
            self.tests.append((block, path))
        elif block.lang == "python":
            self.script(block)
        elif block.lang == "console":
            self.console(block)
        elif block.lang not in KNOWN:
            self.results.append(
                Result(
                    block.line,
                    f"{block.lang or 'untyped'} block",
                    False,
                    f"a {block.lang or 'untyped'!r} block with no title: give it a language"
                    ' the runner knows (python, console, text, bash) or a title="FILE"',
                )
            )

    def script(self, block: Block) -> None:
        path = self.folder / f"block-{block.line}.py"
        path.write_text(block.code, encoding="utf-8")
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(self.folder)):
                del sys.modules[name]
        out = io.StringIO()
        saved_path, saved_argv = sys.path[:], sys.argv[:]
        sys.path.insert(0, str(self.folder))
        sys.argv = [str(path)]
        started = time.perf_counter()
        # A block that hangs ends the worker with its stack instead of stalling the suite.
        faulthandler.dump_traceback_later(BLOCK_TIMEOUT, exit=True)
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(str(path), run_name="__main__")
        except BaseException:
            self.results.append(Result(block.line, "python", False, traceback.format_exc(limit=-8)))
            return
        finally:
            faulthandler.cancel_dump_traceback_later()
            sys.path[:], sys.argv = saved_path, saved_argv
        self.results.append(Result(block.line, "python", True, "", time.perf_counter() - started))
        self.last_stdout = out.getvalue()
        if os.environ.get("DOCS_EXAMPLES_SHOW"):  # for writing a page: see what a block prints
            print(f"--- line {block.line}:\n{self.last_stdout}", file=sys.stderr)

    def output(self, block: Block) -> None:
        stdout, self.last_stdout = self.last_stdout, None
        if stdout is None:
            self.results.append(
                Result(block.line, "Output", False, "no python block ran right before it")
            )
            return
        ok = output_matches(block.code, stdout)
        message = "" if ok else f"expected:\n{block.code}\ngot:\n{stdout}"
        self.results.append(Result(block.line, "Output", ok, message))

    def console(self, block: Block) -> None:
        commands: list[tuple[str, list[str]]] = []
        for line in block.code.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif commands:
                commands[-1][1].append(line)
            elif line.strip():
                self.results.append(
                    Result(block.line, "console", False, f"output before any command: {line!r}")
                )
                return
        if not commands:
            self.results.append(Result(block.line, "console", False, "no `$ ` command"))
        for command, expected in commands:
            self.command(block, command, "\n".join(expected))

    def command(self, block: Block, command: str, expected: str) -> None:
        words = command.split(maxsplit=1)
        rest = words[1] if len(words) > 1 else ""
        if words and words[0] == "virtualtime":
            command = f"{shlex.quote(sys.executable)} -m virtualtime {rest}"
        elif words and words[0] == "python":
            command = f"{shlex.quote(sys.executable)} {rest}"
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        env["COLUMNS"] = "100"
        env.pop("PYTEST_CURRENT_TEST", None)
        started = time.perf_counter()
        try:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=self.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            self.results.append(Result(block.line, f"$ {words[0]}", False, "timed out (60 s)"))
            return
        seconds = time.perf_counter() - started
        ok = done.returncode == 0 and output_matches(expected, done.stdout)
        message = (
            ""
            if ok
            else f"$ {command}\nexit status {done.returncode}\n"
            f"expected:\n{expected}\ngot:\n{done.stdout}"
        )
        self.results.append(Result(block.line, "$ " + " ".join(words[:2]), ok, message, seconds))


def run_tests(runs: list[PageRun], root: Path) -> None:
    """Run every page's test blocks with pytest, in as few pytest sessions as possible.

    Pages whose ``pytest.ini`` says the same (or that have none) share one session, so the
    docs cost one pytest start-up, not one per page; a test file whose name another page's
    file already has goes to a session of its own.
    """
    sessions: list[tuple[str | None, list[tuple[PageRun, Block, Path]]]] = []
    for run in runs:
        ini = run.folder / "pytest.ini"
        config = ini.read_text(encoding="utf-8") if ini.exists() else None
        for block, path in run.tests:
            for key, members in sessions:
                if key == config and path.name not in {p.name for _, _, p in members}:
                    members.append((run, block, path))
                    break
            else:
                sessions.append((config, [(run, block, path)]))
    for config, members in sessions:
        _pytest_session(config, members, root)


def _pytest_session(
    config: str | None, members: list[tuple[PageRun, Block, Path]], root: Path
) -> None:
    import pytest

    outcomes: dict[str, list[str]] = {}

    class Collect:
        def pytest_runtest_logreport(self, report: Any) -> None:
            if report.when == "call" or report.outcome != "passed":
                key = report.nodeid.split("::", 1)[0]
                outcomes.setdefault(key, []).append(f"{report.nodeid}: {report.outcome}")

        def pytest_collectreport(self, report: Any) -> None:
            if report.outcome != "passed":
                outcomes.setdefault(report.nodeid, []).append(f"collection {report.outcome}")

    ini = members[0][0].folder / "pytest.ini"
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:looptime_plugin",
        f"--rootdir={root}",
        "-c",
        str(ini) if config is not None else os.devnull,
        *[str(path) for _, _, path in members],
    ]
    out = io.StringIO()
    started = time.perf_counter()
    os.chdir(root)
    with contextlib.redirect_stdout(out):
        status = pytest.main(args, plugins=[Collect()])
    seconds = time.perf_counter() - started
    for run, block, path in members:
        got = outcomes.get(path.relative_to(root).as_posix(), [])
        ok = bool(got) and all(g.endswith(": passed") for g in got) and status == 0
        message = "" if ok else f"pytest {path.name}: {got}\n{out.getvalue()}"
        run.results.append(Result(block.line, "pytest", ok, message, seconds))


def main(argv: list[str]) -> int:
    """``docs_examples.py RESULTS FOLDER PAGE...``: run the pages, write the results as JSON."""
    results, root = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    runs = []
    for n, page in enumerate(Path(a).resolve() for a in argv[2:]):
        folder = root / f"{n:02d}-{page.stem}"
        folder.mkdir()
        runs.append(PageRun(page, folder))
    try:
        for run in runs:
            os.chdir(run.folder)
            run.run()
        run_tests(runs, root)
    finally:
        data = {str(run.page): [r.__dict__ for r in run.results] for run in runs}
        results.write_text(json.dumps(data), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
