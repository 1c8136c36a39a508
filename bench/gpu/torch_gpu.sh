#!/bin/bash
# On a lent GPU (H100/H200: torch with CUDA, nvcc, cmake, ninja, torch_geometric, no internet): the
# PyTorch-level path. Builds libgnnfuse with its CUDA kernels for this device's architecture only,
# checks every op on the device against the CPU kernels (scripts/cuda_ops_smoke.py: also the cuSPARSE
# backend), times SpMM and SDDMM against the cuSPARSE backend, torch.sparse and PyG
# (bench/bench_ops_device.py), then runs bench/bench_layers.py --device cuda (our GCNConv / GATConv against PyG's, eager, then under
# torch.compile in a second process). Stages are chosen by name, each checks the time left.
#
# usage: bench/gpu/torch_gpu.sh [build] [smoke] [ops] [bench] [compile] [spgemm] [attention]   (none named: the first five)
#        bench/gpu/torch_gpu.sh issue26 [stages...]   issue 26's preset (below)
#          issue26: the Tensor-Core SpMM, CUDA SpGEMM and fused-attention targets. Named alone, the
#                  stages build smoke ops spgemm attention; with stages named, those (a warm machine
#                  keeps the build between calls: `issue26 build smoke ops`, then `issue26 spgemm attention`).
#                  ops: SpMM only, F 128 256, the rows the targets compare (gnnfuse[tc-bf16] with its
#                  first calls, gnnfuse[tc-bf16,graph] and cusparse[cached], both replayed in CUDA graphs,
#                  and gnnfuse[cusparse]), graphs reddit-like rmat-20-16 products-like pubmed
#                  soc-Slashdot0902 (the real ones where the npz or the datasets have them), up to
#                  --ops-s (default 240) seconds; spgemm: reddit-like and products-like (ogbn-products'
#                  size as an R-MAT) with peak memory and the workspace bound, then the regressions;
#                  attention as below. Results: ops.json, spgemm.json, spgemm-regressions.json,
#                  attention.json and issue26-logs.tar.gz (device.txt and every stage's log), 5 files.
#          attention: bench/bench_attention_device.py --device cuda (fused graph attention on the
#                  reddit-like graph, 233k nodes / 115M edges, bf16, HxD 1x128 and 8x16: forward,
#                  backward, deterministic, peak memory, against the unfused ops and PyG):
#                  attention.{log,json}
#          spgemm: bench/bench_spgemm.py --device cuda (SpGEMM and Pᵀ·A·P against torch.sparse, i.e.
#                  cuSPARSE SpGEMM chained, with peak device memory): spgemm.{log,json,png}; then
#                  --regressions (the shapes where cuSPARSE fails or returns zeros, cupy #10033 and
#                  ginkgo #1794, at full size): spgemm-regressions.{log,json}
#          [--budget-s S]      the whole call's seconds (default 540), stages start only with time left
#          [--build-dir DIR]   default build/torch-gpu (ignored by git: kept between calls on a warm machine)
#          [--arch A]          GNNFUSE_CUDA_GENCODE (default: the device's, 90a on an H100/H200)
#          [--jobs N]          ninja's jobs (default: every core)
#          [--npz PATH]        bench_gpu.py --export-npz's graphs (default: the first .gpu*/graphs.npz)
#          [--graphs "A B"]    eager graphs (default: pubmed rmat-20-16 soc-Slashdot0902 ca-HepPh copter2 rmat-18-16)
#          [--compile-graphs "A B"]  graphs of the compiled rows (default: rmat-20-16 soc-Slashdot0902 pubmed)
#          [--ops-graphs "A B"]   graphs of the ops stage (default: pubmed ca-HepPh soc-Slashdot0902 rmat-20-16;
#                              issue26: reddit-like rmat-20-16 products-like pubmed soc-Slashdot0902)
#          [--ops-s S]         the ops stage's seconds at most (default 120; issue26: 240), and a quarter of
#                              the time left (a third with issue26)
#          [--spgemm-graphs "A B"]  graphs of the spgemm stage (default: rmat-16-16 rmat-18-16 rmat-20-16;
#                              issue26: reddit-like products-like); it leaves 120 s to a following attention stage
#          [--compile-share F] the part of the time left after the eager run's start kept for compile (default 0.5)
#          [--autotune]        GNNFUSE_CUDA_AUTOTUNE=1 for the benchmarks
#          [--dry-run]         no GPU: skip build and smoke, bench_layers.py --dry-run on small R-MAT graphs
#                              (GNNFUSE_LIBRARY or build/libgnnfuse.so), for checking this script; ops and
#                              attention through their --dry-run, spgemm on the CPU, all at small scale
# Results under $OUT (the device tool's folder) or bench/results/gpu-layers-run: device.txt,
# build.log, smoke.log, ops.json (its table is printed), layers-eager.{log,json},
# layers-compile.{log,json} (8 files: the tool brings back at most 8). The last lines printed are the tables and the issue 25 summary.
# With issue26: the JSONs there and every log (device.txt included) in $OUT/issue26-logs.tar.gz.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
budget=540 bdir="" arch="" jobs=$(nproc) npz="" dry=0 autotune=0 share=0.5 preset=""
graphs="pubmed rmat-20-16 soc-Slashdot0902 ca-HepPh copter2 rmat-18-16"
cgraphs="rmat-20-16 soc-Slashdot0902 pubmed"
# (set after the arguments: the preset's defaults where none was given)
ograph="" ops_s="" sgraphs=""
stages=()
while [[ $# -gt 0 ]]; do
  case $1 in
    build|smoke|ops|bench|compile|spgemm|attention) stages+=("$1"); shift ;;
    issue26) preset=issue26; shift ;;
    --spgemm-graphs) sgraphs=$2; shift 2 ;;
    --ops-graphs) ograph=$2; shift 2 ;;
    --ops-s) ops_s=$2; shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;
    --build-dir) bdir=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --npz) npz=$2; shift 2 ;;
    --graphs) graphs=$2; shift 2 ;;
    --compile-graphs) cgraphs=$2; shift 2 ;;
    --compile-share) share=$2; shift 2 ;;
    --autotune) autotune=1; shift ;;
    --dry-run) dry=1; shift ;;
    *) echo "torch_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# Per stage: extra arguments of its script (the preset's restrictions).
ops_extra=() spgemm_extra=()
if [[ $preset == issue26 ]]; then
  [[ ${#stages[@]} -eq 0 ]] && stages=(build smoke ops spgemm attention)
  ograph=${ograph:-"reddit-like rmat-20-16 products-like pubmed soc-Slashdot0902"} ops_s=${ops_s:-240}
  sgraphs=${sgraphs:-"reddit-like products-like"}
  # the Tensor-Core SpMM against cached cuSPARSE fp32 (the issue's targets) and the uncached backend
  ops_extra=(--ops spmm --features 128 256 --impls "gnnfuse[tc-bf16]" "gnnfuse[tc-bf16,graph]" "cusparse[cached]" "gnnfuse[cusparse]" "gnnfuse[tc-rows-bf16]")
  # the diagnostic variants (one bin, one lane) left out: at these sizes they cost minutes
  spgemm_extra=(--methods gnnfuse_cold gnnfuse_2pass gnnfuse_warm torch_sparse gnnfuse_spgemm torch_sparse_spgemm --no-plot)
fi
[[ ${#stages[@]} -eq 0 ]] && stages=(build smoke ops bench compile)
ograph=${ograph:-"pubmed ca-HepPh soc-Slashdot0902 rmat-20-16"} ops_s=${ops_s:-120}
sgraphs=${sgraphs:-"rmat-16-16 rmat-18-16 rmat-20-16"}
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }
bdir=${bdir:-$root/build/torch-gpu}
res=${OUT:-$root/bench/results/gpu-layers-run}
mkdir -p "$res"
# Logs: beside the results, or with the preset in a folder packed into one tarball at exit (the
# device tool brings back at most 8 files: the preset's JSONs and the tarball)
log=$res
if [[ -n $preset ]]; then
  log=$(mktemp -d "/tmp/torch_gpu_${preset}_logs.XXXXXX")
  pack() { tar -czf "$res/$preset-logs.tar.gz" -C "$log" . && rm -rf "$log"; }
  trap pack EXIT
fi
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
stamp() { echo "[$((SECONDS - start)) s] $*"; }
py=$(command -v python3)
export PYTHONUNBUFFERED=1 PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
commit=${GNNFUSE_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
export GNNFUSE_COMMIT=$commit
status=0

if [[ $dry == 1 ]]; then
  lib=${GNNFUSE_LIBRARY:-$root/build/libgnnfuse.so}
  graphs="rmat-7-4 rmat-8-8" cgraphs="rmat-7-4" ograph="rmat-7-4"
  # the generated graphs by name (bench_ops_device.py --dry-run runs reddit-like at a small scale)
  sgraphs="rmat-7-4 reddit-like-1000-20 products-like-2000-12"
  [[ $preset == issue26 ]] && ograph="rmat-7-4 reddit-like"
  stages=($(for s in "${stages[@]}"; do [[ $s != build && $s != smoke ]] && echo "$s"; done))
  bench_flags=(--dry-run --threads 1 --min-reps 1 --min-time 0 --compile-backend aot_eager)
  echo "dry run: $lib, stages ${stages[*]}" | tee "$log/device.txt"
else
  lib=$bdir/libgnnfuse.so
  bench_flags=(--device cuda --threads 4 --min-reps 10 --min-time 0.3)
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'capability', torch.cuda.get_device_capability())"
    "$py" -c "import torch_geometric as g; print('torch_geometric', g.__version__)" 2>&1 | tail -1
    nvcc --version | tail -2; cmake --version | head -1; echo "ninja $(ninja --version)"; echo "commit $commit"; } 2>&1 | tee "$log/device.txt"
fi
[[ -n $preset ]] && echo "$preset: stages ${stages[*]}; ops graphs $ograph (${ops_extra[*]}), up to $ops_s s; spgemm graphs $sgraphs (${spgemm_extra[*]})" \
  | tee -a "$log/device.txt"

# torch_geometric: the image has it; else wheels carried in .whl/ (bench/gpu/NOTES.md)
if ! "$py" -c "import torch_geometric" 2>/dev/null; then
  if ls "$root"/.whl/torch_geometric-*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$root"/.whl/*.whl && \
      export PYTHONPATH="$PYTHONPATH:/tmp/site"
  fi
  "$py" -c "import torch_geometric" 2>/dev/null || { echo "no torch_geometric: the bench stages cannot run"; status=1; }
fi

if want build; then
  if [[ -z $arch ]]; then
    arch=$("$py" -c "import torch; a, b = torch.cuda.get_device_capability(); print(f'{a}{b}' + ('a' if a == 9 and b == 0 else ''))")
  fi
  # torch's CMake package adds -gencode flags of its own (TORCH_CUDA_ARCH_LIST, else the device's,
  # for sm_90 without the a): the same architecture, so that nvcc compiles each kernel once more
  # at most for the same target.
  tarch=$(echo "$arch" | sed -E 's/^([0-9]+)([0-9])([af]?)$/\1.\2\3/')
  stamp "build: libgnnfuse with GNNFUSE_CUDA=ON for sm_$arch (TORCH_CUDA_ARCH_LIST=$tarch) in $bdir, $jobs jobs"
  # cusparse.h (the cuSPARSE backend): the toolkit's or the wheel's beside torch, which CMake finds;
  # else the copy a machine with internet fetched into build/_deps/cusparse (carry it: no internet here)
  cs_flags=()
  [[ -f $root/build/_deps/cusparse/cusparse.h ]] && cs_flags=(-DGNNFUSE_CUSPARSE_INCLUDE_DIR="$root/build/_deps/cusparse")
  [[ -f /usr/local/cuda/include/cusparse.h ]] && cs_flags=()
  { TORCH_CUDA_ARCH_LIST=$tarch cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cs_flags[@]}" \
      -DPython_EXECUTABLE="$py" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
      -DGNNFUSE_CUDA=ON -DGNNFUSE_CUDA_GENCODE="$arch" -DBUILD_TESTS=OFF -DGNNFUSE_CUDA_EMULATED=OFF \
      -DGNNFUSE_CUDA_GATES=OFF -DGNNFUSE_USE_CCACHE=OFF
    echo "cmake rc=$?"; } > "$log/build.log" 2>&1
  grep -E "gnnfuse: CUDA kernels in libgnnfuse|gnnfuse: cusparse.h|cuSPARSE backend|PyTorch: CUDA detected|Added CUDA NVCC flags|cmake rc=" "$log/build.log"
  if ! grep -q "CUDA kernels in libgnnfuse: ON" "$log/build.log"; then
    echo "configure failed or CUDA off:"; grep -B2 -A8 -m3 "Error" "$log/build.log" | head -40
    stamp "done (no build)"; exit 1
  fi
  t=$(( $(left) - 10 ))
  (( t < 30 )) && { echo "build: out of time"; exit 1; }
  TORCH_CUDA_ARCH_LIST=$tarch timeout "$t" cmake --build "$bdir" --target gnnfuse -j "$jobs" >> "$log/build.log" 2>&1
  r=$?
  echo "build rc=$r" >> "$log/build.log"
  if [[ $r != 0 || ! -f $lib ]]; then
    echo "build failed (rc=$r; 124: out of time):"; grep -A12 -m4 -E "error|FAILED" "$log/build.log" | head -60
    stamp "done (no library)"; exit 1
  fi
  stamp "built $(du -h "$lib" | cut -f1) $lib"
fi

if [[ $dry == 0 && ! -f $lib ]] && { want smoke || want ops || want bench || want compile || want spgemm || want attention; }; then
  echo "no $lib: run the build stage first (a fresh machine keeps nothing)"; exit 1
fi
export GNNFUSE_LIBRARY=$lib

if want smoke && [[ $dry == 0 ]]; then
  t=$(( $(left) < 120 ? $(left) - 5 : 120 ))
  stamp "smoke: scripts/cuda_ops_smoke.py --device cuda (timeout $t s)"
  if (( t > 10 )); then
    timeout "$t" "$py" "$root/scripts/cuda_ops_smoke.py" --device cuda > "$log/smoke.log" 2>&1
    r=$?
    grep -c "^ok " "$log/smoke.log" | sed 's/^/smoke ok lines: /'
    grep -E "^FAIL|Error|error" "$log/smoke.log" | head -30
    tail -3 "$log/smoke.log"
    [[ $r != 0 ]] && { echo "smoke rc=$r"; status=1; }
  else
    echo "smoke: out of time"
  fi
fi

[[ -n $npz ]] || npz=$(ls "$root"/.gpu*/graphs.npz 2>/dev/null | head -1)
npz_flags=()
if [[ -n $npz && -f $npz ]]; then
  npz_flags=(--graphs-npz "$npz")
else
  echo "no graphs.npz (--npz): real graphs only where the datasets are (bench/datasets.py), R-MAT generated"
fi
[[ $autotune == 1 ]] && export GNNFUSE_CUDA_AUTOTUNE=1

if want ops; then  # SpMM / SDDMM: generated, the cuSPARSE backend, torch.sparse, PyG
  # a quarter of the time left at most (the layers' stages follow); a third with the preset, whose
  # spgemm and attention stages follow
  div=4; [[ $preset == issue26 ]] && div=3
  t=$(( $(left) / div < ops_s ? $(left) / div : ops_s ))
  if (( t > 20 )); then
    stamp "bench_ops_device.py (budget $t s): $ograph"
    ops_flags=(--device cuda --min-reps 10 --min-time 0.2)
    [[ $dry == 1 ]] && ops_flags=(--dry-run --min-reps 2 --min-time 0 --features 8 32)
    # shellcheck disable=SC2086
    timeout $((t + 30)) "$py" "$root/bench/bench_ops_device.py" "${ops_flags[@]}" "${npz_flags[@]}" --budget-s "$t" \
      --graphs $ograph "${ops_extra[@]}" --out "$res/ops.json" 2>&1 | grep -v -i "warn" | tee "$log/ops.log"
    r=${PIPESTATUS[0]}
    [[ $r != 0 ]] && { echo "bench_ops_device.py rc=$r (124: killed at its timeout; 1: failed rows)"; status=1; }
  else
    echo "ops: out of time"
  fi
  # (without the preset the table above is the record: no ops.log beside the 8 files)
  [[ -z $preset ]] && rm -f "$log/ops.log"
fi

# seconds kept for the attention stage while spgemm runs (Reddit's graph generated, two shapes timed)
reserve=0; want attention && reserve=120
if want spgemm; then  # SpGEMM and coarsening: our CUDA kernels against cuSPARSE (torch.sparse)
  t=$(( $(left) - 10 - reserve ))
  spgemm_flags=(--device cuda --threads 1 --repeats 5 --memory) reg_flags=(--device cuda --repeats 3)
  # dry run: the same script on the CPU at small scale (peak memory there is per process: left out)
  [[ $dry == 1 ]] && spgemm_flags=(--device cpu --threads 1 --repeats 1 --no-plot) reg_flags=(--device cpu --repeats 1 --regression-scale 0.02)
  [[ $preset == issue26 && $dry == 0 ]] && spgemm_flags=(--device cuda --threads 1 --repeats 3 --memory)
  if (( t > 30 )); then
    stamp "bench_spgemm.py ${spgemm_flags[*]:0:2} (timeout $t s): $sgraphs"
    # shellcheck disable=SC2086
    timeout "$t" "$py" "$root/bench/bench_spgemm.py" "${spgemm_flags[@]}" --graphs $sgraphs "${spgemm_extra[@]}" \
      --out "$res/spgemm.json" > "$log/spgemm.log" 2>&1
    r=$?
    grep -v -i "warn\|sparse_csr_tensor" "$log/spgemm.log" | tail -40
    [[ $r != 0 ]] && { echo "bench_spgemm.py rc=$r (124: killed at its timeout; 1: a gnnfuse method failed)"; status=1; }
    t=$(( $(left) - 10 - reserve ))
    if (( t > 30 )); then  # the shapes where cuSPARSE's SpGEMM fails or returns zeros (cupy #10033, ginkgo #1794)
      stamp "bench_spgemm.py --regressions ${reg_flags[*]:0:2} (timeout $t s)"
      timeout "$t" "$py" "$root/bench/bench_spgemm.py" --regressions "${reg_flags[@]}" \
        --out "$res/spgemm-regressions.json" > "$log/spgemm-regressions.log" 2>&1
      r=$?
      grep -v -i "warn\|sparse_csr_tensor" "$log/spgemm-regressions.log" | tail -10
      [[ $r != 0 ]] && { echo "bench_spgemm.py --regressions rc=$r (124: killed at its timeout)"; status=1; }
    else
      echo "spgemm regressions: out of time"
    fi
  else
    echo "spgemm: out of time"
  fi
fi

if want attention; then  # fused graph attention at Reddit scale (issue 26's targets)
  t=$(( $(left) - 10 ))
  att_flags=(--device cuda)
  [[ $dry == 1 ]] && att_flags=(--dry-run --nodes 300 --mean-degree 8 --shapes 1x32 --min-reps 1 --min-time 0)
  if (( t > 30 )); then
    stamp "bench_attention_device.py ${att_flags[0]} (timeout $t s)"
    timeout "$t" "$py" "$root/bench/bench_attention_device.py" "${att_flags[@]}" --out "$res/attention.json" > "$log/attention.log" 2>&1
    r=$?
    grep -v -i "warn" "$log/attention.log" | tail -20
    [[ $r != 0 ]] && { echo "bench_attention_device.py rc=$r (124: killed at its timeout)"; status=1; }
  else
    echo "attention: out of time"
  fi
fi

run_layers() {  # run_layers TAG SECONDS ARGS...
  local tag=$1 t=$2; shift 2
  stamp "bench_layers.py $tag (budget $t s): $*"
  timeout $((t + 60)) "$py" "$root/bench/bench_layers.py" "${bench_flags[@]}" "${npz_flags[@]}" --budget-s "$t" \
    --reserve-s 20 --out "$res/layers-$tag.json" "$@" > "$log/layers-$tag.log" 2>&1
  local r=$?
  [[ $r != 0 ]] && { echo "bench_layers.py $tag rc=$r (124: killed at its timeout; 1: failed rows)"; status=1; }
  grep -E "FAIL|Error" "$log/layers-$tag.log" | head -20
  grep -v "^#" "$log/layers-$tag.log" | grep -E "^[a-zA-Z]" | grep -v -E "FAIL|Error|^graph|^wrote" | tail -40
  sed -n '/^# issue 25/,$p' "$log/layers-$tag.log"
}

if want bench; then  # (after a failed smoke too: the layers' own checks come first)
  t=$(( $(left) - 10 ))
  want compile && t=$(awk -v l="$t" -v s="$share" 'BEGIN { printf "%d", l * (1 - s) }')
  if (( t > 30 )); then
    # shellcheck disable=SC2086
    run_layers eager "$t" --graphs $graphs --layers GCNConv GATConv 'GATConv[fused]' 'GATConv[edge,fused]'
  else
    echo "bench: out of time"
  fi
fi

if want compile; then
  t=$(( $(left) - 70 ))
  if (( t > 45 )); then
    # shellcheck disable=SC2086
    run_layers compile "$t" --graphs $cgraphs --compile-graphs $cgraphs --layers GATConv 'GATConv[fused]' GCNConv --compile
  else
    echo "compile: out of time"
  fi
fi
stamp "done (status $status)"
exit $status
