#!/usr/bin/env bash
# Regenerate contracts/offload_pb2.py and contracts/offload_pb2_grpc.py from contracts/offload.proto
# with the official compiler (grpcio-tools' protoc). `-I` is the repository root, so the stub imports
# the messages as `from contracts import offload_pb2` (a package import that works on every host).
# Usage: scripts/gen-proto.sh [OUT_DIR]   (default: the repository; tests write elsewhere and compare)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo}"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python=python3
mkdir -p "$out"
cd "$repo"
"$python" -m grpc_tools.protoc -I . --python_out="$out" --grpc_python_out="$out" contracts/offload.proto
