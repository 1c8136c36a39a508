#!/usr/bin/env bash
# Nsight Compute on ONE spmm configuration (R-MAT scale 20, edge factor 16, F=128, fp32, int32,
# generated on the device as bench_gpu.py does): ours pos_split_atomic and row_split/g8, the
# hand-written prototypes, and cuSPARSE's best algorithm there (CSR_ALG2 on the H200, run 1).
# bench_gpu.py --ncu checks each implementation, then runs it once between cudaProfilerStart and
# cudaProfilerStop (ncu --profile-from-start off), so only those kernels are profiled, whatever
# their names (cuSPARSE's included). Sections SpeedOfLight, MemoryWorkloadAnalysis,
# WarpStateStats, Occupancy, LaunchStats; clocks not locked (--clock-control none).
#
# usage: bench/gpu/ncu_spmm.sh [--lib PATH] [--scale 20] [--F 128] [--impls LIST] [--launch-count 24]
#                              [--timeout-s 75]
# Writes to $OUT (else bench/results/ncu): ncu_spmm.ncu-rep, ncu_spmm_details.txt (the full
# report as text), ncu_spmm_raw.csv (every metric), ncu_spmm.log (the run), ncu_spmm_summary.txt
# (the compact table, also printed).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lib=""
scale=20
F=128
impls="ours:pos_split_atomic,ours:row_split/g8,proto:rowlanes,proto:poslanes/512,proto:hybrid,cusparse:CSR_ALG2"
count=24
limit=75
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lib) lib=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --F) F=$2; shift 2 ;;
    --impls) impls=$2; shift 2 ;;
    --launch-count) count=$2; shift 2 ;;
    --timeout-s) limit=$2; shift 2 ;;
    *) echo "ncu_spmm.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$lib" ]]; then  # bench/gpu/ of a checkout (<repo>/.gpu/), or .gpu/bench/gpu/ (.gpu/)
  for cand in "$here/../../.gpu/libgf_bench.so" "$here/../../libgf_bench.so"; do
    [[ -f "$cand" ]] && { lib=$cand; break; }
  done
fi
[[ -f "$lib" ]] || { echo "ncu_spmm.sh: libgf_bench.so not found (--lib)" >&2; exit 1; }
out=${OUT:-$here/../results/ncu}
mkdir -p "$out"
ncu=$(command -v ncu || true)
if [[ -z "$ncu" ]]; then
  for cand in /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [[ -x "$cand" ]] && { ncu=$cand; break; }
  done
fi
[[ -n "$ncu" ]] || { echo "ncu_spmm.sh: ncu not found (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute)" >&2; exit 1; }
echo "ncu: $ncu ($("$ncu" --version | tail -1))"
echo "lib: $lib; R-MAT scale $scale, F=$F; impls: $impls"

rep="$out/ncu_spmm"
t0=$SECONDS
PYTHONUNBUFFERED=1 timeout "$limit" "$ncu" --clock-control none --target-processes all --profile-from-start off --nvtx \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  --launch-count "$count" -f -o "$rep" \
  python3 "$here/bench_gpu.py" --lib "$lib" --graphs-npz "" --rmat "$scale" --F "$F" --ops spmm --only-impl "$impls" \
  --ncu --reps 1 --warmup 0 --copy-mb 16 --budget-s "$limit" --out "$out/ncu_spmm_bench.json" > "$rep.log" 2>&1
rc=$?
echo "ncu rc=$rc ($((SECONDS - t0)) s); log: $rep.log"
grep -E "ncu: profiled|==PROF==|==ERROR==|==WARNING==|FAILED|err=" "$rep.log" | head -60
[[ -f "$rep.ncu-rep" ]] || { echo "ncu_spmm.sh: no report"; tail -30 "$rep.log"; exit 1; }
"$ncu" -i "$rep.ncu-rep" --page details --print-units base > "${rep}_details.txt" 2>&1
"$ncu" -i "$rep.ncu-rep" --page raw --csv --print-units base > "${rep}_raw.csv" 2>&1

# The compact table: per profiled kernel its implementation (the bench's labels in order: each
# "==PROF== Profiling" line belongs to the next "ncu: profiled" line of the log), duration,
# DRAM throughput, L1 / L2 hit rates, occupancy, registers and the top stall reasons.
python3 - "${rep}_raw.csv" "$rep.log" <<'EOF' | tee "${rep}_summary.txt"
import csv, re, sys

rows = list(csv.reader(open(sys.argv[1], errors="replace")))
start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
if start is None:
    print("no metrics in the raw page:", " ".join(" ".join(r) for r in rows[:5])[:400])
    sys.exit(0)
head, data = rows[start], [r for r in rows[start + 2:] if len(r) == len(rows[start])]
labels, pending = [], 0
for line in open(sys.argv[2], errors="replace"):
    if "==PROF== Profiling" in line:
        pending += 1
    m = re.search(r"ncu: profiled (\S+)", line)
    if m:
        labels += [m.group(1)] * pending
        pending = 0


def num(r, *names):
    for n in names:
        if n in head:
            try:
                return float(r[head.index(n)].replace(",", ""))
            except ValueError:
                pass
    return float("nan")


stall_cols = [(i, m.group(1)) for i, h in enumerate(head)
              if (m := re.match(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$", h))]
print(f"{'impl':24s} {'kernel':34s} {'us':>8s} {'dram%':>6s} {'mem%':>6s} {'sm%':>6s} {'L1hit':>6s} {'L2hit':>6s} "
      f"{'occ%':>6s} {'theo%':>6s} {'regs':>5s} {'DRAM MB':>8s}  top stalls (warps per issue)")
for k, r in enumerate(data):
    name = r[head.index("Kernel Name")] if "Kernel Name" in head else "?"
    name = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", ""))
    name = re.split(r"[<(]", name)[0].split("::")[-1][:34]
    stalls = []
    for i, s in stall_cols:
        try:
            stalls.append((float(r[i].replace(",", "")), s))
        except ValueError:
            pass
    stalls = sorted((x for x in stalls if x[1] not in ("not_issued",)), reverse=True)[:4]
    dram_mb = (num(r, "dram__bytes_read.sum") + num(r, "dram__bytes_write.sum")) / 1e6
    print(f"{labels[k] if k < len(labels) else '?':24s} {name:34s} {num(r, 'gpu__time_duration.sum') / 1e3:8.1f} "
          f"{num(r, 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed', 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):6.1f} "
          f"{num(r, 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'):6.1f} "
          f"{num(r, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'):6.1f} "
          f"{num(r, 'l1tex__t_sector_hit_rate.pct'):6.1f} {num(r, 'lts__t_sector_hit_rate.pct'):6.1f} "
          f"{num(r, 'sm__warps_active.avg.pct_of_peak_sustained_active'):6.1f} "
          f"{num(r, 'sm__maximum_warps_per_active_cycle_pct'):6.1f} {num(r, 'launch__registers_per_thread'):5.0f} "
          f"{dram_mb:8.1f}  " + ", ".join(f"{s} {v:.1f}" for v, s in stalls))
EOF
echo "full report: ${rep}_details.txt, metrics: ${rep}_raw.csv"
