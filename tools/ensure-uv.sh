#!/usr/bin/env bash
# Source me: puts `uv` on PATH, installing it from PyPI with pip if it is missing.
if ! command -v uv >/dev/null 2>&1; then
  export PATH="$HOME/.local/bin:$PATH"
fi
if ! command -v uv >/dev/null 2>&1; then
  echo "ensure-uv: installing uv from PyPI" >&2
  python3 -m pip install --quiet --user uv 2>/dev/null \
    || python3 -m pip install --quiet uv 2>/dev/null \
    || python3 -m pip install --quiet --user --break-system-packages uv \
    || { echo "ensure-uv: could not install uv (needs python3 with pip)" >&2; return 1 2>/dev/null || exit 1; }
  hash -r
fi
command -v uv >/dev/null 2>&1 || { echo "ensure-uv: uv is installed but not on PATH" >&2; return 1 2>/dev/null || exit 1; }
