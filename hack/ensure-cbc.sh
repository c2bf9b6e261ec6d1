#!/usr/bin/env bash
# Installs CBC, the integer program solver `make optimum` computes the
# cheapest cluster with, from the machine's Debian packages when it is
# missing, as hack/ensure-tmux.sh installs tmux.
set -euo pipefail

command -v cbc >/dev/null && exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "cbc is missing: install it (apt-get install coinor-cbc) or run as root on Debian" >&2
  exit 1
fi
echo "installing cbc from the machine's Debian packages (coinor-cbc)" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends coinor-cbc; } >"$log" 2>&1 ||
  { tail -20 "$log" >&2; exit 1; }
