#!/bin/bash
# On a lent GPU (H100/H200, torch with CUDA, nvcc, no internet): the op battery of the generated
# CUDA kernels on the device, compute-sanitizer on a subset, and the GPU benchmarks.
# usage: bench/gpu/run.sh [--prebuilt DIR] [--budget-s SECONDS] [--sanitizer-s SECONDS] [--skip-bench] [--skip-battery]
#   --prebuilt DIR: DIR holds battery.tar.xz (build_battery.sh's programs), libgf_bench.so and
#                   graphs.npz, built on a machine without a GPU (same nvcc 13.0); without it
#                   everything is built here first (needs cmake, ninja, nvcc).
# Results go to $OUT (the device tool's folder) or bench/results/gpu-run: battery.log,
# sanitizer.log, gpu-<device>-<date>.json and its plot.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prebuilt="" budget=240 san_s=120 bench=1 battery=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --prebuilt) prebuilt=$(cd "$2" && pwd); shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;  # until the benchmarks end; the sanitizers get --sanitizer-s more
    --sanitizer-s) san_s=$2; shift 2 ;;
    --skip-bench) bench=0; shift ;;
    --skip-battery) battery=0; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
res=${OUT:-$root/bench/results/gpu-run}
mkdir -p "$res"
work=$(mktemp -d /tmp/gnnfuse-gpu.XXXX)
start=$SECONDS
stamp() { echo "[$((SECONDS - start)) s] $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$res/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$res/device.txt"

if [[ -n "$prebuilt" ]]; then
  tar -C "$work" -xJf "$prebuilt/battery.tar.xz"
  libdir=$prebuilt
else
  stamp "building (generator, battery, benchmark library)"
  cmake -S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTS=OFF >/dev/null && \
    cmake --build "$work/build" --target gnnfuse-gen -j 16 >/dev/null || { echo "generator build failed"; exit 1; }
  mkdir -p "$root/build" && cp "$work/build/gnnfuse-gen" "$root/build/gnnfuse-gen"
  ls "$root"/ops/*.spec | xargs -n1 basename | sed 's/.spec$//' | grep -v -x -e spgemm -e coarsen | \
    xargs -P 16 -I{} bash "$root/bench/gpu/build_battery.sh" "$work/b_{}" {} > "$res/build.log" 2>&1
  for d in "$work"/b_*; do cp "$d"/battery_* "$work/"; done
  bash "$root/bench/gpu/build_bench.sh" "$work/lib" >> "$res/build.log" 2>&1
  libdir=$work/lib
fi

if [[ $battery == 1 ]]; then
  stamp "battery: every family on small graphs (60 x 50; F 1, 3, 32, 129; fp64, fp32, fp16, bf16), larger ones (5000 x 4000 with long rows) and F 1500"
  one() {  # one() PROGRAM LABEL TIMEOUT [VAR=VALUE ...]
    local p=$1 label=$2 t=$3; shift 3
    local o r; o=$(env "$@" timeout "$t" "$p" 2>&1); r=$?
    printf "== %s %s rc=%d\n%s\n" "$(basename "$p")" "$label" $r "$(echo "$o" | tail -30)"
  }
  export -f one
  progs=$(find "$work" -maxdepth 1 -type f -name 'battery_*' | sort)
  { echo "$progs" | xargs -P 16 -I{} bash -c 'one {} small 150'
    echo "$progs" | xargs -P 16 -I{} bash -c 'one {} large 150 BATTERY_ROWS=5000 BATTERY_COLS=4000 HARNESS_NO_HALF=1'
    echo "$progs" | xargs -P 16 -I{} bash -c 'one {} wideF 100 HARNESS_BIGF=1'; } > "$res/battery.log"
  awk '/^== /{h=$0} /all ok|FAILED|CUDA ERROR/{print h " :: " $0}' "$res/battery.log" > "$res/battery_summary.txt"
  grep -c "" "$res/battery_summary.txt" | sed 's/^/battery result lines: /'
  grep -v ":: all ok" "$res/battery_summary.txt" | head -40
  grep "^== " "$res/battery.log" | grep -v "rc=0" | head -40
fi

if [[ $bench == 1 ]]; then
  left=$((budget - (SECONDS - start)))
  stamp "benchmarks (budget ${left} s)"
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9_-')
  json="$res/gpu-$name-$(date +%Y-%m-%d).json"
  graphs=()
  [[ -f "$libdir/graphs.npz" ]] && graphs=(--graphs-npz "$libdir/graphs.npz")
  PYTHONUNBUFFERED=1 python3 "$root/bench/gpu/bench_gpu.py" --lib "$libdir/libgf_bench.so" "${graphs[@]}" \
    --budget-s "$left" --commit "${GNNFUSE_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}" --out "$json" 2>&1 | tee "$res/bench.log" | tail -60
  python3 "$root/bench/gpu/plot_gpu.py" "$json" "${json%.json}.png" >/dev/null 2>&1 || echo "(no plot)"
fi
if [[ $battery == 1 ]]; then
  stamp "compute-sanitizer (memcheck, racecheck, synccheck) on spmm, sddmm_spmm, gat at F 32 without half"
  : > "$res/sanitizer.log"
  for job in spmm:memcheck gat:memcheck sddmm_spmm:memcheck spmm:racecheck gat:racecheck spmm:synccheck; do
    fam=${job%%:*} tool=${job##*:}
    if (( SECONDS - start > budget + san_s - 30 )); then echo "sanitizer: out of time before $job"; break; fi
    [[ -x "$work/battery_$fam" ]] || continue
    BATTERY_F=32 HARNESS_NO_HALF=1 timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 "$work/battery_$fam" > "$work/san.txt" 2>&1
    r=$?
    echo "== $fam $tool rc=$r" >> "$res/sanitizer.log"; tail -25 "$work/san.txt" >> "$res/sanitizer.log"
    echo "sanitizer $fam $tool rc=$r $(grep -E 'ERROR SUMMARY|all ok|FAILED' "$work/san.txt" | tr '\n' ' ')"
  done
fi
stamp "done"
