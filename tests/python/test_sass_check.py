"""scripts/sass_check.py (the SASS checks of scripts/check_cuda.sh) on hand-written SASS: each rule
fails where it should (local memory, a missing 128-bit load where VW_ > 1, a missing shuffle
where the source reduces by a shuffle tree, a kernel without SASS) and passes on clean code.
Needs c++filt (binutils), neither nvcc nor cuobjdump nor network: a stand-in cuobjdump prints the
snippet for the command-line test."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sass_check", os.path.join(_ROOT, "scripts", "sass_check.py"))
sc = importlib.util.module_from_spec(_spec)
sys.modules["sass_check"] = sc  # (dataclasses look their module up)
_spec.loader.exec_module(sc)

pytestmark = pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt (binutils) not installed")

# The generated source, as CudaPrinter prints it (abridged): a row split variant of two kernels,
# k0 loading tiles by VW_ and combining its split walk by a shuffle tree, k1 tiled over o but
# loading nothing by VW_ (rows copied element by element); an untiled row split (its shape's
# tile_extent 1: the launch never picks VW_ > 1) with a shuffle tree; a lanes kernel with
# neither; a pos split fix-up. The shapes say which kernels are tiled.
SOURCE = """\
// row split: groups of G_ lanes per (row i, tile of C_ columns of f)
template <typename scalar_t, typename index_t, int VW_>
GNNFUSE_GLOBAL void spmm_row_split_k0(const spmm_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {
  for (int64_t t_ = 0; t_ < n_i; ++t_) {  // a comment with a brace {
    acc_t X_t0_[C_];
    cu::load_tile<scalar_t, C_, VW_>(X_t0_, X + (j * n_f + 0), f0_, n_f);
    for (int k_ = 0; k_ < C_; ++k_) Yacc[k_] = cu::group_sum(Yacc[k_], G_, mask_);
  }
}

// row split: groups of G_ lanes per (row i, tile of C_ columns of o)
template <typename scalar_t, typename index_t, int VW_>
GNNFUSE_GLOBAL void spmm_row_split_k1(const spmm_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {
  for (int k_ = 0; k_ < C_; ++k_) if (lane_ == 0) cu::store(Y + ((i) * n_o + o), rows_Yacc[(i) * n_o + o]);
}

template <typename scalar_t, typename index_t>
runtime::cuda::VariantShape spmm_row_split_shape(const spmm_params& prm) {
  runtime::cuda::VariantShape v_;
  {
    runtime::cuda::KernelShape k_;
    k_.form = runtime::cuda::Form::RowSplit;
    k_.tile_extent = n_f;
    k_.feature_tile = 8;
    v_.kernels.push_back(k_);
  }
  {
    runtime::cuda::KernelShape k_;
    k_.form = runtime::cuda::Form::RowSplit;
    k_.tile_extent = n_o;
    k_.feature_tile = 8;
    v_.kernels.push_back(k_);
  }
  return v_;
}

// row split: groups of G_ lanes per row i
template <typename scalar_t, typename index_t, int VW_>
GNNFUSE_GLOBAL void spmm_dot_row_split_k0(const spmm_dot_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {
  T0 = cu::group_sum(T0, G_, mask_);
}

template <typename scalar_t, typename index_t>
runtime::cuda::VariantShape spmm_dot_row_split_shape(const spmm_dot_params& prm) {
  runtime::cuda::VariantShape v_;
  {
    runtime::cuda::KernelShape k_;
    k_.form = runtime::cuda::Form::RowSplit;
    k_.tile_extent = 1;
    k_.feature_tile = 0;
    v_.kernels.push_back(k_);
  }
  return v_;
}

// lanes: groups of G_ lanes per row i, the lanes over f
template <typename scalar_t, typename index_t>
GNNFUSE_GLOBAL void spmm_lanes_k0(const spmm_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {
  for (int64_t f = lane_; f < n_f; f += G_) Yacc[f] += cu::load(X + (j * n_f + f));
}

// the carries of the rows cut by chunk borders, added in chunk order
template <typename scalar_t, typename index_t>
GNNFUSE_GLOBAL void spmm_pos_split_k0_fixup(const spmm_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {
  s_ += carry_[c2_];
}
"""


def mangled(name: str, args: str) -> str:
    """The mangled name nvcc gives a kernel of spmm_cuda.cu (args: 'fiLi4E' for <float, int, 4>)."""
    return (f"_ZN7gnnfuse9generated45_GLOBAL__N__c3a4bc8f_12_spmm_cuda_cu_a5b29c4e{len(name)}{name}I{args}E"
            "EvNS0_11spmm_paramsENS_7runtime4cuda12KernelLaunchEPh")


def function(name: str, args: str, *instructions: str) -> str:
    lines = [f"\t\tFunction : {mangled(name, args)}", '\t.headerflags\t@"EF_CUDA_SM80 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM80)"']
    for k, ins in enumerate(instructions + ("EXIT ;", "BRA 0x7f0;")):
        lines.append(f"        /*{k * 16:04x}*/                   {ins:<40}/* 0x000fe400078e00ff */")
        lines.append("                                                                              /* 0x000fc600078e00ff */")
    return "\n".join(lines) + "\n\t\t..........\n\n"


def elf(arch: str, *functions: str) -> str:
    head = f"\nFatbin elf code:\n================\narch = {arch}\ncode version = [1,8]\nhost = linux\ncompile_size = 64bit\n\n"
    return head + f"\tcode for {arch}\n\t.target\t{arch}\n\n" + "".join(functions)


LD128 = "@!P0 LDG.E.128.CONSTANT R4, [R2.64] ;"
SHFL = "SHFL.BFLY PT, R7, R6, 0x1, 0x1f ;"
CLEAN = {
    "k0_4": function("spmm_row_split_k0", "fiLi4E", LD128, SHFL),
    "k0_1": function("spmm_row_split_k0", "fiLi1E", "LDG.E.CONSTANT R4, [R2.64] ;", SHFL),
    "k1_4": function("spmm_row_split_k1", "fiLi4E", "LDG.E.128 R4, [R2.64] ;", "STG.E.128 [R8.64], R4 ;"),
    "k1_1": function("spmm_row_split_k1", "fiLi1E", "LDG.E R4, [R2.64] ;", "STG.E [R8.64], R4 ;"),
    "dot4": function("spmm_dot_row_split_k0", "fiLi4E", "LDG.E.CONSTANT R4, [R2.64] ;", SHFL),
    "dot1": function("spmm_dot_row_split_k0", "fiLi1E", "LDG.E.CONSTANT R4, [R2.64] ;", SHFL),
    "lanes": function("spmm_lanes_k0", "fi", "LDG.E.CONSTANT R4, [R2.64] ;", "STG.E [R8.64], R4 ;"),
    "fixup": function("spmm_pos_split_k0_fixup", "fi", "LDG.E R4, [R2.64] ;"),
}


def clean(**replace: str) -> list[str]:
    """The clean kernels, some replaced."""
    return [replace.get(k, f) for k, f in CLEAN.items()]


def check(sass: str):
    kernels = sc.parse_sass(sass.splitlines(keepends=True))
    names = sc.demangle(k.mangled for k in kernels)
    return sc.check_family("spmm", kernels, sc.parse_source(SOURCE), names)


def rules_violated(r):
    """'<kernel> <arch> <rule>' of each violation (the messages name the family first)."""
    found = [re.match(r"sass: VIOLATION spmm (.+ sm_\w+ [\w-]+): ", v) for v in r.violations if v.startswith("sass: ")]
    assert all(found), r.violations
    return sorted(m.group(1) for m in found)


def test_source_states_the_rules():
    src = sc.parse_source(SOURCE)
    assert sorted(src) == ["spmm_dot_row_split_k0", "spmm_lanes_k0", "spmm_pos_split_k0_fixup", "spmm_row_split_k0", "spmm_row_split_k1"]
    k0, k1, dot = src["spmm_row_split_k0"], src["spmm_row_split_k1"], src["spmm_dot_row_split_k0"]
    assert k0.params == ["scalar_t", "index_t", "VW_"] and k0.vector_loads and k0.tiled and "group" in k0.shuffles
    assert not k1.vector_loads and k1.tiled and not k1.shuffles
    assert not dot.vector_loads and not dot.tiled and dot.shuffles
    assert not src["spmm_lanes_k0"].vector_loads and not src["spmm_lanes_k0"].shuffles
    # a kernel with a vector width the shapes do not cover: the source is not what the checker reads
    with pytest.raises(ValueError, match="spmm_dot_row_split_k0"):
        sc.parse_source(SOURCE.replace("spmm_dot_row_split_shape", "spmm_dot2_row_split_shape"))


def test_clean_kernels_pass():
    r = check(elf("sm_80", *clean()) + elf("sm_90a", *clean()))
    assert r.violations == []
    # per architecture: 8 local-memory; 128-bit loads in k0<4> and k1<4> (tiled), not dot<4>
    # (untiled: the launch never picks VW_ > 1); 4 shuffles (k0 and dot, both VW_); 5 kernels present
    assert r.checks == {"local-memory": 16, "128-bit-loads": 4, "shuffles": 8, "present": 10}


def test_local_memory_fails():
    lmem = function("spmm_lanes_k0", "fi", "STL [R1], R4 ;", "LDG.E.CONSTANT R4, [R2.64] ;", "LDL.64 R6, [R1+0x8] ;")
    r = check(elf("sm_80", *clean(lanes=lmem)))
    assert rules_violated(r) == ["spmm_lanes_k0<float, int> sm_80 local-memory"]
    assert any("2 LDL/STL" in v for v in r.violations)
    assert any("STL [R1], R4" in v for v in r.violations)  # the SASS lines are shown


def test_vector_width_without_128_bit_load_fails():
    narrow = function("spmm_row_split_k0", "fiLi4E", "LDG.E.64.CONSTANT R4, [R2.64] ;", SHFL)
    r = check(elf("sm_90a", *clean(k0_4=narrow)))
    assert rules_violated(r) == ["spmm_row_split_k0<float, int, 4> sm_90a 128-bit-loads"]
    assert any("LDG.E.64.CONSTANT" in v for v in r.violations)
    assert any("cu::load_tile" in v for v in r.violations)
    # a tiled kernel the launch gives VW_ = 4 that loads nothing by it
    scalar = function("spmm_row_split_k1", "fiLi4E", "LDG.E R4, [R2.64] ;", "STG.E [R8.64], R4 ;")
    r = check(elf("sm_80", *clean(k1_4=scalar)))
    assert rules_violated(r) == ["spmm_row_split_k1<float, int, 4> sm_80 128-bit-loads"]
    assert any("loads nothing by VW_" in v for v in r.violations)
    # VW_ = 1, or an untiled kernel, asks for no vector load
    assert check(elf("sm_80", *clean(dot4=CLEAN["dot1"].replace("fiLi1E", "fiLi4E")))).violations == []


def test_128_bit_spellings():
    for op in ("LDG.E.128", "LDG.E.128.CONSTANT", "LDG.E.128.SYS", "LD.E.128", "LDGSTS.E.BYPASS.128"):
        assert sc.is_load128(op), op
    for op in ("LDG.E.64", "LDG.E.CONSTANT", "LDS.128", "STG.E.128", "LDSM.16.M88.4"):
        assert not sc.is_load128(op), op


def test_shuffle_tree_without_shfl_fails():
    noshfl = function("spmm_dot_row_split_k0", "fiLi1E", "LDG.E.CONSTANT R4, [R2.64] ;", "FADD R7, R7, R6 ;")
    r = check(elf("sm_80", *clean(dot1=noshfl)))
    assert rules_violated(r) == ["spmm_dot_row_split_k0<float, int, 1> sm_80 shuffles"]


def test_kernel_without_sass_fails():
    r = check(elf("sm_80", *clean()) + elf("sm_90a", *clean(fixup="")))
    assert rules_violated(r) == ["spmm_pos_split_k0_fixup sm_90a present"]


def test_split_template():
    assert sc.split_template("void gnnfuse::generated::(anonymous namespace)::k0<float, long, 8, 2>(gnnfuse::p, unsigned char*)") == (
        "k0", ["float", "long", "8", "2"])
    assert sc.split_template("void gnnfuse::cuda::fill_kernel<__half>(__half*, long, __half)") == ("fill_kernel", ["__half"])


def test_command_line(tmp_path, capsys):
    """main() through a stand-in cuobjdump: the violations named, the summary line, exit 1."""
    sass = tmp_path / "spmm.sass"
    sass.write_text(elf("sm_80", *clean(lanes=function("spmm_lanes_k0", "fi", "STL [R1], R4 ;"))))
    tool = tmp_path / "cuobjdump"
    tool.write_text(f"#!/bin/sh\n[ \"$1\" = -sass ] && [ -f \"$2\" ] && exec cat '{sass}'\nexit 3\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "spmm.o").write_bytes(b"")
    (tmp_path / "spmm_cuda.cu").write_text(SOURCE)
    args = ["--cuobjdump", str(tool), "--generated", str(tmp_path), "--objects", str(tmp_path), "--report", str(tmp_path / "r.txt")]
    assert sc.main(args + ["spmm"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "sass: VIOLATION spmm spmm_lanes_k0<float, int> sm_80 local-memory: 1 LDL/STL instructions" in out
    assert out[-1] == "sass: 19 checks, 1 violations"
    assert len((tmp_path / "r.txt").read_text().splitlines()) == 8
    # a family compiled device code only (check_cuda.sh --host) is read from <family>.fatbin
    (tmp_path / "spmm.o").rename(tmp_path / "spmm.fatbin")
    assert sc.main(args + ["spmm"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "sass: 19 checks, 1 violations"
    # a cuobjdump that fails is a tool failure (2), not a pass
    (tmp_path / "spmm.fatbin").unlink()
    assert sc.main(args + ["spmm"]) == 2


# A generated Tensor-Core SpMM kernel as the checker reads it (abridged): the kernel with
# __launch_bounds__ calling cu::tc_mma of a device header, which issues the mma through another
# device function; a kernel of the same source that issues none.
TC_HEADER = """\
template <typename T, int NT>
GNNFUSE_DEVICE void tc_block_mma(float (&acc)[NT][4], const float* at, const T* bt, int lane) {
  gnnfuse_mma_m16n8k16_f16f32(acc[t], a, b, acc[t]);
}
template <typename T, int NT>
GNNFUSE_DEVICE void tc_mma(float (&acc)[NT][4], const float* at, const T* bt, int lane) {
  tc_block_mma<T, NT>(acc, at, bt, lane);
}
template <typename T, int K, int W>
GNNFUSE_DEVICE void tc_stage_b(T* bt, const T* x, const int32_t* cols, int64_t stride, int64_t head, int64_t f0, int64_t f,
                               bool vec, int lane) {
  gnnfuse_cp_async16(dst, from, bytes);
}
"""
TC_SOURCE = """\
template <typename T, int NT>
GNNFUSE_GLOBAL void __launch_bounds__(cu::kTcWarps * 32, 1) spmm_tc0_kernel(const cu::TcSpmmArgs p, const int64_t slabs) {
  cu::tc_stage_b<T, K, W>(bt0, x, cols, stride, head, f0, p.f, vec, lane);
  cu::tc_mma<T, NT>(acc, at, bt, lane);
}

template <typename T>
GNNFUSE_GLOBAL void tc_fill(TcSpmmArgs p) {
  p.out[0] = T(0);
}
"""


def test_mma_without_hmma_fails():
    src = sc.parse_source(TC_SOURCE, TC_HEADER)
    assert sorted(src) == ["spmm_tc0_kernel", "tc_fill"]
    assert src["spmm_tc0_kernel"].tensor_cores and not src["tc_fill"].tensor_cores
    assert src["spmm_tc0_kernel"].async_copies and not src["tc_fill"].async_copies
    # without the header the call is not known to issue mma
    assert not sc.parse_source(TC_SOURCE)["spmm_tc0_kernel"].tensor_cores
    # the real headers: cu::tc_mma issues mma (cuda/tc_fragments.cuh)
    real = sc.parse_source(TC_SOURCE, sc.header_text())["spmm_tc0_kernel"]
    assert real.tensor_cores and real.async_copies

    def run(*functions):
        kernels = sc.parse_sass(elf("sm_90a", *functions).splitlines(keepends=True))
        return sc.check_family("spmm", kernels, src, sc.demangle(k.mangled for k in kernels))

    fill = function("tc_fill", "f", "STG.E [R2.64], RZ ;")
    copy = "LDGSTS.E.BYPASS.128.ZFILL [R2], desc[UR4][R4.64] ;"
    good = run(function("spmm_tc0_kernel", "fLi8E", copy, "HMMA.16816.F32 R4, R8, R12, R4 ;"), fill)
    assert good.violations == [] and good.checks["tensor-cores"] == 1 and good.checks["async-copies"] == 1
    bad = run(function("spmm_tc0_kernel", "fLi8E", copy, "FFMA R4, R8, R12, R4 ;"), fill)
    assert any("spmm_tc0_kernel<float, 8> sm_90a tensor-cores" in v for v in bad.violations), bad.violations
    no_copy = run(function("spmm_tc0_kernel", "fLi8E", "LDS.128 R4, [R2] ;", "HMMA.16816.F32 R4, R8, R12, R4 ;"), fill)
    assert any("spmm_tc0_kernel<float, 8> sm_90a async-copies" in v for v in no_copy.violations), no_copy.violations


# ---------------------------------------------------------------- the gates' type subset
_SUBSET_PROBE = """#include "cuda/type_subset.h"
#if GNNFUSE_CUDA_INSTANTIATES(Float32, Int32)
f32_i32
#endif
#if GNNFUSE_CUDA_INSTANTIATES(Float64, Int64)
f64_i64
#endif
#if GNNFUSE_CUDA_INSTANTIATES(BFloat16, Int32)
bf16_i32
#endif
#if GNNFUSE_CUDA_INSTANTIATES(Float16, Int64)
f16_i64
#endif
"""


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("flags, expected", [
    ([], {"f32_i32", "f64_i64", "bf16_i32", "f16_i64"}),  # the library: every pair
    (["-DGNNFUSE_CUDA_TYPE_SUBSET", "-DGNNFUSE_CUDA_TYPES_Float64_Int64=1", "-DGNNFUSE_CUDA_TYPES_BFloat16_Int32=1"],
     {"f64_i64", "bf16_i32"}),  # what check_cuda.sh --types passes: those pairs only
    (["-DGNNFUSE_CUDA_TYPE_SUBSET"], set()),
])
def test_type_subset_instantiates_the_pairs_it_names(tmp_path, flags, expected):
    import subprocess
    probe = tmp_path / "probe.cpp"
    probe.write_text(_SUBSET_PROBE)
    out = subprocess.run(["c++", "-E", "-P", "-I", os.path.join(_ROOT, "csrc"), *flags, str(probe)],
                         check=True, capture_output=True, text=True).stdout
    assert set(out.split()) == expected
