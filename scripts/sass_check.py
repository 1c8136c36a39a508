#!/usr/bin/env python3
"""SASS checks of the generated CUDA kernels (issue 25's compile gates; scripts/check_cuda.sh).

    python3 scripts/sass_check.py --cuobjdump BIN --generated DIR --objects DIR [--jobs N]
                                  [--report FILE] FAMILY...

For each family, ``cuobjdump -sass OBJECTS/<family>.o`` (or ``<family>.fatbin``) (nvdisasm beside cuobjdump or on PATH) is
split into its kernels per architecture, their names demangled (c++filt), and each kernel instance
is checked against what the generated source ``GENERATED/<family>_cuda.cu`` states for it:

  local-memory  no LDL / STL in any kernel (besides ptxas's -warn-lmem-usage gate: this reads
                the code itself);
  128-bit-loads an instance whose template argument ``VW_`` (the vector width: ``cu::kVec128<T>``
                when the launch chose vector loads, 1 otherwise) is > 1 has a 128-bit global load
                (``LDG.E.128`` and its variants: ``.CONSTANT`` from ``__ldg``, what sm_80 and
                sm_90a both print; a generic ``LD.E.128``; ``LDGSTS...128``) where the kernel
                loads tiles by VW_ (``cu::load_tile<..., VW_>`` or ``VWA_``) or the launch may
                pick VW_ > 1 for it: its shape (``<variant>_shape``, k-th ``KernelShape`` for
                kernel ``<variant>_k<k>``) has a ``tile_extent`` other than 1. An untiled kernel's
                VW_ > 1 instances are compiled but never launched (cuda_launch.cpp), so unchecked;
  shuffles      a kernel whose body reduces over lanes by shuffles has SHFL: a shuffle tree over
                the group (``cu::group_sum/max/min/arg``, what CudaPrinter::combine prints for a
                loop the schedule marks ``shuffle reduction``: a split walk of a row split, a
                lane loop of the lanes and register forms), or the pos split's segmented
                reduction (``cu::segment_sums``). Entries broadcast by ``__shfl_sync`` (the
                register forms' walks) are not checked: where a kernel does not use the
                broadcast index, nvcc rightly drops the shuffle;
  tensor-cores  a kernel that issues mma (calls ``gnnfuse_mma_*`` of cuda/simt.cuh, itself or through
                device functions of the same source or of the device headers of csrc/cuda, such
                as cuda/tc_fragments.cuh's ``cu::tc_mma``) has HMMA for every architecture: the
                generated Tensor-Core SpMM kernels (``<family>_tcN_kernel``);
  async-copies  a kernel that issues cp.async (``gnnfuse_cp_async16``, likewise) has LDGSTS for
                every architecture (the Tensor-Core kernels' B tiles, cuda/tc_fragments.cuh);
  present       every kernel of the source has SASS for every architecture of the object (else
                the checks above would pass by checking nothing).

One check per (kernel instance, architecture, rule that applies). Each violation is printed as
``sass: VIOLATION <family> <kernel<args>> <arch> <rule>: <why>`` with a few SASS lines; the last
line is ``sass: C checks, V violations``. Exit status: 0 clean, 1 violations, 2 a tool failed.
``--report FILE`` writes one line per kernel instance and architecture with the rules checked.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field

RULES = ("local-memory", "128-bit-loads", "shuffles", "tensor-cores", "present")

# ---------------------------------------------------------------- SASS
# An instruction line of `cuobjdump -sass`: "        /*0a40*/   @!P0 LDG.E.128.CONSTANT R4, [R2.64] ;"
_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?\w+\s+)?([A-Z][A-Z0-9_.]*)")
# What a line must contain to matter (the others, most of them, are skipped unparsed).
_INTEREST = re.compile(r"LDL|STL|LDG|LD\.|SHFL|HMMA|Function : |^arch = ")
_SAMPLES = 3  # SASS lines kept per kernel and kind, for the messages


@dataclass
class KernelSass:
    """What the checks need of one kernel's SASS for one architecture."""

    arch: str
    mangled: str
    lmem: list[str] = field(default_factory=list)  # LDL / STL lines (the first few)
    lmem_count: int = 0
    ld128: int = 0  # 128-bit global or generic loads
    loads: list[str] = field(default_factory=list)  # other global loads (the first few)
    shfl: int = 0
    hmma: int = 0  # Tensor-Core mma (HMMA.16816.F32[.BF16], HMMA.1688.F32.TF32)
    ldgsts: int = 0  # asynchronous copies global -> shared (cp.async: LDGSTS)


def is_lmem(op: str) -> bool:
    return op.split(".")[0] in ("LDL", "STL")


def is_load128(op: str) -> bool:
    """A 128-bit load from global (or generic) memory: LDG.E.128[.CONSTANT...], LD.E.128, or the
    asynchronous copy to shared memory LDGSTS.E[.BYPASS].128 (cp.async of 16 bytes)."""
    parts = op.split(".")
    return parts[0] in ("LDG", "LD", "LDGSTS") and "128" in parts[1:]


def parse_sass(lines) -> list[KernelSass]:
    """Splits `cuobjdump -sass` output into kernels: "arch = sm_XX" opens an architecture's ELF,
    "Function : NAME" a kernel of it."""
    out: list[KernelSass] = []
    arch = "?"
    cur: KernelSass | None = None
    for line in lines:
        if not _INTEREST.search(line):
            continue
        if line.startswith("arch = "):
            arch = line.split("=", 1)[1].strip()
            cur = None
            continue
        s = line.strip()
        if s.startswith("Function : "):
            cur = KernelSass(arch, s[len("Function : "):].strip())
            out.append(cur)
            continue
        m = _INSTR.match(line)
        if not m or cur is None:
            continue
        op = m.group(1)
        if is_lmem(op):
            cur.lmem_count += 1
            if len(cur.lmem) < _SAMPLES:
                cur.lmem.append(s)
        elif is_load128(op):
            cur.ld128 += 1
            cur.ldgsts += op.startswith("LDGSTS")
        elif op.startswith(("LDG", "LD.")):
            if len(cur.loads) < _SAMPLES:
                cur.loads.append(s)
        elif op.startswith("SHFL"):
            cur.shfl += 1
        elif op.startswith("HMMA"):
            cur.hmma += 1
    return out


def demangle(names) -> dict[str, str]:
    """Mangled -> demangled (c++filt); a name c++filt cannot read stays as it is."""
    names = sorted(set(names))
    if not names:
        return {}
    res = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    return dict(zip(names, res.stdout.split("\n")))


def split_template(demangled: str) -> tuple[str, list[str]]:
    """'void ns::(anonymous namespace)::k0<float, int, 4>(args)' -> ('k0', ['float', 'int', '4'])."""
    s = demangled[5:] if demangled.startswith("void ") else demangled
    depth, cut = 0, len(s)
    for k, ch in enumerate(s):  # the parameter list: the first '(' outside the template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not s.startswith("(anonymous", k):
            cut = k
            break
    s = s[:cut]
    lt = s.find("<")
    if lt < 0:
        return s.rsplit("::", 1)[-1], []
    base = s[:lt].rsplit("::", 1)[-1]
    args, depth, cur = [], 0, ""
    for ch in s[lt + 1 : s.rfind(">")]:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    args.append(cur.strip())
    return base, args


# ---------------------------------------------------------------- generated source
# A kernel of <family>_cuda.cu, as CudaPrinter prints it (kernel_head, pos_fixup):
#   template <typename scalar_t, typename index_t, int VW_, int R_>
#   GNNFUSE_GLOBAL void spmm_reg_lanes_k0(const spmm_params prm, ...) {
# (the Tensor-Core kernels have __launch_bounds__ before the name).
_KERNEL = re.compile(r"template <([^>]*)>\s*\nGNNFUSE_GLOBAL void (?:__launch_bounds__\([^)]*\)\s*)?(\w+)\(")
# A device function (its name) whose body may issue mma.
_DEVICE_FN = re.compile(r"GNNFUSE_DEVICE\s+[\w:<>]+\s+(\w+)\s*\(")
_MMA = re.compile(r"\bgnnfuse_mma_\w+\(")
_VECTOR_LOAD = re.compile(r"cu::load_tile<[^;]*?\bVWA?_>\(")
# The shape of a variant's kernels for the launch decision (CudaPrinter::shape), kernel k of
# variant FN (FN_k<k>) the k-th KernelShape of FN_shape:
#   runtime::cuda::VariantShape spmm_row_split_shape(const spmm_params& prm) {
#     { runtime::cuda::KernelShape k_; ... k_.tile_extent = n_f; ... v_.kernels.push_back(k_); } ...
_SHAPE = re.compile(r"runtime::cuda::VariantShape (\w+)_shape\(")
_KERNEL_SHAPE = re.compile(r"runtime::cuda::KernelShape k_;(.*?)v_\.kernels\.push_back\(k_\);", re.S)
_TILE_EXTENT = re.compile(r"k_\.tile_extent = ([^;]+);")
_SHUFFLES = (
    (re.compile(r"\bcu::group_(?:sum|max|min|arg)\b"), "a shuffle tree over the group (cu::group_*)"),
    (re.compile(r"\bcu::segment_sums\b"), "a segmented reduction by shuffles (cu::segment_sums)"),
)


@dataclass
class KernelSource:
    """What the generated source states of one kernel."""

    name: str
    params: list[str]  # template parameter names, in order
    vector_loads: bool  # tiles loaded by VW_ (or VWA_) elements
    shuffles: str  # why it must shuffle ("" when it need not)
    tensor_cores: bool = False  # it issues mma (gnnfuse_mma_*, directly or through a device function)
    async_copies: bool = False  # it issues cp.async (gnnfuse_cp_async16, likewise)
    tiled: bool = False  # its shape has a tiled or lane variable (tile_extent not 1): the launch may pick VW > 1


def _body(code: str, start: int) -> str:
    """The braced body that opens at the first '{' from start."""
    k = code.index("{", start)
    depth = 0
    for e in range(k, len(code)):
        if code[e] == "{":
            depth += 1
        elif code[e] == "}":
            depth -= 1
            if depth == 0:
                return code[k : e + 1]
    raise ValueError("unbalanced braces after offset %d" % start)


def _uncomment(text: str) -> str:
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group()), text)  # comments out, offsets kept


def _device_functions(code: str) -> dict[str, str]:
    """The bodies of the device functions of a (comment-free) source, by name."""
    fns = {}
    for m in _DEVICE_FN.finditer(code):
        try:
            fns.setdefault(m.group(1), "")
            fns[m.group(1)] += _body(code, m.end())
        except ValueError:  # a declaration without a body
            pass
    return fns


# The device headers of csrc/cuda whose functions a generated source may call.
_HEADERS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc", "cuda")


def header_text() -> str:
    """The text of csrc/cuda's device headers (*.cuh), read by parse_source for device functions."""
    parts = []
    if os.path.isdir(_HEADERS_DIR):
        for name in sorted(os.listdir(_HEADERS_DIR)):
            if name.endswith(".cuh"):
                with open(os.path.join(_HEADERS_DIR, name)) as f:
                    parts.append(f.read())
    return "\n".join(parts)


def _calls(fns: dict[str, str], intrinsic: str) -> re.Pattern:
    """A pattern of a call of `intrinsic` (a regex) or of a device function of `fns` that calls
    it, through any chain of calls."""
    callers: set[str] = set()
    while True:
        calls = re.compile(intrinsic + "".join(rf"|\b{f}\b" for f in sorted(callers)))
        more = {name for name, body in fns.items() if name not in callers and calls.search(body)}
        if not more:
            return calls
        callers |= more


def parse_source(text: str, headers: str = "") -> dict[str, KernelSource]:
    """The kernels of a generated <family>_cuda.cu: template parameters, what their bodies call,
    and from the variants' shape functions whether the launch may give them a vector width > 1.
    A kernel issues mma where it calls gnnfuse_mma_*, or a device function of the source or of
    `headers` (the device headers' text) that does, directly or through others.
    Raises ValueError where a kernel with VW_ has no shape (the source is not what this reads)."""
    kernels = {}
    code = _uncomment(text)
    fns = _device_functions(_uncomment(headers))
    fns.update(_device_functions(code))
    issues_mma = _calls(fns, r"\bgnnfuse_mma_\w+\(")
    issues_copies = _calls(fns, r"\bgnnfuse_cp_async16\(")
    for m in _KERNEL.finditer(code):
        params = [p.split()[-1] for p in m.group(1).split(",")]
        body = _body(code, m.end())
        why = next((w for rx, w in _SHUFFLES if rx.search(body)), "")
        kernels[m.group(2)] = KernelSource(m.group(2), params, bool(_VECTOR_LOAD.search(body)), why,
                                           tensor_cores=bool(issues_mma.search(body)), async_copies=bool(issues_copies.search(body)))
    shaped = set()
    for m in _SHAPE.finditer(code):
        for k, b in enumerate(_KERNEL_SHAPE.finditer(_body(code, m.end()))):
            name = f"{m.group(1)}_k{k}"
            t = _TILE_EXTENT.search(b.group(1))
            if name in kernels and t:
                kernels[name].tiled = t.group(1).strip() != "1"
                shaped.add(name)
    unshaped = sorted(n for n, k in kernels.items() if "VW_" in k.params and n not in shaped)
    if unshaped:
        raise ValueError("kernels with a vector width but no shape (k_.tile_extent in <variant>_shape): " + ", ".join(unshaped))
    return kernels


# ---------------------------------------------------------------- checks
@dataclass
class Result:
    checks: Counter = field(default_factory=Counter)  # rule -> checks made
    violations: list[str] = field(default_factory=list)  # messages, each followed by its SASS lines
    report: list[str] = field(default_factory=list)  # one line per kernel instance and architecture

    def count(self) -> int:
        return sum(1 for v in self.violations if v.startswith("sass: VIOLATION"))


def _int(s: str) -> int | None:
    try:
        return int(s.rstrip("lLuU"))
    except ValueError:
        return None


def check_family(family: str, kernels: list[KernelSass], source: dict[str, KernelSource], names: dict[str, str]) -> Result:
    """The checks of one family's kernels (parse_sass) against its source (parse_source);
    names: mangled -> demangled."""
    r = Result()

    def violation(kernel: str, arch: str, rule: str, why: str, lines=()):
        r.violations.append(f"sass: VIOLATION {family} {kernel} {arch} {rule}: {why}")
        r.violations.extend(f"    {x}" for x in lines)

    seen: dict[str, set[str]] = {}
    for k in kernels:
        demangled = names.get(k.mangled, k.mangled)
        base, args = split_template(demangled)
        label = f"{base}<{', '.join(args)}>" if args else base
        seen.setdefault(base, set()).add(k.arch)
        rules = ["local-memory"]
        if k.lmem_count:
            violation(label, k.arch, "local-memory", f"{k.lmem_count} LDL/STL instructions", k.lmem)
        src = source.get(base)
        if src is not None:
            vw = _int(args[src.params.index("VW_")]) if "VW_" in src.params and len(args) == len(src.params) else None
            if (src.vector_loads or src.tiled) and vw is not None and vw > 1:
                rules.append("128-bit-loads")
                if not k.ld128:
                    why = ("its tiles are loaded by VW_ (cu::load_tile)" if src.vector_loads else
                           "the launch picks it for this tiled kernel, but it loads nothing by VW_ (no cu::load_tile)")
                    violation(label, k.arch, "128-bit-loads", f"VW_ = {vw}: {why}; no LDG.E.128 / LD.E.128; its global loads:", k.loads)
            if src.shuffles:
                rules.append("shuffles")
                if not k.shfl:
                    violation(label, k.arch, "shuffles", f"the source combines lanes by {src.shuffles}, but no SHFL")
            if src.tensor_cores:
                rules.append("tensor-cores")
                if not k.hmma:
                    violation(label, k.arch, "tensor-cores", "the source issues mma (gnnfuse_mma_*), but no HMMA")
            if src.async_copies:
                rules.append("async-copies")
                if not k.ldgsts:
                    violation(label, k.arch, "async-copies", "the source issues cp.async (gnnfuse_cp_async16), but no LDGSTS")
        r.checks.update(rules)
        r.report.append(f"{family} {label} {k.arch}: {' '.join(rules)}; {k.ld128} LDG.128, {k.shfl} SHFL, {k.hmma} HMMA, {k.ldgsts} LDGSTS, {k.lmem_count} LDL/STL")
    archs = sorted({k.arch for k in kernels})
    for name in sorted(source):
        for arch in archs or ["(none)"]:
            r.checks["present"] += 1
            if arch not in seen.get(name, set()):
                violation(name, arch, "present", "a kernel of the generated source without SASS for this architecture")
    return r


def cuobjdump_sass(cuobjdump: str, obj: str) -> list[KernelSass]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(cuobjdump)) + os.pathsep + env.get("PATH", "")  # its nvdisasm
    with tempfile.TemporaryFile(mode="w+") as err:  # (a pipe could fill while stdout is read)
        with subprocess.Popen([cuobjdump, "-sass", obj], stdout=subprocess.PIPE, stderr=err, text=True, env=env, errors="replace") as p:
            kernels = parse_sass(p.stdout)
        if p.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{cuobjdump} -sass {obj} failed ({p.returncode}): {err.read().strip()[:500]}")
    return kernels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("--generated", required=True, help="the folder of <family>_cuda.cu")
    ap.add_argument("--objects", required=True, help="the folder of <family>.o (or <family>.fatbin: device code only)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--report", help="write the checks of every kernel instance here")
    ap.add_argument("families", nargs="+")
    a = ap.parse_args(argv)

    headers = header_text()

    def one(fam):
        obj = os.path.join(a.objects, fam + ".o")
        if not os.path.exists(obj):
            obj = os.path.join(a.objects, fam + ".fatbin")
        kernels = cuobjdump_sass(a.cuobjdump, obj)
        with open(os.path.join(a.generated, fam + "_cuda.cu")) as f:
            source = parse_source(f.read(), headers)
        return fam, kernels, source

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
            parsed = list(ex.map(one, a.families))
        names = demangle(k.mangled for _, ks, _ in parsed for k in ks)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"sass_check.py: {e}", file=sys.stderr)
        return 2
    total = Result()
    for fam, kernels, source in parsed:
        r = check_family(fam, kernels, source, names)
        total.checks.update(r.checks)
        total.violations += r.violations
        total.report += r.report
    if a.report:
        with open(a.report, "w") as f:
            f.write("\n".join(total.report) + "\n")
    for v in total.violations:
        print(v)
    print("sass: checks by rule: " + ", ".join(f"{rule} {total.checks[rule]}" for rule in RULES))
    n = total.count()
    print(f"sass: {sum(total.checks.values())} checks, {n} violations")
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
