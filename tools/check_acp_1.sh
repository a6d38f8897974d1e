#!/usr/bin/env bash
# The ACP-facing tests against agent-client-protocol 1.0, while the workspace (uv.lock) stays on
# 0.12: dsh-acp and dsh-cli declare `agent-client-protocol>=0.12,<2` and must work with both.
#
# Builds a throwaway environment in a temp dir: the workspace packages dsh-acp needs (dsh-cli among
# its dev dependencies; editable, from uv.lock) plus agent-client-protocol==VERSION, resolved
# against the packages' declared ranges (so a range that excludes VERSION fails here).
# Then runs the dsh-acp tests (`dsh acp` included) in it: among them the Python SDK client
# (acp_sdk_client.py, checked to be VERSION) and the TypeScript SDK client driving a `dsh acp`
# that runs on VERSION.
#
# Usage: tools/check_acp_1.sh [PYTEST-ARG ...]
#   env ACP_1_VERSION overrides the version (default 1.0.0rc3, the newest 1.0 on PyPI; 1.0.0
#   once it is released).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/ensure-uv.sh

VERSION="${ACP_1_VERSION:-1.0.0rc3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/dsh-acp-1.XXXXXX")"
trap 'rm -rf "$work"' EXIT

tools/install-acp-sdk.sh >/dev/null

echo "check_acp_1.sh: environment with agent-client-protocol==$VERSION in $work" >&2
uv venv --quiet "$work/venv"
uv export --frozen --no-hashes --no-header --quiet --package dsh-acp \
  --no-emit-package agent-client-protocol >"$work/requirements.txt"
uv pip install --quiet --python "$work/venv/bin/python" -r "$work/requirements.txt" \
  "agent-client-protocol==$VERSION"
got="$("$work/venv/bin/python" -c \
  'from importlib.metadata import version; print(version("agent-client-protocol"))')"
if [[ "$got" != "$VERSION" ]]; then
  echo "check_acp_1.sh: installed agent-client-protocol $got, expected $VERSION" >&2
  exit 1
fi

echo "check_acp_1.sh: dsh-acp tests on agent-client-protocol $got" >&2
DSH_EXPECT_ACP_VERSION="$VERSION" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  packages/acp/dsh-acp/tests "$@"
