#!/usr/bin/env bash
# Builds the release bundle of koord-runtime-proxy and runtimeproxyctl for nodes without Python 3.11 (see docs/install.md,
# "The release bundle and the node packages"), in a Debian 11 root so it runs on glibc 2.31 and later:
#
#   scripts/build_binary.sh [--wheel FILE] [--out DIR] [--packages]
#
# Writes DIR/koord-runtime-proxy/ (the bundle: the executable, runtimeproxyctl linked to it, _internal/), the
# tarball DIR/koord-runtime-proxy_<version>_linux_<arch>.tar.gz and, with --packages, the node packages
# DIR/koord-runtime-proxy_<version>_<arch>.deb and DIR/koord-runtime-proxy-<version>-1.<arch>.rpm (default DIR:
# dist/). Needs root (debootstrap, chroot), Debian's debootstrap, patch and rpm, and the Debian mirror and PyPI;
# the root and its Python are built once and cached under ~/.cache/runtimeproxy/roots. rplab/release.py says why it is built this way.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[ -x "$python" ] || { echo "build_binary: run scripts/setup.sh first (it makes $repo/.venv)" >&2; exit 1; }
cd "$repo"
exec "$python" -m rplab.release "$@"
