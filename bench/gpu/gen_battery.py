import re, subprocess, sys
# usage: gen_battery.py GENERATOR FAMILY SPEC OUT.cpp
GEN = sys.argv[1]
fam = sys.argv[2]
spec_path = sys.argv[3]
dump = subprocess.run([GEN, "--dump", spec_path], capture_output=True, text=True, check=True).stdout
ops = []
cur = None
mode = None
for line in dump.split("\n"):
    if line.startswith("==== "):
        cur = {"name": line.split()[1], "lines": []}
        ops.append(cur); mode = None; continue
    if line.startswith("---- "):
        mode = line[5:]; continue
    if mode == "spec" and cur is not None:
        cur["lines"].append(line)
# dedupe (stat ops appear twice)
seen = set(); uniq = []
for o in ops:
    if o["name"] in seen or not o["lines"]: continue
    seen.add(o["name"]); uniq.append(o)
ops = uniq

def parse(o):
    t = {"tensors": [], "floats": [], "order": [], "reduce": "sum", "expr": ""}
    for l in o["lines"]:
        w = l.split()
        if not w: continue
        k = w[0]
        if k == "schema":
            for m in re.finditer(r"float (\w+)", l): t["floats"].append(m.group(1))
        elif k in ("sparse", "dense", "edge", "output", "count", "select"):
            m = re.match(r"\s*\w+\s+(\w+)\(([^)]*)\)(.*)", l)
            name, vars_, rest = m.group(1), [v.strip() for v in m.group(2).split(",")], m.group(3)
            d = {"role": k, "name": name, "vars": vars_, "rest": rest}
            if k == "sparse":
                d["values"] = bool(re.search(r"csr\(\w+, \w+, \w+\)", rest))
            pm = re.search(r"\bon (\w+)", rest)
            d["pattern"] = pm.group(1) if pm else ""
            pm = re.search(r"\bof (\w+)", rest)
            if pm: d["pattern"] = pm.group(1)
            d["acc"] = rest.strip().endswith("acc")
            t["tensors"].append(d)
        elif k == "order": t["order"] = w[1:]
        elif k == "reduce": t["reduce"] = w[1]
        elif k == "expr": t["expr"] = l.split(None, 1)[1]
    return t

out = []
out.append(f'#include "{fam}_cuda.cu"\n#include "battery_common.h"\n')
out.append("template <typename T, typename I>\nint run_all(unsigned seed, int64_t F, runtime::DType dt, runtime::IType it) {\n  int bad = 0;\n")
for o in ops:
    s = parse(o)
    sp = [d for d in s["tensors"] if d["role"] == "sparse"]
    if len(sp) != 1:
        continue
    A = sp[0]
    order = s["order"]
    # CSC walked when the column var comes before the row var in the order
    csc = order.index(A["vars"][1]) < order.index(A["vars"][0])
    nm = o["name"]
    out.append(f"  {{ // {nm}\n    Graph<I> g = make_graph<I>(seed, battery_rows(), battery_cols());\n    generated::{nm}_params prm;\n    std::map<std::string, int64_t> ext;\n")
    out.append(f'    ext["{A["vars"][0]}"] = g.n; ext["{A["vars"][1]}"] = g.m;\n')
    # base extents for other declared vars
    for d in s["tensors"]:
        for v in d["vars"]:
            out.append(f'    if (!ext.count("{v}")) ext["{v}"] = small_extent("{v}", F);\n')
    # aliases from the expression
    for m in re.finditer(r"(\w+)\(([\w, ]+)\)", s["expr"]):
        tn, idx = m.group(1), [x.strip() for x in m.group(2).split(",")]
        dd = [d for d in s["tensors"] if d["name"] == tn]
        if not dd: continue
        for k2, v in enumerate(idx):
            if k2 < len(dd[0]["vars"]):
                out.append(f'    if (!ext.count("{v}")) ext["{v}"] = ext["{dd[0]["vars"][k2]}"];\n')
    for v in order:
        out.append(f'    prm.n_{v} = ext["{v}"];\n')
    for f in s["floats"]:
        out.append(f"    prm.{f} = 0.2;\n")
    bufs = []
    for d in s["tensors"]:
        n, r = d["name"], d["role"]
        prod = " * ".join([f'ext["{v}"]' for v in d["vars"]]) or "1"
        prod2 = " * ".join([f'ext["{v}"]' for v in d["vars"][2:]]) or "1"
        if r == "sparse":
            out.append(f"    prm.{n}_rowptr = g.rowptr.data(); prm.{n}_col = g.col.data();\n")
            if d["values"]: out.append(f"    Vec<T> {n}_val = rand_vec<T>(g.nnz(), seed + 1); prm.{n}_val = {n}_val.data();\n")
            if csc: out.append(f"    prm.{n}_colptr = g.colptr.data(); prm.{n}_row = g.row.data(); prm.{n}_perm = g.perm.data();\n")
        elif r == "dense":
            ty = "hacc<T>" if d["acc"] else "T"
            out.append(f"    Vec<{ty}> {n} = rand_vec<{ty}>({prod}, seed + 2 + {len(bufs)}); prm.{n} = {n}.data();\n"); bufs.append(n)
        elif r == "edge":
            out.append(f"    Vec<T> {n} = rand_vec<T>(g.nnz() * {prod2}, seed + 7 + {len(bufs)}); prm.{n} = {n}.data();\n"); bufs.append(n)
        elif r == "select":
            rest = [v for k2, v in enumerate(d["vars"]) if k2 != 1]
            prodr = " * ".join([f'ext["{v}"]' for v in rest[1:]]) or "1"
            out.append(f"    Vec<int64_t> {n} = select_positions(g, {prodr}, seed); prm.{n} = {n}.data();\n")
        elif r == "output":
            size = f"g.nnz() * {prod2}" if d["pattern"] else prod
            out.append(f"    const int64_t {n}_size = {size};\n")
            outs = [(n, "T")]
            if s["reduce"] != "sum": outs.append((n + "_arg", "int64_t"))
            out.append(f"    Outputs<T> outs;\n")
            out.append(f"    outs.template add<{'hacc<T>' if d['acc'] else 'T'}>(&prm.{n}, {n}_size);\n")
            if s["reduce"] != "sum": out.append(f"    outs.template add<int64_t>(&prm.{n}_arg, {n}_size);\n")
    stats_rows = "g.m" if csc else "g.n"
    stats_max = "g.max_col" if csc else "g.max_row"
    out.append(f"    outs.reset();\n    generated::{nm}_cpu(prm, dt, it);\n    outs.keep_reference();\n")
    out.append(f"    runtime::cuda::GraphStats st{{{stats_rows}, g.nnz(), {stats_max}}};\n")
    out.append(f"    runtime::cuda::Request req = generated::{nm}_cuda_request(prm, dt, it, st);\n")
    out.append(f"    for (int lw = 0; lw < req.lowerings; ++lw)\n    bad += for_variants(\"{nm}\", generated::{nm}_cuda_request(prm, dt, it, st, lw), [&](const runtime::cuda::LaunchConfig& cfg, runtime::cuda::Env& env) {{ outs.reset(); generated::{nm}_cuda(prm, dt, it, cfg, env); device_sync(\"{nm}\", cfg); const double e_ = outs.compare(sizeof(T) == 8 ? 1e-9 : sizeof(T) == 4 ? 2e-4 : 3e-2); if (e_ > 0) std::printf(\"    normwise error %g\\n\", outs.normwise()); return e_; }});\n")
    out.append("  }\n")
out.append("  return bad;\n}\n")
out.append("""int main() {
  int bad = 0;
  if (std::getenv("HARNESS_BIGF")) {
    bad += run_all<double, int32_t>(5, 1500, runtime::DType::Float64, runtime::IType::Int32);
    std::printf("%s\\n", bad ? "FAILED" : "all ok");
    return bad ? 1 : 0;
  }
  const int64_t only_f = battery_env("BATTERY_F", 0);  // one feature width (quick runs, sanitizers)
  for (int64_t F : {1, 3, 32, 129}) {
    if (only_f > 0 && F != only_f) continue;
    bad += run_all<double, int32_t>(11 + F, F, runtime::DType::Float64, runtime::IType::Int32);
    bad += run_all<float, int64_t>(12 + F, F, runtime::DType::Float32, runtime::IType::Int64);
    if (!std::getenv("HARNESS_NO_HALF") && F != 3) bad += run_all<runtime::float16, int32_t>(13 + F, F, runtime::DType::Float16, runtime::IType::Int32);
    if (!std::getenv("HARNESS_NO_HALF") && F == 32) bad += run_all<runtime::bfloat16, int64_t>(14 + F, F, runtime::DType::BFloat16, runtime::IType::Int64);
  }
  std::printf("%s: %d runs, %d bad (%s)\\n", bad ? "FAILED" : "all ok", battery_runs(), bad, battery_where());
  return bad ? 1 : 0;
}
""")
open(sys.argv[4], "w").write("".join(out))
