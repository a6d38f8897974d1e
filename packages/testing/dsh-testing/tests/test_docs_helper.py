"""``dsh.testing.docs``: fenced blocks out of a Markdown page, source regions, and
running the samples with tracebacks that point at the page."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from dsh.testing.docs import (
    CodeBlock,
    extract_blocks,
    extract_python_blocks,
    run_python_blocks,
    source_region,
)

PAGE = """\
# A page

```python
x = 1
```

Some text with ``` inline backticks ``` that open nothing.

<!-- source: src/mod.py#greet -->

```py
def greet(name):
    return f"hi {name}"
```

````markdown
```python
this is not python: it is inside a markdown example
```
````

1. In a list:

   ```python
   y = x + 1
   ```

~~~toml
[tool]
~~~

```
no language
```
"""


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    return path


def test_blocks_in_order_with_languages_lines_and_sources(page: Path) -> None:
    blocks = extract_blocks(page)
    assert [(b.language, b.line) for b in blocks] == [
        ("python", 4),
        ("py", 12),
        ("markdown", 17),
        ("python", 25),
        ("toml", 29),
        ("", 33),
    ]
    assert blocks[1].source == "src/mod.py#greet"
    assert blocks[0].source is None
    assert blocks[2].code == (
        "```python\nthis is not python: it is inside a markdown example\n```\n"
    )
    assert blocks[3].code == "y = x + 1\n"  # the list indentation is removed
    assert blocks[3].where == f"{page}:25"


def test_python_blocks_only(page: Path) -> None:
    blocks = extract_python_blocks(page)
    assert [b.code for b in blocks] == [
        "x = 1\n",
        'def greet(name):\n    return f"hi {name}"\n',
        "y = x + 1\n",
    ]


def test_blocks_run_in_order_in_one_module(page: Path) -> None:
    namespace = run_python_blocks(extract_python_blocks(page))
    assert namespace["y"] == 2
    assert namespace["greet"]("you") == "hi you"
    assert namespace["__name__"] == "__docs_sample__"


def test_a_failing_block_points_at_its_page_line(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text("Intro\n\n```python\nok = True\nraise ValueError('the sample broke')\n```\n")
    with pytest.raises(ValueError, match="the sample broke") as info:
        run_python_blocks(extract_python_blocks(page))
    assert f"in the python block at {page}:4" in info.value.__notes__
    frames = traceback.extract_tb(info.value.__traceback__)
    assert (frames[-1].filename, frames[-1].lineno) == (str(page), 5)


def test_source_regions(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "import os\n"
        "# --8<-- [start:greet]\n"
        "\n"
        "def greet(name):\n"
        '    return f"hi {name}"\n'
        "\n"
        "\n"
        "# --8<-- [end:greet]\n"
        "# --8<-- [start:open]\n"
    )
    assert source_region(source, "greet") == 'def greet(name):\n    return f"hi {name}"\n'
    with pytest.raises(ValueError, match="no region 'nope'"):
        source_region(source, "nope")
    with pytest.raises(ValueError, match="region 'open' is not closed"):
        source_region(source, "open")


def test_an_empty_block(tmp_path: Path) -> None:
    page = tmp_path / "empty.md"
    page.write_text("```python\n```\n")
    assert extract_python_blocks(page) == [CodeBlock(page, 2, "python", "")]
