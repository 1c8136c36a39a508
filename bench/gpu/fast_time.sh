#!/bin/bash
# Builds bench/gpu/fast_time.cu (the variants' timings of spmm, sddmm, sddmm_spmm) for sm_90a.
# usage: bench/gpu/fast_time.sh OUTDIR   (needs build/gnnfuse-gen and nvcc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
gen="$root/build/gnnfuse-gen"
arch=(-gencode=arch=compute_90a,code=sm_90a)
mkdir -p "$out/gen" "$out/obj"
objs=()
for fam in ${FAMILIES:-spmm sddmm sddmm_spmm}; do
  "$gen" --out "$out/gen" "$root/ops/$fam.spec" >/dev/null
  "$gen" --target cuda --out "$out/gen" "$root/ops/$fam.spec" >/dev/null
  o="$out/obj/${fam}_cuda.o"
  # float32 / int32 only (the timings' types): the other dtypes' dispatch lines dropped
  sed -E '/DType::(Float64|BFloat16|Float16)|IType::Int64/d' "$out/gen/${fam}_cuda.cu" > "$out/gen/${fam}_f32_cuda.cu"
  nvcc -std=c++17 -O3 "${arch[@]}" -I "$root/csrc" -I "$out/gen" -Xptxas -v,-warn-spills -c "$out/gen/${fam}_f32_cuda.cu" -o "$o" 2> "$out/${fam}_ptxas.log"
  objs+=("$o")
done
g++ -std=c++17 -O2 -I "$root/csrc" -c "$root/csrc/runtime/cuda_launch.cpp" -o "$out/obj/cuda_launch.o"
nvcc -std=c++17 -O2 "${arch[@]}" -I "$root/csrc" -I "$out/gen" -c "$root/bench/gpu/fast_time.cu" -o "$out/obj/fast_time.o"
nvcc "${arch[@]}" -o "$out/fast_time" "$out/obj/fast_time.o" "${objs[@]}" "$out/obj/cuda_launch.o" -Xcompiler -static-libstdc++ -Xcompiler -static-libgcc
echo "built $out/fast_time"
