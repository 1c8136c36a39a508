#!/bin/bash
# Builds the op battery of the generated CUDA kernels, one program per op family, for a real GPU
# (nvcc, sm_90a; H100/H200) or for the SIMT emulator (--emulate: g++ -DGNNFUSE_SIMT_EMU).
# usage: bench/gpu/build_battery.sh OUTDIR [--emulate] [family ...]
# Needs build/gnnfuse-gen (the generator) and, for --emulate, the emulator sources csrc/cuda/emu.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
emulate=0
if [[ "${1:-}" == "--emulate" ]]; then emulate=1; shift; fi
gen="$root/build/gnnfuse-gen"
families=("$@")
if [[ ${#families[@]} -eq 0 ]]; then
  for s in "$root"/ops/*.spec; do
    f=$(basename "$s" .spec)
    [[ "$f" == spgemm || "$f" == coarsen ]] && continue  # symbolic ops: the torch path checks them (cuda_ops_smoke.py)
    families+=("$f")
  done
fi
mkdir -p "$out/gen" "$out/obj" "$out/src"
arch=(-gencode=arch=compute_90a,code=sm_90a)
cxx=(g++ -std=c++17 -O2 -I "$root/csrc" -I "$out/gen")
for f in runtime/cuda_launch runtime/variants runtime/gemm; do
  o="$out/obj/$(basename $f).o"; [[ -f "$o" ]] || "${cxx[@]}" -c "$root/csrc/$f.cpp" -o "$o"
done
emu_objs=()
cuda_inc=""  # CUDA's cuda_fp16.h / cuda_bf16.h, which the emulator compiles with g++
for d in "${CUDA_INCLUDE_DIR:-}" /usr/local/cuda/include "$(dirname "$(command -v nvcc)")/../include"; do
  [[ -n "$d" && -f "$d/cuda_bf16.h" ]] && { cuda_inc=$d; break; }
done
if [[ $emulate == 1 ]]; then
  for s in "$root"/csrc/cuda/emu/*.cpp; do
    o="$out/obj/emu_$(basename "$s" .cpp).o"
    [[ -f "$o" ]] || "${cxx[@]}" -DGNNFUSE_SIMT_EMU -isystem "$cuda_inc" -c "$s" -o "$o"; emu_objs+=("$o")
  done
fi
build_one() {
  local fam=$1
  "$gen" --out "$out/gen" "$root/ops/$fam.spec" >/dev/null
  "$gen" --target cuda --out "$out/gen" "$root/ops/$fam.spec" >/dev/null
  python3 "$root/bench/gpu/gen_battery.py" "$gen" "$fam" "$root/ops/$fam.spec" "$out/src/battery_$fam.cpp"
  "${cxx[@]}" -c "$out/gen/${fam}_cpu.cpp" -o "$out/obj/${fam}_cpu.o"
  if [[ $emulate == 1 ]]; then
    "${cxx[@]}" -DGNNFUSE_SIMT_EMU -I "$root/bench/gpu" -isystem "$cuda_inc" -c "$out/src/battery_$fam.cpp" -o "$out/obj/battery_$fam.o"
    g++ -o "$out/battery_$fam" "$out/obj/battery_$fam.o" "$out/obj/${fam}_cpu.o" "${emu_objs[@]}" "$out"/obj/{cuda_launch,variants,gemm}.o -pthread
  else
    nvcc -std=c++17 -O2 "${arch[@]}" -x cu -I "$root/csrc" -I "$out/gen" -I "$root/bench/gpu" -Xptxas -warn-spills \
      -c "$out/src/battery_$fam.cpp" -o "$out/obj/battery_$fam.o"
    nvcc "${arch[@]}" -o "$out/battery_$fam" "$out/obj/battery_$fam.o" "$out/obj/${fam}_cpu.o" "$out"/obj/{cuda_launch,variants,gemm}.o \
      -Xcompiler -static-libstdc++ -Xcompiler -static-libgcc
  fi
  echo "built battery_$fam"
}
for fam in "${families[@]}"; do build_one "$fam"; done
