#!/usr/bin/env bash
# Installs this checkout's gnnfuse build into build/install (cmake --install), builds the
# standalone example against it with find_package(Torch) and find_package(gnnfuse), and runs
# it: examples/cpp/build_and_run.sh <model.pt> <inputs.pt>
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
BUILD="${GNNFUSE_BUILD_DIR:-$ROOT/build}"
PREFIX="$ROOT/build/install"
OUT="$ROOT/build/example"
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
TORCH_PREFIX="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$ROOT/examples/cpp" -B "$OUT" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX" >/dev/null
cmake --build "$OUT" --parallel 2 >/dev/null
exec "$OUT/gnnfuse_infer" "$@"
