#!/usr/bin/env bash
# The test command: set up a fresh machine, then run the whole suite, e2e against real containerd and dockerd
# (this machine's own: Debian 12's containerd 1.6 and dockerd 20.10); then a second pass of the suites that
# drive a runtime hardest on the newest containerd and dockerd of the runtime matrix (rplab/runtimes.py); then
# the real counterparts' suites and the cgroup v2 + systemd guest; then the "Tested with" table of both passes
# (reports/tested-with.md).
# Extra arguments go to pytest and skip the second pass (e.g. scripts/test.sh -k lifecycle).
# RUNTIMEPROXY_SECOND_PASS=0 skips it too.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${RUNTIMEPROXY_VENV:-$PWD/.venv}/bin/python"
reports="${RUNTIMEPROXY_REPORT_DIR:-$PWD/reports}"
mkdir -p "$reports"
rm -f "$reports"/tested-with-*.json "$reports/tested-with.md"
bash scripts/setup.sh

# e2e tests fail instead of skipping when the machine cannot run containerd; each pass records its outcomes as
# this script's (rplab.tested_with: `.venv/bin/python -m rplab.tested_with --docs` commits a clean run's records).
export RUNTIMEPROXY_REQUIRE_E2E=1 RUNTIMEPROXY_TESTED_WITH=scripts/test.sh
status=0
# Each pass ends with its slowest tests (what docs/development.md's costs are read from).
slowest=(--durations=25)
# The real counterparts (the kubelet, koord-runtime-proxy, koordlet, kube-apiserver, etcd: minutes each to build on
# a machine with no Go cache, nothing once cached) are built in the background while the first and second passes
# run, as an idle-priority process (SCHED_IDLE: it gets only the CPU the suites leave, much of the time they wait
# on containers); their suites run after both passes, in a process of their own (a test that needs one sooner
# waits for its build: rplab.peers builds each binary once). Begun during set-up instead, it gained nothing. The
# newest kubelet, which only the cgroup v2 guest runs (last), is built last: the host's counterpart suites wait
# only for theirs (`--host-only`) and run while it builds.
counterpart_suites=(tests/e2e/test_real_kubelet.py tests/e2e/test_koord_differential.py tests/e2e/test_koordlet.py
  tests/e2e/test_kubelet_resize.py tests/e2e/test_kubelet_restart.py)
counterparts_log="$reports/counterpart-peers.log"
counterparts_build=
if [ $# -eq 0 ]; then
  : > "$counterparts_log"  # appended to by this build and by the wait for the host's below
  counterparts=(--counterparts)  # without the guest's kubelet, only the host's
  if [ "${RUNTIMEPROXY_GUEST_KUBELET:-1}" != 1 ]; then counterparts+=(--host-only); fi
  chrt --idle 0 nice -n 19 "$python" -m rplab.peers "${counterparts[@]}" >> "$counterparts_log" 2>&1 &
  counterparts_build=$!
fi
# A process and its descendants back to the normal scheduling class and niceness (a build the next suite needs).
to_normal_priority() {
  local child
  chrt --other --pid 0 "$1" 2>/dev/null || true
  renice -n 0 -p "$1" >/dev/null 2>&1 || true
  for child in $(pgrep -P "$1" || true); do to_normal_priority "$child"; done
}
# The cgroup v2 + systemd node (a qemu guest) runs in a pytest process of its own, last: inside the long
# first-pass process its emulated machine twice stalled (a restore that never answered, a cold boot stopped at
# 0.9 s), while a fresh process brought it up every time. The real kubelet in the guest
# (test_cgroup_v2_kubelet.py, about 5 minutes on a quiet 2-core machine) runs there too;
# RUNTIMEPROXY_GUEST_KUBELET=0 leaves it out.
guest_tests=(tests/e2e/test_cgroup_v2.py)
guest_kubelet=tests/e2e/test_cgroup_v2_kubelet.py
if [ "${RUNTIMEPROXY_GUEST_KUBELET:-1}" = 1 ]; then guest_tests+=("$guest_kubelet"); fi
# Node operations under the guest's kubelet (test_guest_node_ops.py: the .deb installed, upgraded, restarted,
# killed; containerd and the plugin restarted; a full state disk; about 12 minutes under emulation) run where the
# hour allows: RUNTIMEPROXY_NODE_OPS=1 always, 0 never, unset when the run so far took under 35 minutes (a run with
# warm caches, at 31-33 minutes, ends at about 49; one with empty caches reaches the guest at about 45 minutes and
# leaves them out, saying so).
node_ops=tests/e2e/test_guest_node_ops.py
node_ops_until_seconds=2100
first_pass=()
if [ $# -eq 0 ]; then
  for suite in "${guest_tests[@]}" "$guest_kubelet" "$node_ops" "${counterpart_suites[@]}"; do
    first_pass+=(--ignore="$suite")
  done
fi
started=$SECONDS
"$python" -m pytest "${slowest[@]}" "${first_pass[@]}" "$@" || status=$?
echo "test.sh: the first pass took $((SECONDS - started)) s"
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi

# Second pass: what differs by runtime version (CRI answers, hooks' effects in the OCI spec, swap, the store's
# rebuild after a restart and the reconciliation after a kill mid-call, NRI with the project's and NRI's own stub
# plugins, crictl, critest's specs (about 3 min more: direct and three proxies), the kubelet's CRI client, Docker
# mode's wire) on the newest containerd and dockerd; the real kubelet (about 40 s) on them after the
# counterparts' build. (test_nri_native.py names its runtimes itself, containerd 1.6, 1.7 and 2.4: it runs in the
# first pass.)
second_pass=(tests/e2e/test_differential.py tests/e2e/test_hooks.py tests/e2e/test_swap.py tests/e2e/test_nri.py
  tests/e2e/test_answers.py tests/e2e/test_post_hooks.py tests/e2e/test_crash_reconcile.py tests/e2e/test_crictl.py
  tests/e2e/test_cri_client.py tests/e2e/test_nri_stub.py tests/e2e/test_critest.py
  tests/e2e/test_docker_replay.py tests/e2e/test_docker_cli.py tests/e2e/test_nri_docker.py)
second_pass_counterparts=(tests/e2e/test_real_kubelet.py)
newest=()
if [ $# -eq 0 ] && [ "${RUNTIMEPROXY_SECOND_PASS:-1}" != 0 ]; then
  read -r containerd dockerd < <("$python" -m rplab.runtimes newest)
  newest=(env RUNTIMEPROXY_RUNTIME="$containerd" RUNTIMEPROXY_DOCKERD="$dockerd")
  echo "test.sh: second pass on $containerd and $dockerd"
  started=$SECONDS
  "${newest[@]}" "$python" -m pytest -q "${slowest[@]}" "${second_pass[@]}" || status=$?
  echo "test.sh: second pass took $((SECONDS - started)) s"
fi

if [ $# -eq 0 ]; then
  started=$SECONDS
  if ! "$python" -m rplab.peers --counterparts --host-only >> "$counterparts_log" 2>&1; then
    echo "test.sh: building the counterparts failed (their suites build what they need again):" >&2
    tail -20 "$counterparts_log" >&2
  fi
  echo "test.sh: the real counterparts (waited $((SECONDS - started)) s for the host's builds after the passes)"
  "$python" -m pytest -q "${slowest[@]}" "${counterpart_suites[@]}" || status=$?
  if ((${#newest[@]})); then
    echo "test.sh: the second pass's real kubelet on $containerd"
    "${newest[@]}" "$python" -m pytest -q "${slowest[@]}" "${second_pass_counterparts[@]}" || status=$?
  fi
  echo "test.sh: the cgroup v2 + systemd node"
  # The guest's kubelet, if still building, takes its share of the CPU beside the emulated machine from here on.
  to_normal_priority "$counterparts_build"
  case "${RUNTIMEPROXY_NODE_OPS:-auto}" in
    1) guest_tests+=("$node_ops") ;;
    0) echo "test.sh: node operations left out (RUNTIMEPROXY_NODE_OPS=0)" ;;
    *) if ((SECONDS < node_ops_until_seconds)); then guest_tests+=("$node_ops")
       else echo "test.sh: node operations left out: the run took $SECONDS s so far, over $node_ops_until_seconds" \
         "(RUNTIMEPROXY_NODE_OPS=1 runs them)"; fi ;;
  esac
  "$python" -m pytest -q "${slowest[@]}" "${guest_tests[@]}" || status=$?
  if ! wait "$counterparts_build"; then
    echo "test.sh: building the counterparts failed (see below)" >&2
  fi
  cat "$counterparts_log"
  echo "test.sh: all done at $SECONDS s"
fi
"$python" -m rplab.tested_with || true
exit "$status"
