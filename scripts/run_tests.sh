#!/usr/bin/env bash
# Sets up (scripts/setup_env.sh), then runs every test suite: the GoogleTest suites through
# ctest (a CMake test build in build/tests), then pytest. Exits non-zero if any fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
PY="$ROOT/.venv/bin/python"
BUILD="$ROOT/build/tests"

generator=()
if [[ ! -f "$BUILD/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTS=ON \
  -DPython_EXECUTABLE="$PY" >/dev/null
cmake --build "$BUILD" --parallel 2

failed=()
echo "== ctest (C++: tests/cpp, tests/codegen)"
(cd "$BUILD" && ctest --output-on-failure --parallel 2) || failed+=(ctest)
echo "== pytest (tests/python)"
"$PY" -m pytest -q tests/python || failed+=(pytest)

# On success pytest's summary stays the last line of the output.
if ((${#failed[@]} > 0)); then
  echo "run_tests: FAILED: ${failed[*]}" >&2
  exit 1
fi
