#!/usr/bin/env bash
# The CUDA compile gates (no GPU needed): generates every op's CUDA kernels (gnnfuse-gen
# --target cuda into BUILD/cuda_gates/generated, beside the CPU target's files), compiles each
# <family>_cuda.cu with nvcc for sm_80 and sm_90a under ptxas's spill and local-memory warnings
# as errors, and writes the registers, spills, stack and static shared memory of every kernel to
# BUILD/generated/cuda_resources.md (ops computing their output pattern, `symbolic`, with their
# pattern kernels). Then the SASS checks (scripts/sass_check.py on
# `cuobjdump -sass` of each object, every kernel instance and architecture): no local memory
# (LDL/STL), a 128-bit global load in every instance with a vector width VW_ > 1 that loads
# tiles by it or that the launch may pick (a tiled kernel), SHFL in every kernel whose reduction
# over lanes is a shuffle tree (cu::group_*) or the pos split's segmented reduction
# (cu::segment_sums), HMMA in every kernel that issues mma (the generated Tensor-Core SpMM
# kernels, <fam>_tcN_kernel, through cuda/tc_fragments.cuh); BUILD/cuda_gates/sass_checks.txt lists them. With --emulated, beside them (started first), the op
# battery through the same kernels run on the CPU by the SIMT emulator
# (tests/python/test_cuda_emulated.py against BUILD/libgnnfuse_cuda_emu.so, built if missing:
# every family forward and backward under the launch decision and under each forced variant,
# group and thread order; each of its tests runs a subset of the op test files).
# Ends with one line:
#   cuda: K kernels compiled for sm_80 sm_90a (O ops in F families; types all), S spills; sass: C checks, V violations; emulated: N passed, F failed
# and fails on a compile error, a spill, a SASS violation or a failed emulated test.
#
#   bash scripts/check_cuda.sh [--build DIR] [--jobs N] [--only fam1,fam2,...] [--archs a,b]
#                              [--types d:i,...] [--host all|fam1,...] [--ci] [--emulated]
#     --build  the CMake build folder (default build; gnnfuse-gen is built there if missing)
#     --jobs   parallel nvcc (and cuobjdump) processes (default: the number of cores)
#     --only   a subset of the families (the ctest gate compiles a representative subset)
#     --archs  the architectures of the generated families (default sm_80,sm_90a)
#     --types  the (dtype:index dtype) pairs the generated families instantiate (default all
#              eight: Float32 Float64 BFloat16 Float16 x Int32 Int64), through
#              GNNFUSE_CUDA_INSTANTIATES (cuda/type_subset.h)
#     --host   the families compiled whole (nvcc -c: the host pass too, the launchers and the
#              launch decision); the others device code only (nvcc --fatbin: the same cicc and
#              ptxas, the same SASS, a quarter less time). Default all; given, it wins over --ci's
#     --ci     what scripts/run_tests.sh (CI, 2 cores) runs: --archs sm_90a (the H100/H200 the
#              project targets) --types Float64:Int64,Float32:Int32,BFloat16:Int32, every
#              family and kernel, about a sixth of the instances: double with 64-bit indices
#              bounds the register pressure, float and bfloat16 take the 4- and 8-wide vector
#              loads. And --host CI_HOST (below): small families whose host code has between them
#              every form the printer gives it (the Tensor-Core launchers, the pattern
#              kernels', every lowering's launch, heads, an edge operand). The whole gate (no
#              flags, about 75 CPU-minutes) runs before a GPU session and after a change that
#              could move register pressure between types (bench/gpu/NOTES.md)
#     --emulated  also run the emulated op battery (scripts/run_tests.sh does)
# Environment: GNNFUSE_CUDA_EMU_LIBRARY (the emulated library the battery runs; default
# BUILD/libgnnfuse_cuda_emu.so, built if missing); NVCC (default nvcc on PATH, else /usr/local/cuda/bin/nvcc); CUOBJDUMP (a
# cuobjdump with nvdisasm beside it or on PATH; default: the toolkit's, else the
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels of CUOBJDUMP_WHEEL_VERSION, default
# 13.2.86, fetched once into BUILD/cuda_tools/: PyPI has no 13.0 ones, and 13.2 reads nvcc
# 13.0's objects). Without network (the fetch fails) the SASS checks are reported as skipped.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
jobs="$(nproc 2>/dev/null || echo 2)"
only=""
host=""
# --ci's --host: small families between them printing every form of host code (above; sddmm_add
# has all seven lowerings).
CI_HOST="coarsen,spgemm,edge_softmax_heads,spmm_heads,sddmm_add,gat_edge"
emulated=0
ci=0
archs=(sm_80 sm_90a)
types=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --emulated) emulated=1; shift ;;
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --archs) IFS=, read -r -a archs <<<"$2"; shift 2 ;;
    --types) IFS=, read -r -a types <<<"$2"; shift 2 ;;
    --host) host="$2"; shift 2 ;;
    --ci) archs=(sm_90a); types=(Float64:Int64 Float32:Int32 BFloat16:Int32); ci=1; shift ;;
    -h|--help) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "check_cuda.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ -z "$host" ]]; then
  host=all
  if ((ci)); then host="$CI_HOST"; fi
fi

nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [[ ! -x "$nvcc" ]]; then
  echo "check_cuda.sh: nvcc not found (set NVCC)" >&2
  exit 2
fi
type_flags=()
if [[ ${#types[@]} -gt 0 ]]; then
  type_flags=(-DGNNFUSE_CUDA_TYPE_SUBSET)
  for t in "${types[@]}"; do
    if [[ ! "$t" =~ ^(Float32|Float64|BFloat16|Float16):(Int32|Int64)$ ]]; then
      echo "check_cuda.sh: --types: '$t' is not dtype:itype (Float32|Float64|BFloat16|Float16 : Int32|Int64)" >&2
      exit 2
    fi
    type_flags+=("-DGNNFUSE_CUDA_TYPES_${t%%:*}_${t##*:}=1")
  done
fi
for a in "${archs[@]}"; do
  if [[ ! "$a" =~ ^sm_[0-9]+a?$ ]]; then echo "check_cuda.sh: --archs: '$a' is not sm_NN" >&2; exit 2; fi
done

gen="$build/gnnfuse-gen"
if [[ ! -x "$gen" ]]; then
  cmake --build "$build" --target gnnfuse_gen >/dev/null
fi
# A folder of its own: generating a subset of the families into build/generated would replace
# the library's registration.cpp and ops.h with the subset's.
logs="$build/cuda_gates"
out="$logs/generated"
table="$build/generated/cuda_resources.md"
rm -rf "$logs"
mkdir -p "$out" "$(dirname "$table")"

# The families: every spec of ops/, or the --only subset.
specs=()
all_fams=" "  # every generated family (--host is checked against them)
for spec in "$root"/ops/*.spec; do
  fam="$(basename "$spec" .spec)"
  all_fams+="$fam "
  if [[ -n "$only" && ",$only," != *",$fam,"* ]]; then continue; fi
  specs+=("$spec")
done
if [[ ${#specs[@]} -eq 0 ]]; then
  echo "check_cuda.sh: no family selected" >&2
  exit 2
fi

# The CPU target's files hold the params structs the CUDA files include.
"$gen" --out "$out" "${specs[@]}"
"$gen" --target cuda --out "$out" "${specs[@]}"

gencode_of() { for a in "$@"; do printf -- '-gencode arch=compute_%s,code=%s ' "${a#sm_}" "$a"; done; }

compile() {
  local fam="$1"
  local start end flags
  flags=($GENCODE $TYPE_FLAGS)
  local mode=(--fatbin -o "$logs/$fam.fatbin")
  if [[ "$GNNFUSE_GATE_HOST" == all || ",$GNNFUSE_GATE_HOST," == *",$fam,"* ]]; then mode=(-c -o "$logs/$fam.o"); fi
  start=$(date +%s)
  if "$nvcc" -std=c++17 "${mode[@]}" "$out/${fam}_cuda.cu" -I"$root/csrc" -I"$out" "${flags[@]}" \
      -Xptxas -v,-warn-spills,-warn-lmem-usage,-Werror >"$logs/$fam.log" 2>&1; then
    end=$(date +%s)
    echo "$fam ok $((end - start))s" >"$logs/$fam.status"
  else
    end=$(date +%s)
    echo "$fam FAILED $((end - start))s" >"$logs/$fam.status"
  fi
}
export -f compile
export nvcc root out logs
export GNNFUSE_GATE_HOST="$host"
export GENCODE="$(gencode_of "${archs[@]}")" TYPE_FLAGS="${type_flags[*]}"

fams=()
for spec in "${specs[@]}"; do fams+=("$(basename "$spec" .spec)"); done
if [[ "$host" != all ]]; then  # a misspelt family would quietly lose its host pass
  IFS=, read -r -a host_fams <<<"$host"
  for fam in "${host_fams[@]}"; do
    if [[ "$all_fams" != *" $fam "* ]]; then echo "check_cuda.sh: --host: no family '$fam'" >&2; exit 2; fi
  done
fi
# ---- the emulated op battery, started here (the arguments checked, the kernels generated) and
# collected at the end: it keeps about one core
# busy for its whole run, nvcc and cuobjdump take what is free (run one after the other, the
# battery alone on one core was the last minutes of CI, the other core idle)
emu_pid=""
if [[ $emulated -eq 1 ]]; then
  py="${PYTHON:-$root/.venv/bin/python}"
  [[ -x "$py" ]] || py=python3
  lib="${GNNFUSE_CUDA_EMU_LIBRARY:-$build/libgnnfuse_cuda_emu.so}"
  t3=$(date +%s)
  if [[ ! -f "$lib" ]] && ! cmake --build "$build" --target gnnfuse_cuda_emu --parallel "$jobs" >"$logs/emulated_build.log" 2>&1; then
    emu="emulated: not built (cmake --build $build --target gnnfuse_cuda_emu: $logs/emulated_build.log)"
  else
    GNNFUSE_CUDA_EMU_LIBRARY="$lib" "$py" -m pytest -q -p no:cacheprovider "$root/tests/python/test_cuda_emulated.py" >"$logs/emulated.log" 2>&1 &
    emu_pid=$!
    trap '[[ -n "$emu_pid" ]] && kill "$emu_pid" 2>/dev/null; true' EXIT  # not left running if this script stops
  fi
fi

t0=$(date +%s)
# Largest first (by the size of the generated source): the last jobs are the short ones, so the
# cores stay busy to the end.
for fam in "${fams[@]}"; do echo "$(wc -c <"$out/${fam}_cuda.cu") $fam"; done | sort -rn | cut -d' ' -f2 |
  xargs -P "$jobs" -I{} bash -c 'compile "$@"' _ {}
t1=$(date +%s)

failed=0
for fam in "${fams[@]}"; do
  status="$(cat "$logs/$fam.status")"
  echo "  $status"
  if [[ "$status" == *FAILED* ]]; then
    failed=$((failed + 1))
    grep -E "error|warning" "$logs/$fam.log" | head -20 | sed 's/^/    /' || true  # head closes the pipe early (pipefail)
  fi
done

# The table: one row per kernel and architecture, from ptxas -v.
type_note="types all"
if [[ ${#types[@]} -gt 0 ]]; then type_note="types ${types[*]}"; fi
TYPE_NOTE="$type_note" python3 - "$logs" "$table" "${fams[@]}" >"$logs/summary.txt" <<'EOF'
import os, re, subprocess, sys
logs, table, fams = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for fam in fams:
    kernel = arch = None
    for line in open(f"{logs}/{fam}.log", errors="replace"):
        m = re.search(r"Compiling entry function '(\S+)' for '(\w+)'", line)
        if m:
            kernel, arch = m.group(1), m.group(2)
            cur = {"fam": fam, "kernel": kernel, "arch": arch, "regs": 0, "smem": 0, "stack": 0, "spill": 0}
            rows.append(cur)
            continue
        if kernel is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["spill"] = int(m.group(1)), int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
names = sorted({r["kernel"] for r in rows})
demangled = {}
if names:
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout.split("\n")
        demangled = dict(zip(names, out))
    except Exception:
        pass
def short(k):
    d = demangled.get(k, k)
    d = d.replace("gnnfuse::generated::(anonymous namespace)::", "").replace("void ", "", 1).replace("gnnfuse::cuda::", "cu::")
    return d.split("(")[0] if "(" in d else d
archs = sorted({r["arch"] for r in rows})
kernels = sorted({r["kernel"] for r in rows if "fill_kernel" not in r["kernel"]})
spills = sum(1 for r in rows if r["spill"] > 0 or r["stack"] > 0)
with open(table, "w") as t:
    t.write("# CUDA kernels: registers and shared memory (generated by scripts/check_cuda.sh)\n\n")
    t.write(f"{len(kernels)} kernel instances (templates over dtype, index dtype and vector width) of {len(fams)} families, "
            f"compiled for {' '.join(archs)} ({os.environ['TYPE_NOTE']}: dtype:index dtype pairs instantiated); {spills} with spills or local memory. Static shared memory only: the dynamic "
            "part (staged entries, row buffers of the lanes kernels) is decided at launch (runtime/cuda_launch.h).\n\n")
    t.write("| family | kernel | arch | registers | static smem (B) | stack (B) | spill (B) |\n|---|---|---|---|---|---|---|\n")
    for r in sorted(rows, key=lambda r: (r["fam"], short(r["kernel"]), r["arch"])):
        if "fill_kernel" in r["kernel"]:
            continue
        t.write(f"| {r['fam']} | `{short(r['kernel'])}` | {r['arch']} | {r['regs']} | {r['smem']} | {r['stack']} | {r['spill']} |\n")
print(f"{len(kernels)} {spills} {max([r['regs'] for r in rows] or [0])}")
EOF
read -r kernels spills maxregs <"$logs/summary.txt"
ops=0
for fam in "${fams[@]}"; do ops=$((ops + $(grep -c '^runtime::cuda::Request .*_cuda_request(' "$out/${fam}_cuda.cu" || true))); done
host_note="host code of all"
if [[ "$host" != all ]]; then
  whole=()
  for fam in "${fams[@]}"; do [[ -f "$logs/$fam.o" ]] && whole+=("$fam"); done
  host_note="host code of ${whole[*]:-no family}"
fi
echo "check_cuda.sh: ${#fams[@]} families compiled in $((t1 - t0))s with $jobs jobs ($host_note); table: $table (at most $maxregs registers)"

# ---- the SASS checks, on the objects that compiled
cuobjdump_tool() {  # prints a cuobjdump that has its nvdisasm, fetching them if need be
  local c d ver tools
  for c in "${CUOBJDUMP:-}" "$(dirname "$(readlink -f "$nvcc")")/cuobjdump" "$(command -v cuobjdump || true)" /usr/local/cuda/bin/cuobjdump; do
    [[ -n "$c" && -x "$c" ]] || continue
    d="$(dirname "$c")"
    if [[ -x "$d/nvdisasm" ]] || command -v nvdisasm >/dev/null; then echo "$c"; return 0; fi
  done
  ver="${CUOBJDUMP_WHEEL_VERSION:-13.2.86}"
  tools="$build/cuda_tools/cuobjdump-$ver"
  if [[ ! -x "$tools/cuobjdump" || ! -x "$tools/nvdisasm" ]]; then
    echo "fetching cuobjdump and nvdisasm from the nvidia-cuda-cuobjdump/-nvdisasm==$ver wheels" >&2
    bash "$root/scripts/fetch_wheel_file.sh" "nvidia-cuda-nvdisasm==$ver" "$tools" 'nvidia/*/bin/nvdisasm' >&2 &&
      bash "$root/scripts/fetch_wheel_file.sh" "nvidia-cuda-cuobjdump==$ver" "$tools" 'nvidia/*/bin/cuobjdump' >&2 || return 1
    chmod +x "$tools/cuobjdump" "$tools/nvdisasm"
  fi
  echo "$tools/cuobjdump"
}
compiled=()
for fam in "${fams[@]}"; do
  if [[ "$(cat "$logs/$fam.status")" != *FAILED* ]]; then compiled+=("$fam"); fi
done
sass_failed=0
t2=$(date +%s)
if [[ ${#compiled[@]} -eq 0 ]]; then
  sass="sass: not run (nothing compiled)"
elif ! cuobjdump="$(cuobjdump_tool)"; then
  sass="sass: skipped (no cuobjdump: the wheels could not be fetched)"
else
  set +e
  python3 "$root/scripts/sass_check.py" --cuobjdump "$cuobjdump" --generated "$out" --objects "$logs" --jobs "$jobs" \
    --report "$logs/sass_checks.txt" "${compiled[@]}" >"$logs/sass.log" 2>&1
  rc=$?
  set -e
  grep -v '^sass: [0-9]* checks' "$logs/sass.log" | head -60 | sed 's/^/  /' || true  # head closes the pipe early (pipefail)
  sass="$(grep '^sass: [0-9]* checks' "$logs/sass.log" | tail -1)"
  if [[ $rc -ne 0 ]]; then
    sass_failed=1
    echo "  (the SASS checks' whole output: $logs/sass.log)"
  fi
  if [[ -z "$sass" ]]; then sass="sass: failed (scripts/sass_check.py exit $rc: $logs/sass.log)"; fi
  echo "check_cuda.sh: SASS of ${#compiled[@]} families checked in $(($(date +%s) - t2))s ($cuobjdump); per kernel: $logs/sass_checks.txt"
fi

# ---- the emulated op battery (started before the compiles): its verdict
emu_failed=0
if [[ $emulated -eq 0 ]]; then
  emu="emulated: not run (--emulated runs tests/python/test_cuda_emulated.py)"
elif [[ -n "$emu_pid" ]]; then
  set +e
  wait "$emu_pid"
  rc=$?
  set -e
  emu_pid=""
  summary="$(tail -1 "$logs/emulated.log")"
  passed="$(grep -o '[0-9]* passed' <<<"$summary" | grep -o '[0-9]*' || echo 0)"
  nfail="$(grep -o '[0-9]* failed' <<<"$summary" | grep -o '[0-9]*' || echo 0)"
  nerr="$(grep -o '[0-9]* error' <<<"$summary" | grep -o '[0-9]*' || echo 0)"
  emu="emulated: $passed passed, $((nfail + nerr)) failed"
  if [[ $rc -ne 0 || $passed -eq 0 ]]; then
    emu_failed=1
    grep -E '^(FAILED|ERROR)' "$logs/emulated.log" | head -20 | sed 's/^/  /' || true  # head closes the pipe early (pipefail)
    echo "  (the emulated battery's output: $logs/emulated.log)"
  fi
  echo "check_cuda.sh: emulated battery in $(($(date +%s) - t3))s, beside the compiles ($lib)"
else
  emu_failed=1
fi
echo "cuda: $kernels kernels compiled for ${archs[*]} ($ops ops in ${#fams[@]} families; $type_note), $spills spills; $sass; $emu"
if [[ $failed -gt 0 || $spills -gt 0 || $sass_failed -gt 0 || $emu_failed -gt 0 ]]; then exit 1; fi
