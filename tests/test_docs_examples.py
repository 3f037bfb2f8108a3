"""Every code block of README.md and docs/*.md runs, and shows what it really prints.

The convention is in ``docs_examples.py`` (and in the docs' own "About these pages"): python
blocks run as scripts, ``def test_`` blocks with pytest, ``title="FILE"`` blocks become files,
``Output`` blocks and console blocks are compared with what the code printed.  Each page runs
in one worker process in a fresh folder of its own.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
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


# The documentation site (mkdocs.yml).  Building it needs the docs extra, which the test
# extra does not bring, so CI builds it with `mkdocs build --strict`; what follows checks
# what can be checked from the files alone.

DOCS = ROOT / "docs"
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Attributes|Examples?):$", re.MULTILINE
)
_SPHINX_FIELD = re.compile(r"^:(param|type|returns?|rtype|raises?)\b", re.MULTILINE)
_NUMPY_SECTION = re.compile(r"^(Parameters|Returns|Raises|Yields)\n-{3,}$", re.MULTILINE)


def _docstrings() -> list[tuple[str, str]]:
    """Every docstring of the package: (where, text, dedented as Griffe reads it)."""
    found = []
    for path in sorted((ROOT / "virtualtime").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node)
                if text:
                    name = getattr(node, "name", "module")
                    found.append((f"{path.relative_to(ROOT)}:{name}", text))
    return found


def test_the_site_reads_docstrings_in_the_style_they_are_written_in() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    configured = re.findall(r"^\s*docstring_style:\s*(\w+)", config, re.MULTILINE)
    styles: dict[str, list[str]] = {"google": [], "sphinx": [], "numpy": []}
    for where, text in _docstrings():
        if _NUMPY_SECTION.search(text):
            styles["numpy"].append(where)
        elif _SECTION.search(text):
            styles["google"].append(where)
        if _SPHINX_FIELD.search(text):
            styles["sphinx"].append(where)
    used = {style for style, places in styles.items() if places}
    assert styles["google"], "some docstrings have Google sections (Args:)"
    assert used == {"google"}, {style: styles[style][:5] for style in used - {"google"}}
    # An `Args:` section read as Sphinx style is one run-on paragraph on the site.
    assert configured == ["google"], f"mkdocs.yml reads docstrings as {configured}"


def _markdown_helper() -> Any:
    path = DOCS / "_ext" / "docstring_markdown.py"
    spec = importlib.util.spec_from_file_location("docstring_markdown", path)
    assert spec is not None, path
    assert spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstrings_sphinx_roles_and_literal_blocks_become_markdown() -> None:
    to_markdown = _markdown_helper().to_markdown
    assert to_markdown("Use :func:`run`, :class:`~virtualtime.sim.Clock` or :meth:`x <a.b>`.") == (
        "Use `run`, `Clock` or `x`."
    )
    docstring = (
        "Use it like this::\n"
        "\n"
        "    loop = new_event_loop()\n"
        "\n"
        "    if ready:\n"
        "        go()\n"
        "\n"
        "Then more text.\n"
        "\n"
        "Args:\n"
        "    first: shorthand ::\n"
        "\n"
        "        f(x)\n"
        "    second: plain."
    )
    assert to_markdown(docstring) == (
        "Use it like this:\n"
        "\n"
        "```python\n"
        "loop = new_event_loop()\n"
        "\n"
        "if ready:\n"
        "    go()\n"
        "```\n"
        "\n"
        "Then more text.\n"
        "\n"
        "Args:\n"
        "    first: shorthand\n"
        "\n"
        "    ```python\n"
        "    f(x)\n"
        "    ```\n"
        "    second: plain."
    )
    # A definition list whose terms are code: one bullet per entry, not one paragraph.
    knobs = "Knobs:\n\n``velocity``\n    How fast.\n    Never 0.\n``name``\n    For reprs.\n\nEnd."
    assert to_markdown(knobs) == (
        "Knobs:\n\n- ``velocity``: How fast.\n  Never 0.\n- ``name``: For reprs.\n\nEnd."
    )
    assert to_markdown("``alone``\n\n    code") == "``alone``\n\n    code"
    # "::" with nothing indented after it, or inside code, is left alone.
    assert to_markdown("A slice a[1::] and a note::\nnot indented.") == (
        "A slice a[1::] and a note::\nnot indented."
    )
    # The package's own literal blocks all convert: none is left for the site to show raw.
    left = [where for where, text in _docstrings() if "::\n" in to_markdown(text)]
    assert not left, left


def _prose(page: str) -> str:
    """A page without its code blocks and code spans: the words a reader reads."""
    text = re.sub(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[ \t]*$", "", page, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def test_the_install_page_covers_every_extra_and_python() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    page = (DOCS / "install.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([\w-]+)` \|", page, re.MULTILINE))
    extras = set(pyproject["optional-dependencies"])
    assert rows == extras, (
        f"extras without a row: {extras - rows}; rows of no extra: {rows - extras}"
    )
    versions = [
        c.rsplit(" :: ", 1)[1]
        for c in pyproject["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert pyproject["requires-python"] == f">={versions[0]}"
    first_paragraph = _prose(page).split("\n\n")[1]
    named = re.findall(r"3\.\d+", first_paragraph)
    assert named == versions, f"the page names {named}, pyproject {versions}"
    # The set-up commands are the README's (and so CI's): the same bash lines.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    def bash_lines(text: str) -> list[str]:
        return [b.code for b in parse_blocks(text) if b.lang == "bash"]

    assert bash_lines(page) == bash_lines(readme)[:1]


def test_the_site_sends_readers_to_pages_it_has() -> None:
    # The README is not on the site, and no link to it can work there: a page that says "see
    # the README" leaves a reader of the site with nowhere to go.  (A path in code, such as
    # `bench/README.md`, names a file of the clone and is fine.)
    mentions = [
        f"{page.name}: {line.strip()}"
        for page in sorted(DOCS.rglob("*.md"))
        for line in _prose(page.read_text(encoding="utf-8")).splitlines()
        if re.search(r"\bREADME\b", line)
    ]
    assert not mentions, mentions
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    assert "](install.md)" in home, "the home page links the install page"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s+- Install: install\.md$", nav, re.MULTILINE), "Install is in the nav"
