#!/usr/bin/env bash
# Builds single-file executables of koord-runtime-proxy and runtimeproxyctl from the wheel, for nodes
# without Python 3.11 (see README, "Get the binary"):
#
#   scripts/build_binary.sh [--wheel FILE] [--out DIR]
#
# The wheel (built here with `pip wheel --no-deps .` unless --wheel names one) and PyInstaller go into a
# private virtualenv in a temp dir, never into the system; PyInstaller --onefile then freezes two tiny entry
# scripts. Writes DIR/koord-runtime-proxy and DIR/runtimeproxyctl (default DIR: dist/) plus, like the Go
# releases, the same files named <name>_<version>_linux_<arch> (hard links). The binaries need only the
# glibc of the build machine or newer: build on the oldest distribution you target.
#
# Environment: PYTHON (default python3; >= 3.11 with a shared libpython), PYINSTALLER (pip requirement,
# default the pinned version below).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
wheel=""
out="$repo/dist"
python=${PYTHON:-python3}
pyinstaller=${PYINSTALLER:-pyinstaller==6.22.3}

usage() { echo "usage: $0 [--wheel FILE] [--out DIR]" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --wheel) (($# >= 2)) || usage; wheel=$(realpath "$2"); shift 2 ;;
    --out) (($# >= 2)) || usage; out=$(realpath -m "$2"); shift 2 ;;
    *) usage ;;
  esac
done
command -v objdump >/dev/null || { echo "build_binary: objdump not found (apt-get install -y binutils)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/rp-binary-XXXXXX")
trap 'rm -rf "$work"' EXIT
pip_quiet=(--quiet --disable-pip-version-check)

if [[ -z "$wheel" ]]; then
  echo "build_binary: building the wheel"
  "$python" -m pip wheel "${pip_quiet[@]}" --no-deps -w "$work/wheel" "$repo"
  wheel=$(ls "$work"/wheel/runtimeproxy-*.whl)
fi
version=$(basename "$wheel" | cut -d- -f2)  # runtimeproxy-<version>-py3-none-any.whl

echo "build_binary: installing $(basename "$wheel") and $pyinstaller into a private virtualenv"
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install "${pip_quiet[@]}" "$wheel" "$pyinstaller"

mkdir -p "$work/entry" "$out"
# name -> module whose main() the binary runs (the wheel's console_scripts).
declare -A entry_points=([koord-runtime-proxy]=runtimeproxy.cli [runtimeproxyctl]=runtimeproxy.admin.ctl)
for name in koord-runtime-proxy runtimeproxyctl; do
  module=${entry_points[$name]}
  printf 'from %s import main\n\nraise SystemExit(main())\n' "$module" >"$work/entry/$name.py"
  echo "build_binary: freezing $name"
  # The generated protobuf modules are collected whole: reflection serves every descriptor they register.
  # The lab (test harness) and tkinter are never imported at run time.
  (cd "$work" && "$work/venv/bin/pyinstaller" --log-level WARN --noconfirm --onefile --strip --name "$name" \
    --distpath "$work/dist" --workpath "$work/build" --specpath "$work/spec" \
    --collect-submodules runtimeproxy.pb \
    --hidden-import grpc_health.v1.health --hidden-import grpc_reflection.v1alpha.reflection \
    --hidden-import google.protobuf.internal.builder \
    --exclude-module rplab --exclude-module tkinter --exclude-module pytest \
    "$work/entry/$name.py")
  install -m 0755 "$work/dist/$name" "$out/$name"
  ln -f "$out/$name" "$out/${name}_${version}_linux_$(uname -m)"
  echo "build_binary: $out/$name ($out/${name}_${version}_linux_$(uname -m)), $(du -h "$out/$name" | cut -f1)"
done
