#!/usr/bin/env bash
# The documentation site, built locally (no public address yet; sources in docs/, config
# in mkdocs.yml; tools/docs/README.md says how samples are checked and charts are made).
#
#   tools/docs.sh             check that every config table matches its pydantic model
#                             (tools/docs/config_tables.py --check), build the site into
#                             site/ with `mkdocs build --strict` (a broken link or anchor,
#                             a missing reference, a page the nav does not name: each
#                             fails), then run every code sample (tools/docs/check_samples.py)
#                             and the checkers' own tests
#   tools/docs.sh serve       the same site, live-reloading, on http://127.0.0.1:8000/
#   tools/docs.sh samples [PAGE...]   only the sample check (-v lists every sample)
#   tools/docs.sh tables      regenerate the config tables from the models (--write)
#   tools/docs.sh charts      rerun the charted benchmarks (dsh and its peers) into
#                             docs/assets/bench/*.json, then redraw docs/assets/charts/*.svg
#
# Installs what it needs: uv (tools/ensure-uv.sh), then the workspace with the `docs`
# dependency group (MkDocs, Material, mkdocstrings) into an environment of its own,
# .venvs/docs (DSH_DOCS_ENV to put it elsewhere). `charts` also installs the peer
# frameworks into .venvs/bench-peers (never into the project's lock).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/ensure-uv.sh
source tools/ensure-bwrap.sh

export UV_PROJECT_ENVIRONMENT="${DSH_DOCS_ENV:-$PWD/.venvs/docs}"
export NO_MKDOCS_2_WARNING=1 # Material's banner about MkDocs 2.0: not about this site
uv sync --frozen --quiet --group docs
python="$UV_PROJECT_ENVIRONMENT/bin/python"

action="${1:-build}"
[ "$#" -gt 0 ] && shift
case "$action" in
  build)
    started=$SECONDS
    "$python" tools/docs/config_tables.py --check
    "$python" tools/docs/gen_reference.py --check
    "$python" tools/docs/charts.py --render-only
    # Not --quiet: it filters warnings out before --strict counts them.
    "$python" -m mkdocs build --strict
    echo "docs: site/ built (mkdocs build --strict) in $((SECONDS - started)) s" >&2
    "$python" tools/docs/check_samples.py
    "$python" -m pytest -q -p no:cacheprovider tools/docs
    echo "docs: built and every sample checked in $((SECONDS - started)) s" >&2
    ;;
  serve)
    "$python" tools/docs/gen_reference.py
    "$python" tools/docs/charts.py --render-only
    exec "$python" -m mkdocs serve "$@"
    ;;
  samples)
    exec "$python" tools/docs/check_samples.py "$@"
    ;;
  charts)
    exec "$python" tools/docs/charts.py "$@"
    ;;
  tables)
    exec "$python" tools/docs/config_tables.py --write "$@"
    ;;
  *)
    echo "usage: tools/docs.sh [build|serve|samples [PAGE...]|charts [--only NAME]|tables [PAGE...]]" >&2
    exit 2
    ;;
esac
