"""The run's tape, announced to every process of the tree through the environment.

``dsh run --record`` / ``--replay`` (and the ``tape`` pytest fixture) start a tape
proxy (dsh-tape) and set :data:`TAPE_PROXY_VARIABLE` to its address with a secret
token, ``http://127.0.0.1:<port>/<token>``; the providers' child environments carry it
on (:func:`dsh.subprocess.provider_env`), so a provider in a ``dsh acp`` grandchild
sees it too. A provider whose child is an agent product points the product's model
base URL at :func:`taped_url` of it. The route form it builds (the proxy reads it)::

    <proxy>/x/<label>/<base64url(upstream base URL), no padding>

A recording proxy forwards ``<route>/<rest>`` to ``<upstream>/<rest>`` and records the
exchange under ``label``; a replaying one answers from the tape and contacts nothing.
Stdlib only: a provider needs no dsh-tape to honour a tape.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from urllib.parse import quote

from dsh.core.tapes import TAPE_PROXY_VARIABLE

__all__ = ["TAPE_PROXY_VARIABLE", "taped_url"]


def taped_url(upstream: str, label: str, environ: Mapping[str, str] | None = None) -> str:
    """``upstream`` (a model API's base URL) routed through the tape proxy that
    ``environ`` (default ``os.environ``) names in :data:`TAPE_PROXY_VARIABLE`;
    ``upstream`` itself when none is named (unset or empty). ``label`` names the
    product's calls on the tape (``"codex"``, ``"claude-code"``)."""
    source = os.environ if environ is None else environ
    proxy = (source.get(TAPE_PROXY_VARIABLE) or "").strip().rstrip("/")
    if not proxy:
        return upstream
    encoded = base64.urlsafe_b64encode(upstream.encode()).decode().rstrip("=")
    return f"{proxy}/x/{quote(label, safe='')}/{encoded}"
