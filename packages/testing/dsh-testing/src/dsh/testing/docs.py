"""Code samples in Markdown pages, for tests that keep the samples running as written.

::

    blocks = extract_python_blocks("docs/writing-a-provider.md")
    run_python_blocks(blocks)  # in order, in one namespace, like a reader pasting them

A failing block raises its own exception with a traceback that points at the page:
each block is compiled under the page's path with its page line numbers (plus a note
naming the block).

A block that shows a region of a source file says so in an HTML comment on the line
before its fence (the comment is invisible once rendered)::

    <!-- source: packages/examples/x/src/dsh/x/_provider.py#provider -->
    ```python
    ...
    ```

:func:`source_region` reads such a region between the section markers of
pymdownx.snippets, ``# --8<-- [start:provider]`` and ``# --8<-- [end:provider]``, so
a test can check that the page shows the code as it is.
"""

from dsh.testing._docs import (
    CodeBlock,
    extract_blocks,
    extract_python_blocks,
    run_python_blocks,
    source_region,
)

__all__ = [
    "CodeBlock",
    "extract_blocks",
    "extract_python_blocks",
    "run_python_blocks",
    "source_region",
]
