"""A real full disk for tests: a small tmpfs mounted for the test, and a filler file
that takes every free byte of it, so writes fail with ``ENOSPC`` from the kernel.

Mounting needs root (CI runs tests as root). Elsewhere :func:`small_tmpfs` skips the
test, and the dsh-testing pytest plugin turns that skip into a failure under
``CI=true``::

    from dsh.testing.disk import fill_up, small_tmpfs

    def test_full_disk(tmp_path):
        with small_tmpfs(tmp_path / "disk") as disk:
            filler = fill_up(disk)
            ...  # every new page on the disk now fails with ENOSPC
            filler.unlink()  # room again
"""

from dsh.testing._disk import fill_up, small_tmpfs

__all__ = ["fill_up", "small_tmpfs"]
