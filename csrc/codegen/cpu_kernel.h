// The CPU kernel printers: KernelEmitter prints the body of an op's kernel (or of its assembling
// kernel), SymbolicEmitter the body of the pattern kernel of a `symbolic S` op. Both print the
// imperative IR (imperative.h, lowered once by the pipeline: Compiled::kernel, ::assemble,
// ::pattern) and read nothing of the index tree; the Compiled gives the spec and the program's
// tensor facts (declarations, storage), for the C++ spelling.
#pragma once

#include <string>
#include <vector>

#include "codegen/emit.h"
#include "codegen/imperative.h"

namespace gnnfuse::codegen::emit {

class KernelEmitter : public CodeWriter {
 public:
  // `k`: c.kernel (Mode::Values) or c.assemble (Mode::Assemble: the op's output pattern S is not
  // an input but built while the values are computed, seed 002's workspace with values).
  KernelEmitter(const Compiled& c, const imp::Kernel& k);

  std::string body();

 private:
  using IStmt = imp::Stmt;
  using Kind = imp::Stmt::Kind;

  const Compiled& c_;
  const Program& p_;
  const OpSpec& s_;
  const imp::Kernel& k_;
  const std::string S_;     // assembling: the output pattern built by the kernel, else empty
  std::vector<std::string> root_temps_;  // the temporaries allocated at the root (shared by the workers)
  std::string tile_var_;    // the feature variable of the tiled walk being printed
  std::string tile_begin_;  // its plain loop's first column (the columns the tiles left)
  bool vector_reads_ = false;  // dense reads over tile_var_ are vector loads
  std::string lane_sum_, lane_var_;  // in a simd sum's lanes: the sum, read and written as its lane

  void locals();
  // The pointer array that delimits the inner ranges of a sparse operand: rowptr through CSR,
  // colptr through the CSC view.
  std::string ptr(const std::string& sparse) const { return sparse + (p_.walks_csc(sparse) ? "_colptr" : "_rowptr"); }
  std::string buffer_size(const std::string& temp) const;
  static std::string offset(const std::vector<std::string>& idx, const std::vector<std::string>& dims);
  std::string pos(const std::string& sparse) const { return "p_" + sparse; }
  std::string on_edge(const std::string& pattern, const std::vector<std::string>& idx, const std::vector<std::string>& dims) const;
  static std::string init(Reduce r);
  // The CSR position (edge id) of the current entry: the position itself through CSR, perm of
  // it through the CSC view. Values, edge operands and outputs "on" a pattern are in CSR order.
  std::string edge(const std::string& sparse) const { return "e_" + sparse; }

  // ---- values and statements
  std::string read(const imp::Value& v) const;
  std::string value(const imp::Value& v) const;
  std::string temp_ref(const Access& a) const;
  void compute(const IStmt& s);
  void stmt(const IStmt& s);
  void stmts(const std::vector<imp::StmtP>& body);
  void alloc(const IStmt& a);
  void row_bounds(const IStmt& r);
  void locate(const IStmt& l);
  void fill_map(const IStmt& m, bool fill);
  void per_worker(const IStmt& top);
  void dense_loop(const IStmt& l);
  void simd_sum(const IStmt& l);

  // How a walk is printed: plainly (lanes 0), or as one register-tile pass of `lanes` vectors
  // over the feature loop `f_loop` starting at column f0_ (see tiled_walk).
  struct WalkMode {
    const IStmt* f_loop = nullptr;
    int lanes = 0;
  };
  void walk(const IStmt& w, const WalkMode& mode);

  // ---- register tiles (runtime::Vec), over the For marked register_tile (cpu_kernel_dense.cpp)
  void tiled_walk(const IStmt& w, const IStmt& fl);
  void tile_body(const IStmt& fl, const WalkMode& mode);

  // ---- prefetch of what the schedule marked (LoopSchedule::prefetch_rows, prefetch_edges) ----
  struct EdgeRow {
    std::string ptr, elems, guard;  // guard: the optional values' flag, or ""
  };
  EdgeRow edge_row(const std::string& tensor) const;
  static std::string row_elems(const Access& a);
  std::pair<std::string, std::string> row_part(const Access& a, const WalkMode& mode) const;
  bool prefetch_setup(const IStmt& w, const WalkMode& mode);
  void prefetch(const IStmt& w, const WalkMode& mode);

  // ---- row-blocked dense products (runtime::gemm_acc): a Parallel marked `blocked`, whose body
  // is RowPass?, Matmul, RowPass?. The row loop then runs in blocks of runtime::kRowBlock rows:
  // a pass over the rows of the block (its temporaries in block-sized workspaces, one slot per
  // row), the product once for the block through gemm_acc, then the pass after it.
  std::pair<std::string, std::string> block_rows(const MatmulBlock::RowOperand& r) const;
  void pack_dense(const MatmulBlock& g);
  void row_pass(const IStmt& pass);
  void block_product(const MatmulBlock& g);

  // ---- top-level loops
  void top(const IStmt& l);
  void parallel(const IStmt& l);

  // ---- assembly: the output pattern S built with the values (`<op>_assemble`) ----
  void build_rows(const IStmt& l);
  void begin_output_row(const IStmt& b);
  void insert_output(const IStmt& ins);
  void output_walk(const IStmt& w);
};

// ---------------------------------------------------------------- pattern kernels
// `symbolic S`: the pattern S of the op's output, computed from the other csr operands by
// walking the values kernel's loop nest without values (seed 002's sparse-workspace template
// at order 1, one output row at a time), as lowered in c.pattern: a first walk sums the lengths
// of the innermost walks (the row's product count, an upper bound of its length) and picks the
// workspace policy, a second inserts every output coordinate. Pass 1 counts each row's
// distinct coordinates (the output is then allocated exactly); pass 2 writes them sorted.
class SymbolicEmitter : public CodeWriter {
 public:
  SymbolicEmitter(const Compiled& c, const imp::Kernel& k) : p_(c.program), s_(c.spec), k_(k) {}
  virtual ~SymbolicEmitter() = default;

  std::string body();

  // The product count of a row (ub_) of a BeginOutputRow, indented `depth` levels.
  std::string product_count(const imp::Stmt& begin, int depth);

 protected:
  const Program& p_;
  const OpSpec& s_;
  const imp::Kernel& k_;

  void count(const imp::Stmt& begin);
  // One statement of the pattern IR; the CUDA pattern printer (cuda_symbolic.cpp) keeps the walks,
  // row bounds and counts and prints the row's set (BeginOutputRow, Insert, EndOutputRow) its way.
  virtual void stmt(const imp::Stmt& s);
};

}  // namespace gnnfuse::codegen::emit
