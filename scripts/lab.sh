#!/usr/bin/env bash
# The local lab: set up a fresh machine, then run containerd + the proxy + a pod lifecycle through it.
# Extra arguments go to `python -m rplab` (e.g. --keep). `bash scripts/lab.sh docker` (or --docker):
# the same lifecycle through cri-dockerd, the proxy in Docker mode and a private dockerd. `--runtime NAME`: which
# containerd or dockerd (e.g. containerd-2.1, dockerd-28; `python -m rplab.runtimes list`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
for arg in "$@"; do
  if [ "$arg" = docker ]; then args+=(--docker); else args+=("$arg"); fi
done
exec "${RUNTIMEPROXY_VENV:-$PWD/.venv}/bin/python" -m rplab "${args[@]}"
