#!/usr/bin/env bash
# Installs tmux from the machine's Debian packages when it is missing: the
# kubectl plugin's live view is tested in a tmux pane, and a fresh machine
# needs nothing installed by hand.
set -euo pipefail

command -v tmux >/dev/null && exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "tmux is missing: install it (apt-get install tmux) or run as root on Debian" >&2
  exit 1
fi
echo "installing tmux from the machine's Debian packages" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tmux; } >"$log" 2>&1 ||
  { tail -20 "$log" >&2; exit 1; }
