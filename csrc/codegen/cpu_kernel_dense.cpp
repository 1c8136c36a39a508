// The CPU kernel printer (KernelEmitter), continued: how it prints what the CPU schedule
// decided (schedule_cpu_blocks.cpp) and the lowering carries on its statements: register tiles
// over the feature loop of a walk (a For marked register_tile: runtime::Vec), software prefetch
// of gathered rows (a Walk's prefetch annotations), matmul blocks as row-blocked dense products
// (a blocked Parallel around a Matmul: runtime::gemm_acc).
#include <algorithm>
#include <set>
#include <sstream>

#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

// ---- register tiles (runtime::Vec) ----
// The walk in passes over tiles of the feature loop: tiles of 4, 2 and 1 vectors while they
// fit, each pass holding its accumulator tile in registers over the whole walk, then the
// plain walk over the remaining columns (all of them for F below one vector).
void KernelEmitter::tiled_walk(const IStmt& w, const IStmt& fl) {
  std::set<std::string> tiles;
  for (auto& k : fl.body) tiles.insert(k->lhs.tensor);
  const std::string L = "runtime::Vec<acc_t>::kLanes";
  const std::string& f = fl.var;
  open("{");
  line("int64_t f0_ = 0;");
  line("#if defined(GNNFUSE_VECTOR_TILES)");
  for (int lanes : {4, 2, 1}) {
    const std::string width = std::to_string(lanes) + " * " + L;
    open(std::string(lanes == 4 ? "for (; " : "if (") + "f0_ + " + width + " <= n_" + f + (lanes == 4 ? "; f0_ += " + width + ") {" : ") {"));
    for (auto& T : tiles) {
      line("runtime::vec_t<acc_t> " + T + "_t_[" + std::to_string(lanes) + "];");
      line("for (int64_t v_ = 0; v_ < " + std::to_string(lanes) + "; ++v_) " + T + "_t_[v_] = runtime::vload<acc_t>(" + T + " + f0_ + v_ * " + L + ");");
    }
    tile_var_ = f;
    walk(w, WalkMode{&fl, lanes});
    tile_var_.clear();
    for (auto& T : tiles)
      line("for (int64_t v_ = 0; v_ < " + std::to_string(lanes) + "; ++v_) runtime::vstore<acc_t>(" + T + " + f0_ + v_ * " + L + ", " + T + "_t_[v_]);");
    if (lanes != 4) line("f0_ += " + width + ";");
    close();
  }
  line("#endif");
  open("if (f0_ < n_" + f + ") {");
  tile_var_ = f;
  tile_begin_ = "f0_";
  walk(w, WalkMode{});
  tile_var_.clear();
  tile_begin_.clear();
  close();
  close();
}

// The feature loop of a tile pass: each statement once per vector of the tile, f the vector's
// first column, dense rows read as vectors, scalars broadcast.
void KernelEmitter::tile_body(const IStmt& fl, const WalkMode& mode) {
  open("for (int64_t v_ = 0; v_ < " + std::to_string(mode.lanes) + "; ++v_) {");
  line("const int64_t " + fl.var + " = f0_ + v_ * runtime::Vec<acc_t>::kLanes;");
  vector_reads_ = true;
  for (auto& k : fl.body) line(k->lhs.tensor + "_t_[v_] += " + value(*k->rhs) + ";");
  vector_reads_ = false;
  close();
}

std::string KernelEmitter::row_elems(const Access& a) {
  std::string e = "int64_t(1)";
  for (size_t d = 1; d < a.idx.size(); ++d) e += " * n_" + a.idx[d];
  return e;
}

// The part of a gathered row a walk reads: all of it, or in a tiled walk the columns of the
// pass (from f0_: the tile's vectors, or the rest) when the row's last index is the feature.
std::pair<std::string, std::string> KernelEmitter::row_part(const Access& a, const WalkMode& mode) const {
  if (tile_var_.empty() || a.idx.size() != 2 || a.idx.back() != tile_var_) return {"0", row_elems(a)};
  return {"f0_", mode.lanes > 0 ? std::to_string(mode.lanes) + " * runtime::Vec<acc_t>::kLanes" : "(n_" + tile_var_ + " - f0_)"};
}

// Software prefetch of what the walk reads at random (runtime::prefetch_row): the rows of the
// entry a fixed number of positions ahead, across row ends (any position below the operand's
// nnz). Opens a scope (closed after the walk) when it declares anything.
KernelEmitter::EdgeRow KernelEmitter::edge_row(const std::string& tensor) const {
  const TensorDecl* d = s_.find(tensor);
  if (d->role == Role::SparseInput) return {tensor + "_val", "int64_t(1)", d->values_optional ? "kHas" + tensor : ""};
  std::string elems = "int64_t(1)";
  for (size_t k = 2; k < d->vars.size(); ++k) elems += " * n_" + d->vars[k];
  return {tensor, elems, ""};
}

bool KernelEmitter::prefetch_setup(const IStmt& w, const WalkMode& mode) {
  const LoopSchedule& g = w.sched;
  const std::string& level = w.level;
  if (g.prefetch_rows.empty() && g.prefetch_edges.empty()) return false;
  open("{");  // sibling walks over one operand each get their own distance
  std::string bytes = "int64_t(0)";
  for (auto& a : g.prefetch_rows) bytes += " + " + row_part(a, mode).second + " * static_cast<int64_t>(sizeof(scalar_t))";
  for (auto& e : g.prefetch_edges) bytes += " + " + edge_row(e).elems + " * static_cast<int64_t>(sizeof(scalar_t))";
  line("const int64_t pfd_" + level + " = runtime::prefetch_distance(" + bytes + ");");
  line("const int64_t pfe_" + level + " = static_cast<int64_t>(" + ptr(level) + "[n_" + p_.outer_var(level) + "]);");
  return true;
}

void KernelEmitter::prefetch(const IStmt& w, const WalkMode& mode) {
  const LoopSchedule& g = w.sched;
  const std::string& level = w.level;
  if (g.prefetch_rows.empty() && g.prefetch_edges.empty()) return;
  const std::string ahead = pos(level) + " + pfd_" + level;
  open("if (" + ahead + " < pfe_" + level + ") {");
  if (!g.prefetch_rows.empty())
    line("const int64_t pfj_ = static_cast<int64_t>(" + level + (w.csc ? "_row[" : "_col[") + ahead + "]);");
  for (auto& a : g.prefetch_rows) {
    auto part = row_part(a, mode);
    line("runtime::prefetch_row(" + a.tensor + " + pfj_ * " + row_elems(a) + " + " + part.first + ", " + part.second + ");");
  }
  if (!g.prefetch_edges.empty()) line("const int64_t pfe_row_ = " + level + "_perm[" + ahead + "];");
  for (auto& e : g.prefetch_edges) {
    const EdgeRow r = edge_row(e);
    line((r.guard.empty() ? "" : "if (" + r.guard + ") ") + "runtime::prefetch_row(" + r.ptr + " + pfe_row_ * " + r.elems + ", " +
         r.elems + ");");
  }
  close();
}

// Pointer to row operand r's rows of the current block, and its row stride.
std::pair<std::string, std::string> KernelEmitter::block_rows(const MatmulBlock::RowOperand& r) const {
  if (r.temp) return {"ws_" + r.tensor + ".data()", buffer_size(r.tensor)};
  return {r.tensor + " + ib_ * n_" + r.var, "n_" + r.var};
}

// Before the row loop: D in the accumulation type, row-major over (x, c) as the product reads
// it (a copy only when D is stored (c, x) or in another type; runtime::dense_as).
void KernelEmitter::pack_dense(const MatmulBlock& g) {
  if (g.form == MatmulBlock::Form::Outer) return;
  const std::string rows = g.transpose ? g.c : g.x, cols = g.transpose ? g.x : g.c;
  line("std::vector<acc_t> pk_" + g.dense + ";");
  line("const acc_t* __restrict__ pkp_" + g.dense + " = runtime::dense_as<acc_t>(" + g.dense + ", n_" + rows + ", n_" + cols + ", " +
       (g.transpose ? "true" : "false") + ", pk_" + g.dense + ");");
}

// One pass over the rows of the block (a RowPass): the row's temporaries in its slots of their
// block-sized workspaces, then the pass's statements (its row header first).
void KernelEmitter::row_pass(const IStmt& pass) {
  open("for (int64_t r_ = 0; r_ < nb_; ++r_) {");
  line("const int64_t " + pass.var + " = ib_ + r_;");
  for (auto& s : pass.body)
    if (s->kind == Kind::Alloc)
      line("acc_t* __restrict__ " + s->tensor + " = ws_" + s->tensor + ".data() + r_ * " + buffer_size(s->tensor) + ";  (void)" + s->tensor + ";");
  stmts(pass.body);
  close();
}

void KernelEmitter::block_product(const MatmulBlock& g) {
  const std::string B = "pkp_" + g.dense;
  switch (g.form) {
    case MatmulBlock::Form::Product: {
      auto [a, lda] = block_rows(g.r);
      const std::string c = g.matrix_target ? g.target + " + ib_ * n_" + g.c : "ws_" + g.target + ".data()";
      const std::string ldc = g.matrix_target ? "n_" + g.c : buffer_size(g.target);
      line("runtime::gemm_acc<acc_t>(nb_, n_" + g.c + ", n_" + g.x + ", " + a + ", " + lda + ", int64_t(1), " + B + ", n_" + g.c +
           ", " + c + ", " + ldc + (g.overwrite ? ", true" : "") + ");");
      return;
    }
    case MatmulBlock::Form::Dot: {
      auto [a, lda] = block_rows(g.r);
      line("runtime::gemm_acc<acc_t>(nb_, n_" + g.c + ", n_" + g.x + ", " + a + ", " + lda + ", int64_t(1), " + B + ", n_" + g.c +
           ", ws_gemm_.data(), n_" + g.c + ", true);");
      open("for (int64_t r_ = 0; r_ < nb_; ++r_) {");
      line("#pragma omp simd");
      const std::string at = "(ib_ + r_) * n_" + g.c + " + c_";
      const std::string v = "ws_gemm_[static_cast<size_t>(r_ * n_" + g.c + " + c_)]";
      open("for (int64_t c_ = 0; c_ < n_" + g.c + "; ++c_) {");
      if (s_.find(g.target)->acc) line(g.target + "[" + at + "] = " + v + ";");
      else line("runtime::store(&" + g.target + "[" + at + "], " + v + ");");
      close();
      close();
      return;
    }
    case MatmulBlock::Form::Outer: {
      // C(a,b) += sum over the block's rows r of R(r,a) * R2(r,b): R^T as the left operand.
      auto [a, lda] = block_rows(g.r);
      auto [b, ldb] = block_rows(g.r2);
      line("runtime::gemm_acc<acc_t>(n_" + g.r.var + ", n_" + g.r2.var + ", nb_, " + a + ", int64_t(1), " + lda + ", " + b + ", " + ldb +
           ", " + g.target + ", n_" + g.r2.var + ");");
      return;
    }
  }
}

}  // namespace gnnfuse::codegen::emit
