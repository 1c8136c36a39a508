// The CUDA pattern kernels of a `symbolic S` op (seed 002): the pattern IR (Compiled::pattern,
// the statements BuildRows .. EndOutputRow that SymbolicEmitter prints for the CPU) printed as
// two thread-per-row kernels over cuda/device_runtime.cuh, and their host launches:
//   <op>_symbolic_cuda_slots  per row, its product count (the BeginOutputRow's count walk) turned
//                             into the slots of its column set (cu::row_set_slots), at [row + 1];
//   <op>_symbolic_cuda_rows   rows [r0, r1), each inserting its columns into a hash set of its
//                             slots in `table` (offsets: the slots' running sum), then writing
//                             the set's size at out_rowptr[row + 1] (col null), or its columns
//                             sorted at col + out_rowptr[row] (col given: the row pointers).
// The adapter (aten_cuda.cpp, cuda_adapter::computed_pattern) sizes the chunks of rows so that
// their tables fit a bounded workspace, scans, allocates exactly and runs the second call.
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
    // rows
    line("template <typename index_t>");
    open("GNNFUSE_GLOBAL void " + op + "_rows_k(const " + op +
         "_params prm, int64_t r0_, int64_t r1_, const int64_t* __restrict__ off_, index_t* __restrict__ table_, "
         "int64_t* __restrict__ out_rowptr_, index_t* __restrict__ col_) {");
    locals();
    open("for (int64_t " + i + " = r0_ + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; " + i + " < r1_; " + i +
         " += static_cast<int64_t>(gridDim.x) * blockDim.x) {");
    mode_ = Mode::Rows;
    for (auto& s : top.body) stmt(*s);
    close();
    close();
    line("");
    return os_.str();
  }

  std::string host() {
    os_.str("");
    depth_ = 0;
    const std::string op = symbolic_name(s_);
    const std::string prm = "const " + op + "_params& prm";
    // A grid-stride launch of `kernel` over `rows` rows, per index dtype (args: its arguments).
    auto launch = [&](const std::string& kernel, const std::string& rows, const std::function<std::string(const std::string&)>& args) {
      line("const cudaStream_t stream = static_cast<cudaStream_t>(env.stream);");
      line("const int64_t rows_ = " + rows + ";");
      line("if (rows_ <= 0) return;");
      line("const int64_t blocks_ = (rows_ + 255) / 256 < 65535 ? (rows_ + 255) / 256 : 65535;");
      for (auto& it : s_.index_dtypes) {
        const std::string t = ctype(it);
        open("if (itype == " + dtype_enum(it) + ") {");
        line("GNNFUSE_LAUNCH((" + kernel + "<" + t + ">), dim3(static_cast<unsigned>(blocks_)), dim3(256), 0, stream, " + args(t) + ");");
        line("return;");
        close();
      }
      line("throw std::invalid_argument(\"" + op + " on cuda: unsupported index dtype\");");
    };
    const std::string& i = k_.body->body.at(0)->var;
    open("void " + op + "_cuda_slots(" + prm + ", runtime::IType itype, int64_t* slots, const runtime::cuda::Env& env) {");
    launch(op + "_slots_k", "prm.n_" + i, [](const std::string&) { return std::string("prm, slots"); });
    close();
    line("");
    open("void " + op + "_cuda_rows(" + prm +
         ", runtime::IType itype, int64_t r0, int64_t r1, const int64_t* offsets, void* table, int64_t* out_rowptr, void* col, "
         "const runtime::cuda::Env& env) {");
    launch(op + "_rows_k", "r1 - r0", [](const std::string& t) {
      return "prm, r0, r1, offsets, static_cast<" + t + "*>(table), out_rowptr, static_cast<" + t + "*>(col)";
    });
    close();
    line("");
    return os_.str();
  }

  static std::string declarations(const OpSpec& s) {
    const std::string op = symbolic_name(s);
    std::ostringstream h;
    h << "// The pattern " << s.symbolic << " of " << s.name << "'s output on CUDA (seed 002): per row the slots of its column set\n"
      << "// (at slots[row + 1]); then the rows [r0, r1) with their sets in `table` (index_t; row r's at offsets[r] -\n"
      << "// offsets[r0]): their sizes at out_rowptr[row + 1] (col null), or their columns sorted at col + out_rowptr[row].\n";
    h << "void " << op << "_cuda_slots(const " << op << "_params& prm, runtime::IType itype, int64_t* slots, const runtime::cuda::Env& env);\n";
    h << "void " << op << "_cuda_rows(const " << op
      << "_params& prm, runtime::IType itype, int64_t r0, int64_t r1, const int64_t* offsets, void* table, int64_t* out_rowptr, void* col, "
         "const runtime::cuda::Env& env);\n\n";
    return h.str();
  }

 private:
  enum class Mode { Slots, Rows };
  Mode mode_ = Mode::Slots;

  void locals() {
    for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";  (void)n_" + v + ";");
    for (auto* t : symbolic_inputs(s_)) {
      line("const index_t* __restrict__ " + t->name + "_rowptr = static_cast<const index_t*>(prm." + t->name + "_rowptr);");
      line("const index_t* __restrict__ " + t->name + "_col = static_cast<const index_t*>(prm." + t->name + "_col);");
      line("(void)" + t->name + "_rowptr;  (void)" + t->name + "_col;");
    }
  }

  // The row's set; the walks, row bounds and product counts are the CPU printer's.
  void stmt(const imp::Stmt& s) override {
    using Kind = imp::Stmt::Kind;
    const std::string& row = k_.body->body.at(0)->var;
    switch (s.kind) {
      case Kind::BeginOutputRow:
        if (mode_ == Mode::Slots) {
          line("int64_t ub_ = 0;");
          for (auto& k : s.body) stmt(*k);
          line("slots_[" + row + " + 1] = cu::row_set_slots(ub_, n_" + p_.inner_var(s_.symbolic) + ");");
        } else {
          line("cu::RowSet<index_t> ws_(table_ + (off_[" + row + "] - off_[r0_]), off_[" + row + " + 1] - off_[" + row + "]);");
        }
        return;
      case Kind::Insert:
        if (!s.body.empty()) fail(s_.loc, "internal error: an insert with a body in the pattern kernel of " + s_.name);
        line("ws_.insert(" + s.var + ");");
        return;
      case Kind::EndOutputRow:
        line("if (col_ == nullptr) out_rowptr_[" + row + " + 1] = ws_.count;");
        line("else ws_.emit_sorted(col_ + out_rowptr_[" + row + "]);");
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
