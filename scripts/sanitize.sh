#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the C++ test suites (the generator, the
# ops through the dispatcher, the SIMT emulator running CUDA kernels on fibers), then ctest,
# which runs the fuzz targets too (fuzz_spec, fuzz_csr, fuzz_ops: every registered op) for
# GNNFUSE_FUZZ_SECONDS each under the sanitizers. Any finding aborts the test that hit it.
#   bash scripts/sanitize.sh            (needs scripts/setup_env.sh's .venv; ~15 min on 2 cores)
# Leak checking is on for the torch-free tests (generator, emulator) and off for the tests
# linking libtorch (torch keeps global allocations alive until exit); vptr checks are off
# (libtorch's RTTI is not instrumented).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build/sanitize"
PY="$ROOT/.venv/bin/python"
FLAGS="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTS=ON \
  -DPython_EXECUTABLE="$PY" -DGNNFUSE_USE_CCACHE=OFF \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$BUILD" --parallel 2
cd "$BUILD"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for src in "$ROOT"/tests/codegen/*.cpp; do  # torch-free: leaks checked too
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" "./$(basename "${src%.cpp}")" --gtest_brief=1 || status=$?
done
# The emulator's tests (torch-free; built where CUDA's headers are found): its fibers switch
# stacks under AddressSanitizer's fiber annotations.
if [ -x ./test_simt ]; then
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" ./test_simt --gtest_brief=1 || status=$?
fi
# allocator_may_return_null: an allocation too large for ASan's allocator fails as in production
# (fuzz_ops passes extents of 2^40 on purpose: the op must refuse with a named error).
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" ctest --output-on-failure --parallel 2 || status=$?
exit "${status:-0}"
