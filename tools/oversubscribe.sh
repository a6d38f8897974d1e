#!/usr/bin/env bash
# Runs the test command with the CPUs oversubscribed, several times in a row: the check
# that no test depends on the machine being idle (a test waits for the condition it
# checks, within a generous bound; it never samples once).
#
# Starts LOOPS busy loops (default: twice the number of cores), runs the command ROUNDS
# times (default 3), stops the loops on every path (end, failure, Ctrl-C, SIGTERM), says
# how each round went, and exits non-zero if any round failed.
#
# Usage: tools/oversubscribe.sh [--loops N] [--rounds K] [-- COMMAND ...]
#        tools/oversubscribe.sh [--loops N] [--rounds K] [PACKAGE-NAME ...]
#   package names, or nothing: tools/test.sh with them (nothing: the whole suite)
#   tools/oversubscribe.sh                                   the whole suite, 3 rounds, 2x cores
#   tools/oversubscribe.sh --loops 4 --rounds 1 dsh-subprocess dsh-tool-shell
#   tools/oversubscribe.sh -- uv run --frozen pytest packages/tools/dsh-tool-shell/tests -q
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

loops=$((2 * $(nproc 2>/dev/null || echo 1)))
rounds=3
command=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --loops) loops="${2:?--loops needs a number}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
    --) shift; command=("$@"); break ;;
    -h | --help) sed -n '/^# Usage:/,/^set /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "oversubscribe.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) command+=("$1"); shift ;;
  esac
done
case "$loops" in '' | *[!0-9]*) echo "oversubscribe.sh: --loops $loops is not a number" >&2; exit 2 ;; esac
case "$rounds" in '' | *[!0-9]* | 0) echo "oversubscribe.sh: --rounds $rounds is not a positive number" >&2; exit 2 ;; esac
# Package names alone (no --): they go to tools/test.sh.
if [ "${#command[@]}" -eq 0 ] || compgen -G "packages/*/${command[0]}/pyproject.toml" >/dev/null; then
  command=(tools/test.sh "${command[@]}")
fi

# Job control: every background job (each busy loop, the command) gets a process group of
# its own, so a trap can end the command with everything it started.
set -m
busy=()
running=""
stop_command() {
  if [ -n "$running" ]; then
    kill -TERM -- "-$running" 2>/dev/null
    wait "$running" 2>/dev/null
    running=""
  fi
}
stop_loops() {
  local pid
  for pid in "${busy[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${busy[@]}"; do
    wait "$pid" 2>/dev/null
  done
  busy=()
}
trap 'stop_command; stop_loops' EXIT
trap 'echo "oversubscribe.sh: interrupted" >&2; exit 130' INT
trap 'echo "oversubscribe.sh: terminated" >&2; exit 143' TERM

for _ in $(seq 1 "$loops"); do
  # A shell busy loop: a process of its own, ended by the trap's SIGTERM.
  bash -c 'while :; do :; done' &
  busy+=("$!")
done
echo "oversubscribe.sh: $loops busy loops on $(nproc) cores; $rounds round(s) of: ${command[*]}" >&2

results=()
failed=0
for round in $(seq 1 "$rounds"); do
  echo "=== oversubscribe.sh: round $round of $rounds" >&2
  started=$SECONDS
  "${command[@]}" &
  running=$!
  wait "$running"
  rc=$?
  running=""
  if [ "$rc" -eq 0 ]; then
    results+=("round $round: passed in $((SECONDS - started)) s")
  else
    results+=("round $round: FAILED (exit $rc) after $((SECONDS - started)) s")
    failed=$((failed + 1))
  fi
done
stop_loops

printf 'oversubscribe.sh: %s\n' "${results[@]}" >&2
if [ "$failed" -gt 0 ]; then
  echo "oversubscribe.sh: $failed of $rounds round(s) failed" >&2
  exit 1
fi
echo "oversubscribe.sh: all $rounds round(s) passed with $loops busy loops" >&2
