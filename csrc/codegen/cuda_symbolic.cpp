// The CUDA pattern kernels of a `symbolic S` op (seed 002): the pattern IR (Compiled::pattern,
// the statements BuildRows .. EndOutputRow that SymbolicEmitter prints for the CPU) printed as
// kernels over cuda/device_runtime.cuh, and their host launches:
//   <op>_symbolic_cuda_slots  per row, its product count (the BeginOutputRow's count walk) turned
//                             into the slots of its column set (cu::row_set_slots), at [row + 1];
//   <op>_symbolic_cuda_rows   the listed rows of one bin (runtime::cuda::PatternBin), each
//                             inserting its columns into its workspace, then writing the set's
//                             size at out_rowptr[row + 1] (col null), or its columns sorted at
//                             col + out_rowptr[row] (col given: the row pointers). List: a thread
//                             per row, a sorted list in registers (cu::RowList); Shared: a block
//                             per row, the row's first loop split over its threads (a short one
//                             over its warps, the lanes over the nested walk), a hash set in
//                             shared memory sorted by the block (cu::SharedRowSet); Global: a
//                             thread per row, a hash set of its slots in `table` (cu::RowSet);
//                             Dense: a block per row as Shared, flags over the columns in `table`
//                             (uint32 words, `most` per row; cu::DenseRowSet).
// The adapter (cuda_adapter::computed_pattern) bins the rows by their slots, sizes the chunks of
// Global and Dense rows so that their tables / flags fit a bounded workspace, scans, allocates
// exactly and runs the second call.
#include <functional>
#include <sstream>

#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

namespace {

class SymbolicCudaPrinter : public SymbolicEmitter {
 public:
  explicit SymbolicCudaPrinter(const Compiled& c) : SymbolicEmitter(c, *c.pattern) {}

  std::string kernels() {
    os_.str("");
    depth_ = 0;
    const std::string op = symbolic_name(s_);
    const imp::Stmt& top = *k_.body->body.at(0);  // BuildRows
    if (top.kind != imp::Stmt::Kind::BuildRows) fail(s_.loc, "internal error: the pattern kernel of " + s_.name + " does not build rows");
    const std::string& i = top.var;
    // slots
    line("template <typename index_t>");
    open("GNNFUSE_GLOBAL void " + op + "_slots_k(const " + op + "_params prm, int64_t* __restrict__ slots_) {");
    locals();
    open("for (int64_t " + i + " = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; " + i + " < n_" + i + "; " + i +
         " += static_cast<int64_t>(gridDim.x) * blockDim.x) {");
    mode_ = Mode::Slots;
    for (auto& s : top.body) {  // up to the row's product count
      stmt(*s);
      if (s->kind == imp::Stmt::Kind::BeginOutputRow) break;
    }
    close();
    close();
    line("");
    // the rows of a bin, listed: rows_[t] for t in [t0_, t1_)
    for (Mode m : {Mode::List, Mode::Shared, Mode::Global, Mode::Dense}) {
      mode_ = m;
      line("template <typename index_t>");
      const std::string tail = "int64_t* __restrict__ out_rowptr_, index_t* __restrict__ col_) {";
      if (m == Mode::List) {
        open("GNNFUSE_GLOBAL void " + op + "_list_k(const " + op + "_params prm, const int64_t* __restrict__ rows_, int64_t t0_, int64_t t1_, " + tail);
      } else if (m == Mode::Shared) {
        open("GNNFUSE_GLOBAL void " + op + "_shared_k(const " + op +
             "_params prm, const int64_t* __restrict__ rows_, int64_t t0_, int64_t t1_, int64_t slots_, " + tail);
        line("GNNFUSE_DYNAMIC_SHARED(index_t, set_);");
        line("GNNFUSE_SHARED_ARRAY(int, set_size_, 1);");
      } else if (m == Mode::Dense) {
        open("GNNFUSE_GLOBAL void " + op + "_dense_k(const " + op +
             "_params prm, const int64_t* __restrict__ rows_, int64_t t0_, int64_t t1_, int64_t words_, uint32_t* __restrict__ bits_, " + tail);
        line("GNNFUSE_SHARED_ARRAY(int64_t, scan_, runtime::cuda::kPatternBlock + 1);");
      } else {
        open("GNNFUSE_GLOBAL void " + op + "_global_k(const " + op +
             "_params prm, const int64_t* __restrict__ rows_, int64_t t0_, int64_t t1_, const int64_t* __restrict__ off_, "
             "index_t* __restrict__ table_, " + tail);
      }
      locals();
      if (m == Mode::Shared || m == Mode::Dense)  // a block per row: every thread of the block walks it
        open("for (int64_t t_ = t0_ + static_cast<int64_t>(blockIdx.x); t_ < t1_; t_ += static_cast<int64_t>(gridDim.x)) {");
      else
        open("for (int64_t t_ = t0_ + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t_ < t1_; t_ += static_cast<int64_t>(gridDim.x) * blockDim.x) {");
      line("const int64_t " + i + " = rows_[t_];");
      for (auto& s : top.body) stmt(*s);
      close();
      close();
      line("");
    }
    return os_.str();
  }

  std::string host() {
    os_.str("");
    depth_ = 0;
    const std::string op = symbolic_name(s_);
    const std::string prm = "const " + op + "_params& prm";
    // A launch of `kernel` per index dtype: grid-stride over `rows` rows, a thread per row (block:
    // a block per row, the bin's shared set of `smem` index_t); args: its arguments.
    // `cap`: the most blocks (grid-stride loops beyond).
    auto launch = [&](const std::string& kernel, const std::string& rows, bool block, const std::string& smem, const std::string& cap,
                      const std::function<std::string(const std::string&)>& args) {
      line("const int64_t rows_ = " + rows + ";");
      line("if (rows_ <= 0) return;");
      line("const int64_t need_ = " + std::string(block ? "rows_" : "(rows_ + 255) / 256") + ";");
      line("const int64_t blocks_ = need_ < " + cap + " ? need_ : " + cap + ";");
      const std::string threads = block ? "runtime::cuda::kPatternBlock" : "256";
      for (auto& it : s_.index_dtypes) {
        const std::string t = ctype(it);
        open("if (itype == " + dtype_enum(it) + ") {");
        line("GNNFUSE_LAUNCH((" + kernel + "<" + t + ">), dim3(static_cast<unsigned>(blocks_)), dim3(" + threads + "), " +
             (smem != "0" ? "static_cast<size_t>(" + smem + ") * sizeof(" + t + ")" : std::string("0")) + ", stream, " + args(t) + ");");
        line("return;");
        close();
      }
      line("throw std::invalid_argument(\"" + op + " on cuda: unsupported index dtype\");");
    };
    const std::string& i = k_.body->body.at(0)->var;
    open("void " + op + "_cuda_slots(" + prm + ", runtime::IType itype, int64_t* slots, const runtime::cuda::Env& env) {");
    line("const cudaStream_t stream = static_cast<cudaStream_t>(env.stream);");
    launch(op + "_slots_k", "prm.n_" + i, false, "0", "int64_t(65535)", [](const std::string&) { return std::string("prm, slots"); });
    close();
    line("");
    open("void " + op + "_cuda_rows(" + prm +
         ", runtime::IType itype, runtime::cuda::PatternBin bin, const int64_t* rows, int64_t t0, int64_t t1, const int64_t* offsets, "
         "int64_t most, int64_t grid, void* table, int64_t* out_rowptr, void* col, const runtime::cuda::Env& env) {");
    line("const cudaStream_t stream = static_cast<cudaStream_t>(env.stream);");
    line("const int64_t grid_ = grid > 0 && grid < 65535 ? grid : 65535;");
    line("(void)most;  (void)table;");
    open("if (bin == runtime::cuda::PatternBin::List) {");
    launch(op + "_list_k", "t1 - t0", false, "0", "grid_", [](const std::string& t) {
      return "prm, rows, t0, t1, out_rowptr, static_cast<" + t + "*>(col)";
    });
    close();
    open("if (bin == runtime::cuda::PatternBin::Shared) {");
    launch(op + "_shared_k", "t1 - t0", true, "most", "grid_", [](const std::string& t) {
      return "prm, rows, t0, t1, most, out_rowptr, static_cast<" + t + "*>(col)";
    });
    close();
    open("if (bin == runtime::cuda::PatternBin::Dense) {");
    launch(op + "_dense_k", "t1 - t0", true, "0", "grid_", [](const std::string& t) {
      return "prm, rows, t0, t1, most, static_cast<uint32_t*>(table), out_rowptr, static_cast<" + t + "*>(col)";
    });
    close();
    launch(op + "_global_k", "t1 - t0", false, "0", "grid_", [](const std::string& t) {
      return "prm, rows, t0, t1, offsets, static_cast<" + t + "*>(table), out_rowptr, static_cast<" + t + "*>(col)";
    });
    close();
    line("");
    return os_.str();
  }

  static std::string declarations(const OpSpec& s) {
    const std::string op = symbolic_name(s);
    std::ostringstream h;
    h << "// The pattern " << s.symbolic << " of " << s.name << "'s output on CUDA (seed 002): per row the slots of its column set\n"
      << "// (at slots[row + 1]); then the rows rows[t0 .. t1) of one bin (runtime::cuda::PatternBin): their sizes at\n"
      << "// out_rowptr[row + 1] (col null), or their columns sorted at col + out_rowptr[row]. offsets: List none, Shared\n"
      << "// none (most: the slots of each of the rows), Global the running sum of the listed rows' slots (row rows[t]'s\n"
      << "// set at offsets[t] - offsets[t0] of `table`, index_t), Dense none (row rows[t]'s flags: `most` uint32 words at\n"
      << "// (t - t0) * most of `table`). grid: the most blocks (<= 0: CUDA's 65535), grid-stride loops beyond.\n";
    h << "void " << op << "_cuda_slots(const " << op << "_params& prm, runtime::IType itype, int64_t* slots, const runtime::cuda::Env& env);\n";
    h << "void " << op << "_cuda_rows(const " << op
      << "_params& prm, runtime::IType itype, runtime::cuda::PatternBin bin, const int64_t* rows, int64_t t0, int64_t t1, "
         "const int64_t* offsets, int64_t most, int64_t grid, void* table, int64_t* out_rowptr, void* col, const runtime::cuda::Env& env);\n\n";
    return h.str();
  }

 private:
  enum class Mode { Slots, List, Shared, Global, Dense };
  Mode mode_ = Mode::Slots;
  bool stride_ = false;  // Shared, Dense: the row's first loop is split over the block's threads
  // Shared, Dense: the walk nested in the first loop whose entries the lanes of a warp take
  // (warps over the first loop's entries) when the first loop is short (split_header).
  const imp::Stmt* inner_ = nullptr;

  // The first walk of s's body (in tree order, s excluded) over an operand that is not `single`.
  const imp::Stmt* inner_walk(const imp::Stmt& s) const {
    for (auto& k : s.body) {
      if (k->kind == imp::Stmt::Kind::Walk && !s_.find(k->level)->single) return k.get();
      if (const imp::Stmt* w = inner_walk(*k)) return w;
    }
    return nullptr;
  }

  // The split of a Shared / Dense row's first loop (`n1` entries), chosen per row: a long one
  // (at least a warp of entries) over the block's threads; a short one (coarsening's clusters of
  // two members, a product row of a few long rows of B) over the block's warps, the lanes of each
  // warp over the nested walk's entries (inner_). The set is the same either way (inserts are
  // idempotent and unordered); the row's work spreads over the block.
  void split_header(const imp::Stmt& s, const std::string& n1) {
    inner_ = inner_walk(s);
    if (!inner_) {
      line("const int64_t at1_ = threadIdx.x, step1_ = blockDim.x;");
      return;
    }
    line("const bool wide_ = (" + n1 + ") >= runtime::cuda::kPatternWideFirst;  // the first loop over the block's threads, else its warps");
    line("const int64_t at1_ = wide_ ? threadIdx.x : threadIdx.x / 32, step1_ = wide_ ? blockDim.x : blockDim.x / 32;");
    line("const int64_t at2_ = wide_ ? 0 : threadIdx.x % 32, step2_ = wide_ ? 1 : 32;");
  }

  void locals() {
    for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";  (void)n_" + v + ";");
    for (auto* t : symbolic_inputs(s_)) {
      line("const index_t* __restrict__ " + t->name + "_rowptr = static_cast<const index_t*>(prm." + t->name + "_rowptr);");
      line("const index_t* __restrict__ " + t->name + "_col = static_cast<const index_t*>(prm." + t->name + "_col);");
      line("(void)" + t->name + "_rowptr;  (void)" + t->name + "_col;");
    }
  }

  // The row's set; the walks, row bounds and product counts are the CPU printer's (the first loop
  // of a Shared row strided over the block).
  void stmt(const imp::Stmt& s) override {
    using Kind = imp::Stmt::Kind;
    const std::string& row = k_.body->body.at(0)->var;
    switch (s.kind) {
      case Kind::BeginOutputRow:
        if (mode_ == Mode::Slots) {
          line("int64_t ub_ = 0;");
          for (auto& k : s.body) stmt(*k);
          line("slots_[" + row + " + 1] = cu::row_set_slots(ub_, n_" + p_.inner_var(s_.symbolic) + ");");
        } else if (mode_ == Mode::List) {
          line("cu::RowList<index_t, static_cast<int>(runtime::cuda::kPatternListSlots / 2)> ws_;");
        } else if (mode_ == Mode::Shared) {
          line("cu::SharedRowSet<index_t> ws_(set_, slots_, set_size_);");
          stride_ = true;
        } else if (mode_ == Mode::Dense) {
          line("cu::DenseRowSet ws_(bits_ + (t_ - t0_) * words_, words_, scan_);");
          stride_ = true;
        } else {
          line("cu::RowSet<index_t> ws_(table_ + (off_[t_] - off_[t0_]), off_[t_ + 1] - off_[t_]);");
        }
        return;
      case Kind::Insert:
        if (!s.body.empty()) fail(s_.loc, "internal error: an insert with a body in the pattern kernel of " + s_.name);
        line("ws_.insert(" + s.var + ");");
        return;
      case Kind::EndOutputRow:
        if (stride_ || inner_) fail(s_.loc, "internal error: the shared pattern kernel of " + s_.name + " found no loop to split");
        if (mode_ == Mode::Shared || mode_ == Mode::Dense) {
          line("const int64_t len_ = ws_.finish(col_ != nullptr);  // (the sizes pass needs no order)");
          line("if (col_ == nullptr) { if (threadIdx.x == 0) out_rowptr_[" + row + " + 1] = len_; }");
          line("else ws_.emit_sorted(col_ + out_rowptr_[" + row + "], len_);");
          return;
        }
        line("if (col_ == nullptr) out_rowptr_[" + row + " + 1] = ws_.count;");
        line("else ws_.emit_sorted(col_ + out_rowptr_[" + row + "]);");
        return;
      case Kind::Walk:
        if (stride_ || &s == inner_) {
          const std::string& L = s.level;
          const bool first = stride_;
          if (first) {
            stride_ = false;
            split_header(s, "static_cast<int64_t>(" + L + "_re) - static_cast<int64_t>(" + L + "_rb)");
          } else {
            inner_ = nullptr;
          }
          const std::string at = first ? "at1_" : "at2_", step = first ? "step1_" : "step2_";
          open("for (int64_t p_" + L + " = static_cast<int64_t>(" + L + "_rb) + " + at + "; p_" + L + " < static_cast<int64_t>(" + L +
               "_re); p_" + L + " += " + step + ") {");  // (int64: no index_t overflow past the last entry)
          line("const int64_t " + s.var + " = static_cast<int64_t>(" + L + (s.csc ? "_row" : "_col") + "[p_" + L + "]);");
          for (auto& k : s.body) stmt(*k);
          close();
          return;
        }
        SymbolicEmitter::stmt(s);
        return;
      case Kind::For:
        if (stride_) {
          stride_ = false;
          split_header(s, "n_" + s.var);
          open("for (int64_t " + s.var + " = at1_; " + s.var + " < n_" + s.var + "; " + s.var + " += step1_) {");
          for (auto& k : s.body) stmt(*k);
          close();
          return;
        }
        SymbolicEmitter::stmt(s);
        return;
      default: SymbolicEmitter::stmt(s);
    }
  }
};

}  // namespace

std::string symbolic_cuda_declarations(const Compiled& c) { return SymbolicCudaPrinter::declarations(c.spec); }

std::string symbolic_cuda_kernels(const Compiled& c) {
  SymbolicCudaPrinter pr(c);
  std::string k = pr.kernels();
  const std::set<std::string> unbound = unbound_indices(pattern_bindings(c.spec));
  check_unbound_extents(c.spec, symbolic_name(c.spec), k, unbound);
  return "// ---------------------------------------------------------------- " + symbolic_name(c.spec) + "\nnamespace {\n\n" + k +
         "}  // namespace\n\n" + pr.host();
}

}  // namespace gnnfuse::codegen::emit
