// The CPU kernel printers: KernelEmitter prints the body of an op's kernel (or of its assembling
// kernel) from the scheduled index tree; SymbolicEmitter the symbolic kernel of a `symbolic S`
// op.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "codegen/emit.h"
#include "codegen/imperative.h"

namespace gnnfuse::codegen::emit {

class KernelEmitter : public CodeWriter {
 public:
  // `assemble`: the op's output pattern S (`symbolic S`) is not an input but built while the
  // values are computed (seed 002's workspace with values): see assemble_top.
  explicit KernelEmitter(const Compiled& c, bool assemble = false)
      : c_(c), p_(c.program), s_(c.spec), S_(assemble ? c.spec.symbolic : std::string()), entries_(entry_semantics(p_, *c.tree)) {}

  std::string body();

 private:
  void locals();
  const Compiled& c_;
  const Program& p_;
  const OpSpec& s_;
  const std::string S_;     // assembling: the output pattern built by the kernel, else empty
  const std::vector<EntryRule> entries_;  // per statement: its stored-entry semantics
  std::string row_var_;     // assembling: the variable of the row loop
  std::set<std::string> walking_;  // sparse operands walked by the enclosing loops
  std::set<std::string> enclosing_;  // variables of the enclosing loops
  std::string tile_var_;    // the feature variable of the tiled walk being emitted
  std::string tile_begin_;  // its plain loop's first column (the columns the tiles left)
  bool vector_reads_ = false;  // dense reads over tile_var_ are vector loads
  std::string lane_sum_, lane_var_;  // in a simd sum's lanes: the sum, read and written as its lane


  bool is_outer_var(const std::string& sparse, const std::string& var) const { return p_.outer_var(sparse) == var; }
  bool root_matrix(const std::string& name) const;
  // The pointer array that delimits the inner ranges of a sparse operand: rowptr through CSR,
  // colptr through the CSC view.
  std::string ptr(const std::string& sparse) const { return sparse + (p_.walks_csc(sparse) ? "_colptr" : "_rowptr"); }

  std::string buffer_size(const std::string& temp) const;

  static std::string offset(const std::vector<std::string>& idx, const std::vector<std::string>& dims);

  std::string pos(const std::string& sparse) const { return "p_" + sparse; }
  std::string on_edge(const std::string& pattern, const std::vector<std::string>& idx, const std::vector<std::string>& dims) const;
  std::string init(const std::string& temp) const;
  // The CSR position (edge id) of the current entry: the position itself through CSR, perm of
  // it through the CSC view. Values, edge operands and outputs "on" a pattern are in CSR order.
  std::string edge(const std::string& sparse) const { return "e_" + sparse; }

  std::string read(const Operand& o) const;

  std::string temp_ref(const Access& a) const;

  std::string rhs(const Stmt& s) const;

  void compute(const Stmt& s);

  void enter(const Node& n);

  void workspaces(const Node& top, bool blocked = false);

  void node(const Node& n);

  // How a walk is emitted: plainly (lanes 0), or as one register-tile pass of `lanes` vectors
  // over the feature loop `f` starting at column f0_ (see tiled_walk).
  struct WalkMode {
    const Node* f_loop = nullptr;
    int lanes = 0;
  };

  void walk(const Node& n, const std::string& level, const WalkMode& mode);

  // ---- register tiles (runtime::Vec), over the loop marked register_tile ----
  void tiled_walk(const Node& n, const std::string& level, const Node& fl);

  void tile_body(const Node& fl, const WalkMode& mode);

  // ---- prefetch of what the schedule marked (LoopSchedule::prefetch_rows, prefetch_edges) ----
  struct EdgeRow {
    std::string ptr, elems, guard;  // guard: the optional values' flag, or ""
  };
  EdgeRow edge_row(const std::string& tensor) const;
  static std::string row_elems(const Access& a);
  std::pair<std::string, std::string> row_part(const Access& a, const WalkMode& mode) const;
  bool prefetch_setup(const std::string& level, const Node& n, const WalkMode& mode);
  void prefetch(const std::string& level, const Node& n, const WalkMode& mode);

  void locate(const Node& n);

  // ---- row-blocked dense products (runtime::gemm_acc): a child of the parallel row loop
  // marked as a MatmulBlock. The row loop then runs in blocks of runtime::kRowBlock rows: the
  // children before the block for every row of the block (its temporaries in block-sized
  // workspaces, one slot per row), the product once for the block through gemm_acc, then the
  // children after it.
  std::pair<std::string, std::string> block_rows(const MatmulBlock::RowOperand& r) const;
  void pack_dense(const MatmulBlock& g);
  void block_phase(const Node& top, size_t from, size_t to, const std::string& skip_reset = "");
  void block_product(const MatmulBlock& g);

  void fill_maps(const Node& top, bool fill);
  void map_workspaces(const Node& top);

  void simd_sum(const Node& n);

  void row_body(const Node& n);

  // ---- assembly: the output pattern S built with the values (`<op>_assemble`) ----
  void assemble_top(const Node& n);
  void begin_output_row(const Node& n);
  void insert_output(const std::string& var);
  void output_rows(const Node& n);

  void top(const Node& n);
};

// ---------------------------------------------------------------- symbolic kernels
// `symbolic S`: the pattern S of the op's output, computed from the other csr operands by
// walking the numeric kernel's loop nest without values (seed 002's sparse-workspace template
// at order 1, one output row at a time): a first walk sums the lengths of the innermost walks
// (the row's product count, an upper bound of its length) and picks the workspace policy, a
// second inserts every output coordinate. Pass 1 counts each row's distinct coordinates (the
// output is then allocated exactly); pass 2 writes them sorted.
class SymbolicEmitter : public CodeWriter {
 public:
  explicit SymbolicEmitter(const Compiled& c) : c_(c), p_(c.program), s_(c.spec), S_(c.spec.symbolic) {}

  std::string body();

  std::string bound(const Node& top, int depth);

 private:
  const Compiled& c_;
  const Program& p_;
  const OpSpec& s_;
  std::string S_;
  bool ub_ = false;

  void emit_bound(const Node& top);

  std::string ptr(const std::string& t) const { return t + (p_.walks_csc(t) ? "_colptr" : "_rowptr"); }

  bool inserts(const Node& n, const std::string& walk) const;
  bool has_insert(const Node& n, const std::string& walk = "") const;
  void enter(const std::string& var);
  void node(const Node& n, const std::string& walk = "");
};

}  // namespace gnnfuse::codegen::emit
