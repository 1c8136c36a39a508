#!/usr/bin/env bash
# Fetches files out of a wheel on PyPI into a folder: the parts of the CUDA toolkit this
# machine lacks, from NVIDIA's wheels (cusparse.h for bench/gpu/build_bench.sh, cuobjdump and
# nvdisasm for scripts/check_cuda.sh). Fetched files go into a build folder, never into the tree.
#
#   bash scripts/fetch_wheel_file.sh PACKAGE==VERSION DEST PATTERN...
#     PATTERN  a path inside the wheel as unzip takes it (e.g. 'nvidia/*/include/cusparse*.h');
#              the files land flat in DEST (unzip -j)
#
# pip download (its ordinary client, one request, no dependencies) with a short timeout and one
# retry, so that a machine without network fails in seconds; the exit status is then non-zero
# and the caller decides (check_cuda.sh reports its SASS checks as skipped).
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 PACKAGE==VERSION DEST PATTERN..." >&2
  exit 2
fi
req="$1"
dest="$2"
shift 2
mkdir -p "$dest"
wheel="$(mktemp -d "$dest/.wheel.XXXXXX")"  # beside DEST: the cuSPARSE wheel is large
trap 'rm -rf "$wheel"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --timeout 30 --retries 1 -d "$wheel" "$req"
unzip -q -o -j "$wheel"/*.whl "$@" -d "$dest"
