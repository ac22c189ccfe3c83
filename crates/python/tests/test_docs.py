"""The Python snippets of the README and the user guide (docs/guide), each run as written
from the repository root, so that they stay true. The Rust ones are doc tests of the facade
crate (`src/lib.rs`, `guide_snippets`)."""

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]


def snippets():
    for page in PAGES:
        text = page.read_text()
        for match in re.finditer(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
            line = text.count("\n", 0, match.start()) + 1
            yield pytest.param(match.group(1), id=f"{page.relative_to(ROOT)}:{line}")


SNIPPETS = list(snippets())


def test_the_guide_has_python_snippets():
    assert len(SNIPPETS) >= 8


@pytest.mark.parametrize("code", SNIPPETS)
def test_snippet_runs(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})
