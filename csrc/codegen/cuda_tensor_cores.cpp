// The Tensor-Core SpMM kernels of a family (issue 26, seed 004): for the ops of tensor_core_form
// (ir.h: the SpMM form and its per-head form), the generator prints one kernel per form of entry
// values (how many value factors, which are over the head, which may be absent) and per op a
// launcher, <op>_cuda_tc, that the op's CUDA adapter hands to cuda_adapter::tensor_core_spmm
// (which builds the condensed view, cuda/tc_spmm.h, and chooses). The printed kernel is the
// view's walk around the mma: per (window, head, column slab) of a warp, per block of the window
// the A tile from the block's entries (the product of the value factors at each entry, and at
// the head, summed over duplicate places in CSR order, in float, rounded once), the B tile of the
// block's rows of x (at the head) staged one block ahead by cp.async into two buffers, the
// fragments (ldmatrix) and mma (cuda/tc_fragments.cuh); the window's rows stored.
// Its transposition is the view's (op(A) = A^T: windows of A's columns), not the kernel's.
// Beside it, per form, seed 004's rows kernel (<fam>_tcN_rows_kernel, cuda/tc_spmm.h: the rows
// of op(A) in buckets by entries, one launch per bucket, each pass's entry values in the B
// fragment of mma.m16n8k8 and the staged rows of x in A, outputs the trace of D), float16 and
// bfloat16; the launcher runs the one args.kernel names.
#include <map>
#include <sstream>

#include "codegen/cuda_kernel.h"

namespace gnnfuse::codegen::emit {

namespace {

// What a kernel depends on: the per-head form, and per value factor (over the head, optional).
struct TcKey {
  bool heads = false;
  std::vector<std::pair<bool, bool>> factors;
  bool operator<(const TcKey& o) const { return std::tie(heads, factors) < std::tie(o.heads, o.factors); }
};

TcKey key_of(const TensorCoreForm& f) {
  TcKey k;
  k.heads = !f.head.empty();
  for (size_t i = 0; i < f.values.size(); ++i) k.factors.emplace_back(f.heads[i], f.optional[i]);
  return k;
}

std::string tc_type(DType d) {
  switch (d) {
    case DType::Float16: return "Half";
    case DType::BFloat16: return "BFloat16";
    case DType::Float32: return "Float32";
    case DType::Float64: return "";
  }
  return "";
}

// The value of entry e (of the head h): the product of the factors, in float.
std::string entry_value(const TcKey& k) {
  if (k.factors.empty()) return "1.f";
  std::string v;
  for (size_t i = 0; i < k.factors.size(); ++i) {
    const std::string p = "v" + std::to_string(i);
    std::string term = "cu::to_acc(" + p + "[" + (k.factors[i].first ? "e * p.heads + h" : "e") + "])";
    if (k.factors[i].second) term = "(" + p + " != nullptr ? " + term + " : 1.f)";
    v += (i ? " * " : "") + term;
  }
  return v;
}

std::string kernel_name(const std::string& fam, size_t n) { return fam + "_tc" + std::to_string(n) + "_kernel"; }

// The kernel's value factor pointers (v0, v1, ...), and its walk over units: (`count` items,
// the head where per head, slabs of W columns), each decoded into `item`, h, f0 and head.
void print_factors(const TcKey& k, std::ostream& o) {
  for (size_t i = 0; i < k.factors.size(); ++i)
    o << "  const T* v" << i << " = static_cast<const T*>(p.values[" << i << "]);  // " << (k.factors[i].first ? "[entries, heads]" : "[entries]")
      << (k.factors[i].second ? ", null when absent" : "") << "\n";
}

void print_unit_loop(const TcKey& k, const std::string& count, const std::string& item, std::ostream& o) {
  if (k.heads) {
    o << "  const int64_t stride = p.heads * p.f;  // a row of x and of out: heads x f\n";
    o << "  const int64_t units = " << count << " * p.heads * slabs;\n";
  } else {
    o << "  const int64_t stride = p.f;\n";
    o << "  const int64_t units = " << count << " * slabs;\n";
  }
  o << "  for (int64_t u = static_cast<int64_t>(blockIdx.x) * cu::kTcWarps + warp; u < units; u += static_cast<int64_t>(gridDim.x) * cu::kTcWarps) {\n";
  if (k.heads)
    o << "    const int64_t " << item << " = u / (p.heads * slabs), h = u / slabs % p.heads, f0 = u % slabs * W, head = h * p.f;\n";
  else
    o << "    const int64_t " << item << " = u / slabs, f0 = u % slabs * W, head = 0;\n";
}

void print_kernel(const std::string& name, const TcKey& k, const std::vector<std::string>& about, std::ostream& o) {
  o << "// The Tensor-Core SpMM (cuda/tc_spmm.h, cuda/tc_fragments.cuh) of " << (k.heads ? "every head of " : "");
  for (size_t i = 0; i < about.size(); ++i) o << (i ? ", " : "") << about[i];
  o << "\n";
  o << "template <typename T, int NT>\n";
  o << "GNNFUSE_GLOBAL void __launch_bounds__(cu::kTcWarps * 32, 1) " << name << "(const cu::TcSpmmArgs p, const int64_t slabs) {\n";
  o << "  constexpr int K = cu::TcMma<T>::K, W = NT * 8;\n";
  o << "  constexpr int A_BYTES = 16 * cu::TcMma<T>::A_LD * int(sizeof(T)), B_BYTES = K * cu::tc_b_ld(NT) * int(sizeof(T));  // a warp's A tile, each of its B tiles (rows padded)\n";
  o << "  GNNFUSE_SHARED_ARRAY(uint4, tiles, cu::kTcWarps * (A_BYTES + 2 * B_BYTES) / 16);\n";
  o << "  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;\n";
  o << "  unsigned char* mine = reinterpret_cast<unsigned char*>(tiles) + warp * (A_BYTES + 2 * B_BYTES);\n";
  o << "  T* at = reinterpret_cast<T*>(mine);\n";
  o << "  T* const bt0 = reinterpret_cast<T*>(mine + A_BYTES);  // the B tiles of even and odd blocks\n";
  o << "  T* const bt1 = reinterpret_cast<T*>(mine + A_BYTES + B_BYTES);\n";
  o << "  const T* x = static_cast<const T*>(p.x);\n";
  o << "  T* out = static_cast<T*>(p.out);\n";
  print_factors(k, o);
  o << "  const bool vec = cu::tc_vector_rows<T>(x, p.f);  // B tiles by cp.async\n";
  print_unit_loop(k, "p.windows", "w", o);
  o << "    float acc[NT][4];\n";
  o << "    GNNFUSE_UNROLL\n    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;\n";
  o << "    const int32_t b_begin = __ldg(p.block_ptr + w), b_end = __ldg(p.block_ptr + w + 1);\n";
  o << "    __syncwarp();  // the previous unit's tiles are read\n";
  o << "    if (b_begin < b_end) cu::tc_stage_b<T, K, W>(bt0, x, p.block_cols + static_cast<int64_t>(b_begin) * K, stride, head, f0, p.f, vec, lane);\n";
  o << "    gnnfuse_cp_async_commit();\n";
  o << "    for (int32_t b = b_begin; b < b_end; ++b) {\n";
  o << "      const bool odd = ((b - b_begin) & 1) != 0;\n";
  o << "      __syncwarp();  // the previous block's tiles are read\n";
  o << "      // The next block's B tile, in flight while this block's A tile is built and multiplied.\n";
  o << "      if (b + 1 < b_end) cu::tc_stage_b<T, K, W>(odd ? bt0 : bt1, x, p.block_cols + static_cast<int64_t>(b + 1) * K, stride, head, f0, p.f, vec, lane);\n";
  o << "      gnnfuse_cp_async_commit();\n";
  o << "      cu::tc_clear_tile<T, K>(at, lane);\n";
  o << "      // The A tile: the first entry of each run of one place sums the run (duplicate edges) in float.\n";
  o << "      const int32_t lo = __ldg(p.entry_ptr + b), hi = __ldg(p.entry_ptr + b + 1);\n";
  o << "      bool narrow = false;  // (float16) an entry value the tile cannot hold as float does\n";
  o << "      for (int32_t k = lo + lane; k < hi; k += 32) {\n";
  o << "        const int place = __ldg(p.entry_place + k);\n";
  o << "        if (k > lo && __ldg(p.entry_place + k - 1) == place) continue;\n";
  o << "        float v = 0.f;\n";
  o << "        for (int32_t q = k; q < hi && __ldg(p.entry_place + q) == place; ++q) {\n";
  o << "          const int64_t e = __ldg(p.entry_src + q);\n";
  if (k.factors.empty()) o << "          (void)e;\n";
  o << "          v += " << entry_value(k) << ";\n";
  o << "        }\n";
  o << "        at[cu::tc_a_index<T>(place)] = cu::tc_entry<T>(v);  // (present: a zero stored as +0)\n";
  o << "        narrow = narrow || cu::tc_inexact<T>(v);\n";
  o << "      }\n";
  o << "      gnnfuse_cp_async_wait<1>();  // this block's B tile has landed (the newest group is the next block's)\n";
  o << "      __syncwarp();\n";
  o << "      if (cu::kTcNarrow<T> && __any_sync(0xffffffffu, narrow)) {\n";
  o << "        // (float16) an entry value float16 cannot hold (past its range, or below its normal range and\n";
  o << "        // not exact there): this block by scalar products over its entries, their values in float\n";
  o << "        const T* bt = odd ? bt1 : bt0;\n";
  o << "        for (int32_t k = lo; k < hi; ++k) {\n";
  o << "          const int place = __ldg(p.entry_place + k), in_window = place / K;\n";
  o << "          if (in_window % 8 != lane / 4) continue;  // (the lane's accumulators: rows lane / 4 and lane / 4 + 8)\n";
  o << "          const int64_t e = __ldg(p.entry_src + k);\n";
  if (k.factors.empty()) o << "          (void)e;\n";
  o << "          cu::tc_entry_scalar<T, NT>(acc, " << entry_value(k) << ", bt + place % K * cu::tc_b_ld(NT), in_window >= 8, lane);\n";
  o << "        }\n";
  o << "      } else {\n";
  o << "        cu::tc_mma<T, NT>(acc, at, odd ? bt1 : bt0, lane);\n";
  o << "      }\n";
  o << "    }\n";
  o << "    const int g = lane >> 2, m = lane & 3;\n";
  o << "    GNNFUSE_UNROLL\n    for (int t = 0; t < NT; ++t) {\n";
  o << "      GNNFUSE_UNROLL\n      for (int hf = 0; hf < 2; ++hf) {\n";
  o << "        const int64_t row = w * 16 + g + 8 * hf;\n";
  o << "        if (row >= p.out_rows) continue;\n";
  o << "        GNNFUSE_UNROLL\n        for (int j = 0; j < 2; ++j) {\n";
  o << "          const int64_t c = f0 + t * 8 + 2 * m + j;\n";
  o << "          if (c < p.f) out[row * stride + head + c] = cu::from_acc<T>(acc[t][2 * hf + j]);\n";
  o << "        }\n      }\n    }\n  }\n}\n\n";
  // The launch: NT by the columns per head (cu::tc_spmm_tiles), the grid by cu::tc_blocks.
  o << "template <typename T>\nvoid " << name << "_launch(const cu::TcSpmmArgs& a, void* stream) {\n";
  o << "  const int64_t blocks = cu::tc_blocks(a), slabs = cu::tc_slabs(a);\n";
  o << "  if (blocks == 0) return;\n";
  o << "  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n";
  o << "  switch (cu::tc_spmm_tiles(a.f)) {\n";
  for (int nt : {2, 4, 8})
    o << "    " << (nt == 8 ? "default" : "case " + std::to_string(nt)) << ": GNNFUSE_LAUNCH((" << name << "<T, " << nt
      << ">), static_cast<unsigned>(blocks), cu::kTcWarps * 32, 0, s, a, slabs); break;\n";
  o << "  }\n}\n\n";
}

// Seed 004's rows kernel of the form (cuda/tc_spmm.h, the rows form; cuda/tc_fragments.cuh).
void print_rows_kernel(const std::string& name, const TcKey& k, std::ostream& o) {
  o << "// Seed 004's rows form of the same (TCA-SpMM: mma.m16n8k8 plus a trace; bucket 1 << LOG_B).\n";
  o << "template <typename T, int LOG_B>\n";
  o << "GNNFUSE_GLOBAL void __launch_bounds__(cu::kTcWarps * 32, 1) " << name << "(const cu::TcSpmmArgs p, const int64_t slabs) {\n";
  o << "  constexpr int B = 1 << LOG_B, CH = 8 * B, NM = cu::kTcRowMmas, W = NM * (16 / B);  // entries per pass, columns per slab\n";
  o << "  using Tile = cu::TcRowsTile<B, W>;  // the staged tiles' rows (slots, padding)\n";
  o << "  constexpr int S_BYTES = CH * Tile::kLd * int(sizeof(T));\n";
  o << "  GNNFUSE_SHARED_ARRAY(uint4, tiles, cu::kTcWarps * 2 * S_BYTES / 16);\n";
  o << "  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;\n";
  o << "  const int g = lane >> 2, m = lane & 3;\n";
  o << "  unsigned char* mine = reinterpret_cast<unsigned char*>(tiles) + warp * 2 * S_BYTES;\n";
  o << "  T* const s0 = reinterpret_cast<T*>(mine);  // the staged tiles of even and odd passes\n";
  o << "  T* const s1 = reinterpret_cast<T*>(mine + S_BYTES);\n";
  o << "  const T* x = static_cast<const T*>(p.x);\n";
  o << "  T* out = static_cast<T*>(p.out);\n";
  print_factors(k, o);
  o << "  const bool vec = cu::tc_vector_rows<T>(x, p.f);  // tiles by cp.async\n";
  o << "  const int32_t* rows = p.bucket_rows + p.bucket_first[LOG_B];\n";
  o << "  const int64_t count = p.bucket_first[LOG_B + 1] - p.bucket_first[LOG_B];\n";
  print_unit_loop(k, "count", "r", o);
  o << "    const int64_t i = __ldg(rows + r);  // the row of op(A)\n";
  o << "    const int32_t lo = __ldg(p.row_ptr + i), n = __ldg(p.row_ptr + i + 1) - lo, passes = (n + CH - 1) / CH;\n";
  o << "    float acc[NM][4];\n";
  o << "    GNNFUSE_UNROLL\n    for (int j = 0; j < NM; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;\n";
  o << "    __syncwarp();  // the previous unit's tiles are read\n";
  o << "    if (passes > 0) cu::tc_stage_b<T, CH, W, Tile::kLd, Tile::kSwizzle>(s0, x, p.row_cols + lo, stride, head, f0, p.f, vec, lane, n < CH ? n : CH);\n";
  o << "    gnnfuse_cp_async_commit();\n";
  o << "    for (int32_t pass = 0; pass < passes; ++pass) {\n";
  o << "      const bool odd = (pass & 1) != 0;\n";
  o << "      __syncwarp();  // the previous pass's tile is read\n";
  o << "      // The next pass's rows of x, in flight while this pass's mma run.\n";
  o << "      if (pass + 1 < passes) {\n";
  o << "        const int32_t next = (pass + 1) * CH;\n";
  o << "        cu::tc_stage_b<T, CH, W, Tile::kLd, Tile::kSwizzle>(odd ? s0 : s1, x, p.row_cols + lo + next, stride, head, f0, p.f, vec, lane, n - next < CH ? n - next : CH);\n";
  o << "      }\n";
  o << "      gnnfuse_cp_async_commit();\n";
  o << "      // The B fragment: entries 8 g + 2 m (+ 1) of the pass (chunk g in column g; none past B).\n";
  o << "      float val[2] = {0.f, 0.f};\n";
  o << "      bool narrow = false;  // (float16) a value the fragment cannot hold as float does\n";
  o << "      GNNFUSE_UNROLL\n      for (int q = 0; q < 2; ++q) {\n";
  o << "        const int32_t t = pass * CH + 8 * g + 2 * m + q;\n";
  o << "        if (g < B && t < n) {\n";
  o << "          const int64_t e = p.row_src != nullptr ? __ldg(p.row_src + lo + t) : int64_t(lo) + t;\n";
  if (k.factors.empty()) o << "          (void)e;\n";
  o << "          val[q] = " << entry_value(k) << ";\n";
  o << "          narrow = narrow || cu::tc_inexact<T>(val[q]);\n";
  o << "        }\n      }\n";
  o << "      gnnfuse_cp_async_wait<1>();  // this pass's tile has landed (the newest group is the next pass's)\n";
  o << "      __syncwarp();\n";
  o << "      if (cu::kTcNarrow<T> && __any_sync(0xffffffffu, narrow)) {\n";
  o << "        // (float16) a value float16 cannot hold: the lane's elements D[q B + u][u] of each mma by scalar\n";
  o << "        // products over chunk u's entries, their values in float\n";
  o << "        const T* s = odd ? s1 : s0;\n";
  o << "        GNNFUSE_UNROLL\n        for (int c = 0; c < 4; ++c) {  // the lane's accumulators: rows g (+ 8), columns 2 m (+ 1)\n";
  o << "          const int u = 2 * m + (c & 1), q = (g + 8 * (c >> 1)) / B;\n";
  o << "          if (u >= B || (g + 8 * (c >> 1)) % B != u) continue;\n";
  o << "          for (int k = 0; k < 8 && pass * CH + 8 * u + k < n; ++k) {\n";
  o << "            const int32_t t = pass * CH + 8 * u + k;\n";
  o << "            const int64_t e = p.row_src != nullptr ? __ldg(p.row_src + lo + t) : int64_t(lo) + t;\n";
  if (k.factors.empty()) o << "            (void)e;\n";
  o << "            cu::tc_rows_entry_scalar<T, B, NM>(acc, c, " << entry_value(k) << ", s + Tile::slot(8 * u + k) * Tile::kLd + q);\n";
  o << "          }\n        }\n";
  o << "      } else {\n";
  o << "        cu::tc_rows_mma<T, B, NM>(acc, odd ? s1 : s0, cu::tc_rows_b<T>(val[0], val[1]), lane);\n";
  o << "      }\n";
  o << "    }\n";
  o << "    cu::tc_rows_store<T, B, NM>(acc, out + i * stride + head, f0, p.f, lane);\n";
  o << "  }\n}\n\n";
  o << "template <typename T>\nvoid " << name << "_launch(const cu::TcSpmmArgs& a, void* stream) {\n";
  o << "  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n";
  o << "  for (int b = 0; b < cu::kTcRowBuckets; ++b) {\n";
  o << "    const int64_t blocks = cu::tc_row_blocks(a, b), slabs = cu::tc_row_slabs(a, b);\n";
  o << "    if (blocks == 0) continue;\n";
  o << "    switch (b) {\n";
  for (int b = 0; b < 4; ++b)
    o << "      " << (b == 3 ? "default" : "case " + std::to_string(b)) << ": GNNFUSE_LAUNCH((" << name << "<T, " << b
      << ">), static_cast<unsigned>(blocks), cu::kTcWarps * 32, 0, s, a, slabs); break;\n";
  o << "    }\n  }\n}\n\n";
}

std::string rows_kernel_name(const std::string& fam, size_t n) { return fam + "_tc" + std::to_string(n) + "_rows_kernel"; }

// The ops of a family with a form, in order, each with its kernel's index.
std::vector<std::pair<const Compiled*, size_t>> tc_ops(const Family& f, std::vector<TcKey>& keys, std::vector<std::vector<std::string>>& about) {
  std::vector<std::pair<const Compiled*, size_t>> ops;
  std::map<TcKey, size_t> index;
  for (auto& c : f.ops) {
    const auto form = tensor_core_form(c->spec);
    if (!form) continue;
    const TcKey k = key_of(*form);
    auto [it, fresh] = index.emplace(k, keys.size());
    if (fresh) {
      keys.push_back(k);
      about.emplace_back();
    }
    about[it->second].push_back(c->spec.name);
    ops.emplace_back(c.get(), it->second);
  }
  return ops;
}

}  // namespace

std::string tensor_core_declarations(const Family& f) {
  std::vector<TcKey> keys;
  std::vector<std::vector<std::string>> about;
  std::ostringstream h;
  for (auto& [c, n] : tc_ops(f, keys, about)) {
    h << "// " << c->spec.name << " on Tensor Cores (cuda/tc_spmm.h; cuda_adapter::tensor_core_spmm builds the view and calls it).\n";
    h << "void " << c->spec.name << "_cuda_tc(cuda::TcType type, const cuda::TcSpmmArgs& args, void* stream);\n\n";
  }
  return h.str();
}

std::string tensor_core_kernels(const Family& f) {
  std::vector<TcKey> keys;
  std::vector<std::vector<std::string>> about;
  const auto ops = tc_ops(f, keys, about);
  if (ops.empty()) return "";
  const std::string& fam = f.ops[0]->spec.name;
  std::ostringstream k;
  k << "// ---------------------------------------------------------------- Tensor-Core SpMM\nnamespace {\n\n";
  for (size_t n = 0; n < keys.size(); ++n) {
    print_kernel(kernel_name(fam, n), keys[n], about[n], k);
    print_rows_kernel(rows_kernel_name(fam, n), keys[n], k);
  }
  k << "}  // namespace\n\n";
  for (auto& [c, n] : ops) {
    const OpSpec& s = c->spec;
    k << "void " << s.name << "_cuda_tc(cuda::TcType type, const cuda::TcSpmmArgs& args, void* stream) {\n";
    for (DType d : s.dtypes) {
      if (tc_type(d).empty()) continue;
      k << "#if GNNFUSE_CUDA_INSTANTIATES(" << dtype_token(d) << ", Int32) || GNNFUSE_CUDA_INSTANTIATES(" << dtype_token(d) << ", Int64)\n";
      if (d == DType::Float32)
        k << "  if (type == cuda::TcType::Float32 && args.kernel == cuda::TcKernel::Condensed) return " << kernel_name(fam, n) << "_launch<float>(args, stream);\n";
      else
        k << "  if (type == cuda::TcType::" << tc_type(d) << ") return args.kernel == cuda::TcKernel::Rows ? " << rows_kernel_name(fam, n) << "_launch<"
          << cuda_device_type(d) << ">(args, stream) : " << kernel_name(fam, n) << "_launch<" << cuda_device_type(d) << ">(args, stream);\n";
      k << "#endif\n";
    }
    k << "  (void)type;\n  (void)args;\n  (void)stream;\n";
    k << "  throw std::invalid_argument(\"" << s.name << " on cuda: no Tensor-Core kernel for this dtype\");\n}\n\n";
  }
  return k.str();
}

}  // namespace gnnfuse::codegen::emit
