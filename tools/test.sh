#!/usr/bin/env bash
# The README's test command: every package's tests, each in an environment that holds only
# that package and its declared dependencies (which proves the dependency rule at run time),
# then the cross-package tests in tests-integration/.
#
# Installs what it needs: uv (from PyPI, if missing), bubblewrap (the sandbox; Debian package,
# when run as root or with sudo), the Python packages (uv.lock), and the pinned Codex CLI,
# claude-agent-acp and Gemini CLI (npm) that the codex and acp providers' tests drive for real, the
# TypeScript ACP SDK (npm) that drives `dsh acp` in dsh-acp's tests, and the TypeScript MCP SDK
# (npm) that drives `dsh mcp` in dsh-mcp's tests.
#
# Usage: tools/test.sh [PACKAGE-NAME ...]     (default: every package, then integration)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/ensure-uv.sh
source tools/ensure-bwrap.sh

uv sync --frozen --quiet
tools/install-codex.sh >/dev/null
tools/install-claude-agent-acp.sh >/dev/null
tools/install-gemini-cli.sh >/dev/null
tools/install-acp-sdk.sh >/dev/null
tools/install-mcp-sdk.sh >/dev/null

envs="${DSH_PACKAGE_ENVS:-$PWD/.venvs}"
selected=("$@")
failed=()
summary=()

run_package() {
  local dir="$1" name
  name="$(basename "$dir")"
  if [ ! -d "$dir/tests" ]; then
    echo "test.sh: $name has no tests/ folder" >&2
    failed+=("$name (no tests)")
    return
  fi
  echo "=== $name" >&2
  export UV_PROJECT_ENVIRONMENT="$envs/$name"
  uv sync --frozen --quiet --package "$name"
  local started=$SECONDS rc=0
  uv run --frozen --no-sync --package "$name" python -m pytest "$dir/tests" -q -p no:cacheprovider || rc=$?
  unset UV_PROJECT_ENVIRONMENT
  if [ "$rc" -eq 5 ]; then
    echo "test.sh: $name collected no tests" >&2
    failed+=("$name (no tests collected)")
  elif [ "$rc" -ne 0 ]; then
    failed+=("$name (pytest exit $rc)")
  fi
  summary+=("$name: exit $rc in $((SECONDS - started)) s")
}

for dir in packages/*/*/; do
  dir="${dir%/}"
  if [ "${#selected[@]}" -gt 0 ]; then
    case " ${selected[*]} " in *" $(basename "$dir") "*) ;; *) continue ;; esac
  fi
  run_package "$dir"
done

if [ "${#selected[@]}" -eq 0 ]; then
  echo "=== tests-integration" >&2
  started=$SECONDS
  rc=0
  uv run --frozen python -m pytest tests-integration -q -p no:cacheprovider || rc=$?
  [ "$rc" -eq 0 ] || failed+=("tests-integration (pytest exit $rc)")
  summary+=("tests-integration: exit $rc in $((SECONDS - started)) s")
fi

printf '%s\n' "${summary[@]}" >&2
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "all tests passed" >&2
