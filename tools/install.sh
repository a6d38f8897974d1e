#!/usr/bin/env bash
# Installs the `dsh` command from this checkout into your user's tools (`uv tool install`),
# until a release puts the dsh packages on the package index.
#
# Builds every workspace package's wheel from the checkout into a temporary folder, then
# installs dsh-cli (and the extra packages you name: providers, dsh-a2a, ...) from those
# wheels alone; the third-party dependencies come from the package index at the versions
# pinned in uv.lock. The tool gets an environment of its own (uv's tools folder) and its
# `dsh` goes to uv's executables folder (usually ~/.local/bin). Running it again reinstalls
# from the checkout as it is now (that is how to upgrade).
#
# Installs what it needs first: uv (from PyPI, if missing) and bubblewrap (`bwrap`, the
# sandbox every tool process runs in: the Debian package when run as root or with sudo;
# otherwise it says how).
#
# Usage: tools/install.sh [--all] [EXTRA-PACKAGE ...]
#   tools/install.sh                                   dsh-cli: run, acp, init, presets, demo
#   tools/install.sh dsh-subagent-codex dsh-a2a        plus the codex provider and `dsh a2a`
#   tools/install.sh --all                             plus every provider and server package
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
checkout="$PWD"

usage() { sed -n '/^# Usage:/,/^set /p' "$checkout/tools/install.sh" | sed -e '$d' -e 's/^# \{0,1\}//'; }

all=0
extras=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --all) all=1 ;;
    -*) echo "install.sh: unknown option $arg" >&2; usage >&2; exit 2 ;;
    *) extras+=("$arg") ;;
  esac
done

# The packages this checkout has (the workspace members' folder names are their names).
built=()
for dir in packages/*/*/pyproject.toml; do
  built+=("$(basename "$(dirname "$dir")")")
done

if [ "$all" = 1 ]; then
  for name in "${built[@]}"; do
    case "$name" in
      dsh-cli | dsh-testing | dsh-subagent-example-echo) ;;
      dsh-a2a) extras+=("dsh-a2a[sqlite]") ;;
      *) extras+=("$name") ;;
    esac
  done
fi

with=()
for extra in "${extras[@]}"; do
  base="${extra%%[*}"
  case " ${built[*]} " in
    *" $base "*) with+=(--with "$extra") ;;
    *)
      echo "install.sh: $base is not a package of this checkout; pick from:" >&2
      printf '  %s\n' "${built[@]}" >&2
      exit 2
      ;;
  esac
done

source tools/ensure-uv.sh
source tools/ensure-bwrap.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/dsh-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
wheels="$work/wheels"

echo "install.sh: building the workspace's wheels from $checkout" >&2
uv build --all-packages --wheel --quiet --out-dir "$wheels" >&2

# Every dsh-* package from the wheels just built, never from an index (an unrelated
# project could own the name there); everything else at uv.lock's versions.
for whl in "$wheels"/*.whl; do
  name="$(basename "$whl")"
  printf '%s @ file://%s\n' "$(printf '%s' "${name%%-*}" | tr '_' '-')" "$whl"
done >"$work/overrides.txt"
uv export --frozen --quiet --no-dev --all-packages --no-emit-workspace --no-hashes \
  --no-header --no-annotate --output-file "$work/constraints.txt" >/dev/null

echo "install.sh: installing dsh-cli${extras[*]:+ with ${extras[*]}} (uv tool install)" >&2
# From the temporary folder: the checkout's own uv settings (workspace sources) are not
# the tool's business.
(cd "$work" && uv tool install dsh-cli "${with[@]}" --reinstall \
  --find-links "$wheels" --overrides "$work/overrides.txt" --constraints "$work/constraints.txt" \
  --quiet)

bin_dir="$(uv tool dir --bin)"
if [ ! -x "$bin_dir/dsh" ]; then
  echo "install.sh: uv tool install finished but $bin_dir/dsh is not there" >&2
  exit 1
fi
echo "install.sh: installed $bin_dir/dsh"
if [ "$(command -v dsh 2>/dev/null || true)" = "$bin_dir/dsh" ]; then
  echo "install.sh: dsh is on your PATH; try: dsh --help"
else
  case ":$PATH:" in
    *":$bin_dir:"*)
      echo "install.sh: another dsh comes first on your PATH: $(command -v dsh)" ;;
    *)
      echo "install.sh: $bin_dir is not on your PATH; add it:"
      echo "  export PATH=\"$bin_dir:\$PATH\"     (or run: uv tool update-shell)" ;;
  esac
fi
