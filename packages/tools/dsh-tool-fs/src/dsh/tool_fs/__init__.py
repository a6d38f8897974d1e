"""dsh.tool_fs — file tools for agents, confined to the agent's working directory.

The plugin ``dsh-tool-fs`` registers ``read_file``, ``list_dir``, ``glob``, ``grep``
(permission ``allow``; kinds read / search) and ``write_file``, ``edit_file``
(permission ``ask``; kind edit). Every path is resolved (``..`` and symlinks
followed) against the calling agent's cwd, or the configured ``root``, and refused
when it lands outside. Writes are checked against the agent's sandbox policy
(``.git``, ``.dsh`` and the preset files are protected unless ``allow_write`` lists
them) and replace the file through a rename; hard-linked and special files are
refused; ``grep`` and ``glob`` are bounded in time. Outputs are capped, with a
``[truncated: ...]`` marker; ``read_file``'s result ``data`` also holds the lines
exactly as in the file (``{"text", "complete"}``), for callers that are not a model.

* :class:`FsConfig` — the plugin's config (``root``, ``tools``, ``prefix``,
  ``max_read_bytes`` and the other caps, ``grep_timeout``, ``allow_write``,
  ``sandbox``).
* :func:`fs_tools` — the :class:`~dsh.core.Tool` objects for a config, to register
  without the plugin.
"""

from dsh.tool_fs._config import FsConfig
from dsh.tool_fs._plugin import plugin
from dsh.tool_fs._tools import fs_tools

__all__ = ["FsConfig", "fs_tools", "plugin"]
