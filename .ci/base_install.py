"""What a user who ran only ``pip install async-virtualtime`` gets: checked by .ci/run.

Run with the interpreter of a venv that holds the package and nothing it does not declare
(no test extra, no pytest, no trio), from a folder outside the checkout:

    python .ci/base_install.py README.md

It imports every public subpackage (``virtualtime.trio``, whose one requirement is the
optional trio, must refuse with an ImportError that says how to install it), then runs each
python block of README.md that needs nothing but the base install and compares it with the
block's ``Output``, so a module the package imports but does not declare (sniffio once) fails
CI instead of a user.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import re
import runpy
import sys
import tempfile
import warnings
from pathlib import Path

#: The public subpackages that need nothing beyond the base install.
BASE_MODULES = (
    "virtualtime",
    "virtualtime.sim",
    "virtualtime.trace",
    "virtualtime.experiment",
    "virtualtime.cli",
)
#: An import that marks a README block as needing an extra (a test framework, trio, numpy).
NEEDS_EXTRA = re.compile(
    r"^\s*(?:import|from)\s+(?:pytest|trio|numpy|scipy|matplotlib|virtualtime\.(?:trio|experiment))\b",
    re.MULTILINE,
)


def check_imports() -> None:
    for name in BASE_MODULES:
        importlib.import_module(name)
        print(f"import {name}: ok")
    if importlib.util.find_spec("trio") is not None:
        raise SystemExit("this check needs a venv without trio")
    try:
        importlib.import_module("virtualtime.trio")
    except ImportError as error:
        message = str(error)
        if "pip install" not in message or "trio" not in message:
            raise SystemExit(f"virtualtime.trio without trio: unclear error {message!r}") from None
        print(f"import virtualtime.trio without trio: refused clearly ({message})")
    else:
        raise SystemExit("virtualtime.trio imported although trio is not installed")


def check_readme(readme: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from docs_examples import output_matches, parse_blocks

    blocks = parse_blocks(readme.read_text(encoding="utf-8"))
    ran = 0
    for i, block in enumerate(blocks):
        if block.lang != "python" or block.title is not None:
            continue
        if NEEDS_EXTRA.search(block.code) or "@pytest" in block.code:
            continue
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        expected = after.code if after is not None and after.title == "Output" else None
        with tempfile.TemporaryDirectory() as folder:
            script = Path(folder) / "block.py"
            script.write_text(block.code, encoding="utf-8")
            out = io.StringIO()
            with contextlib.redirect_stdout(out), warnings.catch_warnings():
                warnings.simplefilter("error")
                runpy.run_path(str(script), run_name="__main__")
        if expected is not None and not output_matches(expected, out.getvalue()):
            raise SystemExit(
                f"README.md line {block.line}: printed {out.getvalue()!r}, expected {expected!r}"
            )
        print(f"README.md block at line {block.line}: ok")
        ran += 1
    if ran < 3:
        raise SystemExit(f"only {ran} README blocks ran on the base install: the filter is wrong")


if __name__ == "__main__":
    check_imports()
    check_readme(Path(sys.argv[1]))
