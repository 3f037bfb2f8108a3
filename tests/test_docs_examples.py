"""Every code block of README.md and docs/*.md runs, and shows what it really prints.

The convention is in ``docs_examples.py`` (and in the docs' own "About these pages"): python
blocks run as scripts, ``def test_`` blocks with pytest, ``title="FILE"`` blocks become files,
``Output`` blocks and console blocks are compared with what the code printed.  Each page runs
in one worker process in a fresh folder of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from docs_examples import ROOT, Block, output_matches, parse_blocks

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER = Path(__file__).resolve().parent / "docs_examples.py"


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def page_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every page run once, by one worker process (one start-up, one pytest session)."""
    root = tmp_path_factory.mktemp("docs")
    results_file = root / "results.json"
    folders = root / "pages"
    folders.mkdir()
    done = subprocess.run(
        [sys.executable, "-W", "error", str(RUNNER), str(results_file), str(folders)]
        + [str(page) for page in PAGES],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results: dict[str, list[dict[str, Any]]] = json.loads(results_file.read_text(encoding="utf-8"))
    return results


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_block_of_the_page_runs_and_prints_what_it_shows(
    page: Path, page_results: dict[str, list[dict[str, Any]]]
) -> None:
    blocks = parse_blocks(page.read_text(encoding="utf-8"))
    results = page_results[str(page)]
    failures = [
        f"{_name(page)}:{r['line']} ({r['what']}): {r['message']}" for r in results if not r["ok"]
    ]
    assert not failures, "\n\n".join(failures)
    runnable = [b for b in blocks if b.lang in {"python", "console"} or b.title]
    ran = {r["line"] for r in results}
    assert {b.line for b in runnable} <= ran, "every runnable block produced a result"


def test_set_up_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = []
    for page in PAGES:
        for block in parse_blocks(page.read_text(encoding="utf-8")):
            if block.lang == "bash":
                commands += [
                    line.strip()
                    for line in block.code.splitlines()
                    if line.strip() and not line.lstrip().startswith("#")
                ]
    readme = parse_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [b for b in readme if b.lang == "bash"], "README shows its set-up commands"
    missing = [c for c in commands if not any(line.strip() == c for line in ci)]
    assert not missing, f"set-up commands that .ci/run does not run verbatim: {missing}"
    # .ci/run ends with exactly README's test command.
    test_command = next(c for c in commands if "pytest" in c)
    last = [line.strip() for line in ci if "pytest" in line][-1]
    assert last == test_command


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"


def test_every_docs_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w./-]+\.md)", nav))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    # docs/experiments.md joins the navigation when its branch is merged.
    assert pages - {"experiments.md"} <= listed, pages - listed


def test_the_parser_reads_fences_titles_and_indentation() -> None:
    text = (
        "intro\n"
        '```python title="a.py"\nX = 1\n```\n'
        "- item\n\n"
        "  ```console\n  $ echo hi\n  hi\n  ```\n"
        "````text\n```\n````\n"
    )
    blocks = parse_blocks(text)
    assert [(b.lang, b.title, b.line) for b in blocks] == [
        ("python", "a.py", 2),
        ("console", None, 7),
        ("text", None, 11),
    ]
    assert blocks[1].code == "$ echo hi\nhi\n"
    assert blocks[2].code == "```\n"
    assert Block("python", {}, "def test_x(): pass\n", 1).is_test
    assert not Block("python", {"title": "helpers.py"}, "def test_x(): pass\n", 1).is_test


def test_output_wildcards_match_lines_and_text_but_nothing_else() -> None:
    assert output_matches("a\n...\nd\n", "a\nb\nc\nd\n")
    assert output_matches("a\n...\nd\n", "a\nd\n")
    assert output_matches("took ... s (...x)\n", "took 0.08 s (350,622x)  \n\n")
    assert not output_matches("a\n...\nd\n", "a\nb\nc\n")
    assert not output_matches("took ... s\n", "took 0.08 ms\n")
    assert not output_matches("1\n2\n", "1\n2\n3\n")
    assert not output_matches("[1.0, 2.0]\n", "[1.0, 2.5]\n")


BROKEN_PAGE = """
```python
print("two")
```

```text title="Output"
one
```

```python
raise ValueError("a block that raises")
```

```console
$ echo hello
goodbye
```

```console
$ false
```

```python
def test_that_fails():
    assert 1 == 2
```

```python
print("fine")
```

```text title="Output"
fine
```

```yaml
key: value
```

```ini title="pytest.ini"
[pytest]
asyncio_default_fixture_loop_scope = function
```
"""


def test_the_runner_reports_every_kind_of_broken_block(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text(BROKEN_PAGE, encoding="utf-8")
    results_file, folders = tmp_path / "r.json", tmp_path / "pages"
    folders.mkdir()
    done = subprocess.run(
        [sys.executable, "-W", "error", str(RUNNER), str(results_file), str(folders), str(page)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(results_file.read_text(encoding="utf-8"))[str(page)]
    verdicts = {(r["line"], r["what"]): r["ok"] for r in results}
    assert verdicts == {
        (2, "python"): True,
        (6, "Output"): False,  # printed "two", shows "one"
        (10, "python"): False,  # raised
        (14, "$ echo hello"): False,  # printed something else
        (19, "$ false"): False,  # exit status 1
        (23, "pytest"): False,  # the test failed
        (28, "python"): True,
        (32, "Output"): True,
        (36, "yaml block"): False,  # not a language the runner knows, and no title
        (40, "file pytest.ini"): True,
    }
    failed_test = next(r for r in results if r["what"] == "pytest")
    assert "test_that_fails: failed" in failed_test["message"]
