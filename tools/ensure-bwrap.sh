#!/usr/bin/env bash
# Source me: makes sure bubblewrap (`bwrap`, the sandbox every tool process runs in) is
# installed, installing the Debian/Ubuntu package when this runs as root with apt-get
# (CI, containers), else saying how. dsh itself never runs a tool unsandboxed because
# bwrap is missing: it fails with the same advice (or runs it only under
# [sandbox] mode = "off", written explicitly in a preset).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-bwrap: installing bubblewrap (apt-get)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } >/dev/null \
      || echo "ensure-bwrap: apt-get could not install bubblewrap" >&2
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-bwrap: installing bubblewrap (sudo apt-get)" >&2
    { sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } >/dev/null \
      || echo "ensure-bwrap: sudo apt-get could not install bubblewrap" >&2
  fi
fi
if ! command -v bwrap >/dev/null 2>&1; then
  echo "ensure-bwrap: bubblewrap (bwrap) is not installed; dsh runs every tool process in it." >&2
  echo "  Debian/Ubuntu: sudo apt-get install bubblewrap   Fedora: sudo dnf install bubblewrap" >&2
  echo "  Arch: sudo pacman -S bubblewrap   (or set [sandbox] mode = \"off\" in a preset)" >&2
  if [ "${CI:-}" = "true" ]; then
    return 1 2>/dev/null || exit 1
  fi
fi
