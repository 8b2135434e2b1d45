#!/usr/bin/env bash
# Regenerates the Python protobuf/gRPC modules under runtimeproxy/pb from protos/.
#
#   scripts/gen_protos.sh            # rewrite runtimeproxy/pb in place
#   scripts/gen_protos.sh OUT_DIR    # write elsewhere (the staleness test compares the two)
#
# Needs grpcio-tools at the version pinned in setup.cfg's "test" extra: the generated
# code records the protoc/grpc versions, so another version produces a (harmless) diff.
# Environment: PYTHON (default: the checkout's .venv, which scripts/setup.sh makes; else python3).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$top/.venv/bin/python}
[ -x "$python" ] || python=python3
out=${1:-$top/runtimeproxy/pb}
cd "$top/protos"

mapfile -t sources < <(find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
# google/rpc/status.proto (ttrpc's error envelope) comes with googleapis-common-protos, an install requirement.
googleapis=$("$python" -c 'import pathlib, google.rpc.status_pb2 as s; print(pathlib.Path(s.__file__).parents[2])')
rm -rf "$out"
mkdir -p "$out"
"$python" -m grpc_tools.protoc -I . -I "$googleapis" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "${sources[@]}"

# protoc writes imports relative to protos/; make them absolute inside our package.
find "$out" -name '*_pb2_grpc.py' -print0 |
  xargs -0 sed -i -E 's/^from (admin|cri|hooks|nri|ttrpc)\./from runtimeproxy.pb.\1./'
find "$out" -type d -exec sh -c 'for d; do : > "$d/__init__.py"; done' _ {} +

# NRI's api.proto names a value of its Field enum `None`, which protoc writes into the .pyi stub as an attribute
# no Python can spell (mypy refuses the file, so the NRI messages went untyped). The value stays in the module
# (api_pb2.Field.Value("None")); the stub drops its two lines so mypy reads every NRI message's types.
sed -i -E '/^ *None: (_ClassVar\[Field\]|Field)$/d' "$out/nri/pkg/api/v1alpha1/api_pb2.pyi"
