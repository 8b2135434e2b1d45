#!/usr/bin/env bash
# The local lab: set up a fresh machine, then run containerd + the proxy + a pod lifecycle through it.
# Extra arguments go to `python -m runtimeproxy.lab` (e.g. --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python3 -m runtimeproxy.lab "$@"
