#!/usr/bin/env bash
# The test command: set up a fresh machine, then run the whole suite, e2e against real containerd.
# Extra arguments go to pytest (e.g. scripts/test.sh -k lifecycle).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# e2e tests fail instead of skipping when the machine cannot run containerd.
export RUNTIMEPROXY_REQUIRE_E2E=1
status=0
"${RUNTIMEPROXY_VENV:-$PWD/.venv}/bin/python" -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$status"
