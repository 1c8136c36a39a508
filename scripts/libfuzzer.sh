#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer and AddressSanitizer (clang): the spec parser and the
# whole generator behind it (fuzz_spec, leak checking on), the CSR validation through spmm
# (fuzz_csr) and every registered op through the dispatcher (fuzz_ops), for SECONDS each
# (default 300). The built-in mutation driver of the same targets
# runs in CI (ctest, 15 s each); this is the deeper run before closing a reliability change.
#   bash scripts/libfuzzer.sh [SECONDS]       (after scripts/setup_env.sh; installs clang and libomp-dev as root if missing)
# A crash leaves its input as build/libfuzzer/crash-* (libFuzzer's naming); new coverage-increasing
# inputs accumulate in build/libfuzzer/corpus (never in the source tree).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-300}"
PY="$ROOT/.venv/bin/python"
BUILD="$ROOT/build/libfuzzer"
if ! command -v clang++ >/dev/null || ! dpkg -s libomp-dev >/dev/null 2>&1; then
  [[ "$(id -u)" -eq 0 ]] || { echo "libfuzzer.sh: clang++ or libomp-dev is missing (apt-get install clang libomp-dev)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libomp-dev >/dev/null
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTS=ON \
  -DGNNFUSE_LIBFUZZER=ON -DGNNFUSE_USE_CCACHE=OFF -DPython_EXECUTABLE="$PY" >/dev/null
cmake --build "$BUILD" --parallel 2 --target fuzz_spec fuzz_csr fuzz_ops
mkdir -p "$BUILD/corpus/spec" "$BUILD/corpus/csr" "$BUILD/corpus/ops"
cd "$BUILD"
status=0
# fuzz_spec: seeds are the specs (read only; new inputs go to the first, writable, corpus folder)
ASAN_OPTIONS="detect_leaks=1" ./fuzz_spec -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
  corpus/spec "$ROOT/ops" "$ROOT/tests/codegen/specs" 2>&1 | grep -E "^#[0-9]+ *DONE|stat::|ERROR|SUMMARY|crash-" || status=$?
[[ -z "$(ls crash-* leak-* 2>/dev/null)" ]] || status=1
ASAN_OPTIONS="detect_leaks=0" ./fuzz_csr -max_total_time="$SECONDS_EACH" -print_final_stats=1 corpus/csr 2>&1 |
  grep -E "^#[0-9]+ *DONE|stat::|ERROR|SUMMARY|crash-" || status=$?
[[ -z "$(ls crash-* leak-* 2>/dev/null)" ]] || status=1
# fuzz_ops: each input is one call (its bytes steer the choices); a finding also leaves
# fuzz-ops-repro.py, a Python reproducer
# (allocator_may_return_null: extents of 2^40 are passed on purpose; such an allocation must fail
# as in production, and the op refuse with a named error)
ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1" ./fuzz_ops -max_total_time="$SECONDS_EACH" -print_final_stats=1 -max_len=256 corpus/ops 2>&1 |
  grep -E "^#[0-9]+ *DONE|stat::|ERROR|SUMMARY|crash-|FINDING" || status=$?
[[ -z "$(ls crash-* leak-* 2>/dev/null)" ]] || status=1
exit "$status"
