#!/usr/bin/env bash
# Builds the GPU benchmark's library (bench/gpu/gf_bench.cu) from the generated CUDA kernels of
# spmm, sddmm and sddmm_spmm:
#   OUTDIR/libgf_bench.so       nvcc, sm_90a; cudart, libstdc++ and libgcc linked statically;
#                               cuSPARSE dlopen'ed at run time (only its header is needed here)
#   OUTDIR/libgf_bench_emu.so   g++ -DGNNFUSE_SIMT_EMU: the same kernels through the SIMT emulator,
#                               without cuSPARSE (bench_gpu.py --emulate, the dry run)
#
# usage: bench/gpu/build_bench.sh OUTDIR [--no-device] [--no-emu]
#
# Environment:
#   GNNFUSE_GEN      the generator (default <repo>/build/gnnfuse-gen)
#   GNNFUSE_EMU_ROOT a source root holding cuda/emu/ (the SIMT emulator; default <repo>/csrc,
#                    else ../main/csrc beside the worktree)
#   NVCC             (default nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   CUDA_HOME        the toolkit (headers, lib64/libcudart_static.a; default nvcc's, else /usr/local/cuda)
#   CUSPARSE_INCLUDE a folder with cusparse.h (default: the CUDA toolkit's, else fetched)
#   CUSPARSE_WHEEL_VERSION  the nvidia-cusparse wheel the header is fetched from (default 12.6.3.3,
#                    the cuSPARSE of CUDA 13.0; its header is the cu13 one)
#   GF_BENCH_TMP     generated code, objects and the fetched header (default <repo>/build/tmp/gf_bench;
#                    never under OUTDIR, which travels to the device)
#   JOBS             parallel compiles (default 2)
#   GF_COMPRESS_MODE nvcc --compress-mode of the fatbin (default size: ~4 MB instead of ~28 MB with
#                    nvcc's default; a compressed fatbin of CUDA 13 needs a driver >= 580, which
#                    CUDA 13 itself needs)
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [--no-device] [--no-emu]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
device=1
emu=1
for a in "$@"; do
  case "$a" in
    --no-device) device=0 ;;
    --no-emu) emu=0 ;;
    *) echo "build_bench.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

gen="${GNNFUSE_GEN:-$root/build/gnnfuse-gen}"
tmp="${GF_BENCH_TMP:-$root/build/tmp/gf_bench}"
jobs="${JOBS:-2}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
cuda_home="${CUDA_HOME:-}"
if [[ -z "$cuda_home" ]]; then  # nvcc may be a wrapper script outside the toolkit
  cuda_home="$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)"
  [[ -f "$cuda_home/include/cuda_runtime.h" ]] || cuda_home=/usr/local/cuda
fi
gendir="$tmp/gen"
obj="$tmp/obj"
mkdir -p "$gendir" "$obj"
fams=(spmm sddmm sddmm_spmm)

[[ -x "$gen" ]] || { echo "build_bench.sh: generator $gen not built (cmake --build build)" >&2; exit 1; }
t0=$(date +%s)

# ---- generated code: the CPU target's files hold the params structs the CUDA files include
specs=()
for f in "${fams[@]}"; do specs+=("$root/ops/$f.spec"); done
# (into a staging folder, copied over only where changed, so that unchanged objects are kept)
rm -rf "$tmp/gen.new"
mkdir -p "$tmp/gen.new"
"$gen" --out "$tmp/gen.new" "${specs[@]}" >/dev/null
"$gen" --target cuda --out "$tmp/gen.new" "${specs[@]}" >/dev/null
for g in "$tmp"/gen.new/*; do
  [[ -f "$g" ]] || continue
  cmp -s "$g" "$gendir/$(basename "$g")" || cp "$g" "$gendir/"
done
rm -rf "$tmp/gen.new"

# ---- compile steps run in the background, at most $jobs at a time; a failure fails the build
pids=()
names=()
failed=0
wait_all() {
  local i
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "build_bench.sh: FAILED ${names[$i]} (log: $obj/${names[$i]}.log)" >&2
      tail -20 "$obj/${names[$i]}.log" >&2 || true
      failed=1
    fi
  done
  pids=()
  names=()
}
# The sources every object depends on besides its own: the runtime and device headers, this script.
common_deps=("$root"/csrc/runtime/*.h "$root"/csrc/cuda/*.cuh "$gendir"/*.h "${BASH_SOURCE[0]}")
stale() {  # stale OBJ SRC: the object is missing or older than its source or a common dependency
  local o="$1" d
  [[ -f "$o" ]] || return 0
  for d in "$2" "${common_deps[@]}"; do
    [[ "$d" -nt "$o" ]] && return 0
  done
  return 1
}
step() {  # step NAME command... (the object is the argument after -o, the source the one after -c)
  local name="$1"
  shift
  local a prev="" o="" src=""
  for a in "$@"; do
    [[ "$prev" == -o ]] && o="$a"
    [[ "$prev" == -c ]] && src="$a"
    prev="$a"
  done
  if [[ -n "$o" && -n "$src" ]] && ! stale "$o" "$src"; then return 0; fi
  while [[ ${#pids[@]} -ge $jobs ]]; do
    wait_all
  done
  ("$@") >"$obj/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}

hostflags=(-std=c++17 -O2 -fPIC -I"$root/csrc" -I"$gendir")
step cuda_launch g++ "${hostflags[@]}" -c "$root/csrc/runtime/cuda_launch.cpp" -o "$obj/cuda_launch.o"

# ---- the device library
if [[ $device -eq 1 ]]; then
  [[ -x "$nvcc" ]] || { echo "build_bench.sh: nvcc not found (set NVCC)" >&2; exit 1; }
  inc="${CUSPARSE_INCLUDE:-}"
  if [[ -z "$inc" && -f "$cuda_home/include/cusparse.h" ]]; then inc="$cuda_home/include"; fi
  if [[ -z "$inc" ]]; then
    inc="$tmp/cusparse/include"
    if [[ ! -f "$inc/cusparse.h" ]]; then
      ver="${CUSPARSE_WHEEL_VERSION:-12.6.3.3}"
      echo "fetching cusparse.h from the nvidia-cusparse==$ver wheel"
      rm -rf "$tmp/wheel"
      python3 -m pip download --quiet --no-deps -d "$tmp/wheel" "nvidia-cusparse==$ver"
      mkdir -p "$inc"
      unzip -q -o -j "$tmp"/wheel/nvidia_cusparse-*.whl 'nvidia/*/include/cusparse*.h' -d "$inc"
      rm -rf "$tmp/wheel"  # the library itself is the device's (torch's), opened at run time
    fi
  fi
  devflags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fPIC -I"$root/csrc" -I"$gendir"
            -Xptxas -warn-spills,-warn-lmem-usage --compress-mode="${GF_COMPRESS_MODE:-size}")
  for f in "${fams[@]}"; do
    step "${f}_cuda" "$nvcc" "${devflags[@]}" -c "$gendir/${f}_cuda.cu" -o "$obj/${f}_cuda.o"
  done
  # -Xptxas -v: the registers and spills of the hand-written proto kernels, reported after the link
  step gf_bench "$nvcc" "${devflags[@]}" -Xptxas -v -I"$inc" -c "$root/bench/gpu/gf_bench.cu" -o "$obj/gf_bench.o"
fi

# ---- the emulated library
if [[ $emu -eq 1 ]]; then
  emu_root="${GNNFUSE_EMU_ROOT:-}"
  if [[ -z "$emu_root" ]]; then
    for cand in "$root/csrc" "$root/../main/csrc" "$root/../../main/csrc"; do
      if [[ -f "$cand/cuda/emu/simt_emu.h" ]]; then emu_root="$(cd "$cand" && pwd)"; break; fi
    done
  fi
  if [[ -z "$emu_root" || ! -f "$emu_root/cuda/emu/simt_emu.h" ]]; then
    echo "build_bench.sh: the SIMT emulator (cuda/emu) not found; set GNNFUSE_EMU_ROOT or pass --no-emu" >&2
    exit 1
  fi
  # the worktree's csrc first (runtime/, cuda/simt.cuh), the emulator's root after it
  emuflags=(-std=c++17 -O1 -fPIC -DGNNFUSE_SIMT_EMU -I"$root/csrc" -I"$gendir" -I"$emu_root" -isystem "$cuda_home/include")
  for s in block context launch; do
    step "emu_$s" g++ "${emuflags[@]}" -O2 -c "$emu_root/cuda/emu/$s.cpp" -o "$obj/emu_$s.o"
  done
  for f in "${fams[@]}"; do
    step "${f}_emu" g++ "${emuflags[@]}" -x c++ -c "$gendir/${f}_cuda.cu" -o "$obj/${f}_emu.o"
  done
  step gf_bench_emu g++ "${emuflags[@]}" -x c++ -c "$root/bench/gpu/gf_bench.cu" -o "$obj/gf_bench_emu.o"
fi
wait_all
[[ $failed -eq 0 ]] || exit 1

# ---- link (g++ as the driver; -z defs: every symbol resolved here or in the named libraries)
if [[ $device -eq 1 ]]; then
  g++ -shared -o "$out/libgf_bench.so" "$obj/gf_bench.o" "$obj/spmm_cuda.o" "$obj/sddmm_cuda.o" "$obj/sddmm_spmm_cuda.o" \
    "$obj/cuda_launch.o" -L"$cuda_home/lib64" -lcudart_static -ldl -lrt -pthread -static-libstdc++ -static-libgcc \
    -Wl,-z,defs -Wl,--exclude-libs,ALL -s
  for f in "${fams[@]}" gf_bench; do
    # (gf_bench.log holds -Xptxas -v's "0 bytes spill stores, 0 bytes spill loads" of every kernel)
    hits=$(cat "$obj/${f}_cuda.log" "$obj/$f.log" 2>/dev/null | grep -i "spill\|lmem\|local memory" \
           | grep -v " 0 bytes spill stores, 0 bytes spill loads" | sort | uniq -c | head -20 || true)
    if [[ -n "$hits" ]]; then
      echo "ptxas reports for $f:"
      echo "$hits"
    fi
  done
  # ptxas -v per kernel: "Compiling entry function 'NAME'", "N bytes stack frame, N bytes spill
  # stores, N bytes spill loads", "Used N registers, ..."; the proto kernels' lines, demangled
  awk -v q="'" '/Compiling entry function/ { split($0, a, q); name = a[2]; frame = "" }
       /bytes stack frame/ { frame = $0; sub(/^[ \t]+/, "", frame) }
       /Used [0-9]+ registers/ && name ~ /proto/ { u = $0; sub(/.*Used/, "Used", u); sub(/, used [0-9]+ barriers/, "", u)
                                                   print name "\t" u "; " frame }' "$obj/gf_bench.log" \
    | (command -v c++filt >/dev/null && c++filt || cat) | sed -E 's/\(anonymous namespace\):://; s/\([^)]*\)\t/  /; s/^/ptxas proto: /' || true
  echo "built $out/libgf_bench.so ($(du -h "$out/libgf_bench.so" | cut -f1))"
fi
if [[ $emu -eq 1 ]]; then
  g++ -shared -o "$out/libgf_bench_emu.so" "$obj/gf_bench_emu.o" "$obj/spmm_emu.o" "$obj/sddmm_emu.o" "$obj/sddmm_spmm_emu.o" \
    "$obj/cuda_launch.o" "$obj/emu_block.o" "$obj/emu_context.o" "$obj/emu_launch.o" -pthread -Wl,-z,defs
  echo "built $out/libgf_bench_emu.so"
fi
echo "build_bench.sh: $(( $(date +%s) - t0 )) s"
