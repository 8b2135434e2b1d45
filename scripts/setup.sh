#!/usr/bin/env bash
# Installs everything the lab and the tests need on a fresh Debian machine (run as root):
# containerd + runc + busybox (for the offline images), docker-registry + CNI plugins (for the conformance
# lab) from Debian, the project from PyPI deps, the compiled test peers from peers/ (with any Go: Debian's
# golang-go where the machine has none).
set -euo pipefail
cd "$(dirname "$0")/.."

# prometheus: promtool and a real Prometheus server for the metrics tests; docker.io: Docker mode's e2e tests;
# python3-venv: the node install of docs/install.md (a virtualenv of Debian's python3), run as written by the tests;
# docker-registry, util-linux (ipcmk), procps, iproute2, iptables: critest's offline world (registry, CNI bridge).
# binutils: objdump (the glibc figure in bench/); debootstrap, patch: the release bundle is built in a Debian 11 root
# (scripts/build_binary.sh), the .deb tried in a Debian 12 one; rpm: rpmbuild for the .rpm; qemu-system-x86,
# qemu-utils, socat: the cgroup v2 + systemd node, a qemu guest (rplab.guest). libpfm4-dev: koordlet's perf
# counters, built with cgo (rplab.peers); openssl: the small cluster's certificates (rplab.cluster).
debian_packages=(containerd runc containernetworking-plugins busybox gcc libc6-dev prometheus docker.io python3-venv
  docker-registry util-linux procps iproute2 iptables binutils debootstrap patch rpm qemu-system-x86 qemu-utils socat
  libpfm4-dev openssl)
missing=()
for package in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The project lives in a virtualenv of this checkout's own (Debian's python3 refuses pip outside one, PEP 668;
# and a shared install would run another checkout's code). lab.sh and test.sh run from it.
venv="${RUNTIMEPROXY_VENV:-$PWD/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the virtualenv $venv"
  python3 -m venv "$venv"
fi
# The docs extra: tests/test_docs.py builds the docs site with mkdocs --strict (broken links and pages fail it).
echo "setup: installing runtimeproxy and its test and docs dependencies into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,docs]'

# The compiled test peers (crictl, critest's specs, the bench's Go client ...): built from peers/ with the Go module
# proxy's modules at the versions peers/go.mod pins, cached per source digest (a second run builds nothing). The
# crictl and critest tests need them, so a build that fails fails here. The real counterparts (the kubelet,
# koord-runtime-proxy, koordlet, kube-apiserver, etcd) are not built here, so the lab never waits for them:
# scripts/test.sh builds them (`rplab.peers --counterparts`), or their suites on first use. Debian 12's golang-go (1.19) is older than
# toolchain switching: rplab.peers uses it once to download the toolchain peers/go.mod names from the module proxy.
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ] && [ ! -x /usr/lib/go/bin/go ]; then
  echo "setup: installing Debian's golang-go"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go >/dev/null
fi
echo "setup: building the compiled test peers (peers/) at ${SECONDS} s"
"$venv/bin/python" -m rplab.peers

# The runtime matrix (rplab/runtimes.py): the newest containerd and dockerd, which scripts/test.sh's second pass
# runs on (other Debian releases' packages unpacked into a cache, never installed; containerd built with Go).
# RUNTIMEPROXY_FETCH_RUNTIMES=0 skips it; `python -m rplab.runtimes fetch NAME...` fetches any other.
if [ "${RUNTIMEPROXY_FETCH_RUNTIMES:-1}" != 0 ]; then
  read -r newest_containerd newest_dockerd < <("$venv/bin/python" -m rplab.runtimes newest)
  echo "setup: fetching $newest_containerd and $newest_dockerd at ${SECONDS} s"
  "$venv/bin/python" -m rplab.runtimes fetch "$newest_containerd" "$newest_dockerd" >/dev/null
fi
echo "setup: done in ${SECONDS} s"
