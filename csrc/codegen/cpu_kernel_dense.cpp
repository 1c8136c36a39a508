// The CPU kernel printer (KernelEmitter), continued: register tiles over the feature loop of a
// walk (runtime::Vec), software prefetch of gathered rows, row-blocked dense products
// (runtime::gemm_acc).
#include <algorithm>
#include <functional>
#include <sstream>

#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

// ---- register tiles (runtime::Vec) ----
// A walk whose body is scalar statements on per-entry values (temporaries homed in the walk)
// and one dense simd loop over f that sums into row accumulators (temporaries kept over f
// alone, homed outside the walk) with + - * of scalars and dense rows contiguous in f.
// Returns that loop, or nullptr when the walk has another form.
const Node* KernelEmitter::tile_loop(const Node& n) const {
  if (!tile_var_.empty()) return nullptr;  // already inside a tiled walk
  std::function<bool(const Node&, const Node&)> inside = [&](const Node& root, const Node& x) {
    if (&root == &x) return true;
    for (auto& k : root.kids)
      if (inside(*k, x)) return true;
    return false;
  };
  auto homed_in_walk = [&](const std::string& temp) {
    const Node* h = home_of(p_, *c_.tree, temp);
    return h && inside(n, *h);
  };
  const Node* fl = nullptr;
  for (auto& k : n.kids) {
    switch (k->kind) {
      case Node::Kind::Loop:
        if (fl || !k->walk.empty() || !k->space.is_dense() || !k->sched.simd() || !k->sched.simd_reduction().empty() || !k->located.empty())
          return nullptr;
        fl = k.get();
        break;
      case Node::Kind::Reset:
        if (!homed_in_walk(k->tensor)) return nullptr;
        break;
      case Node::Kind::Compute: {
        const Stmt& st = p_.stmts[k->stmt];
        if (p_.tensor(st.lhs.tensor).role != Role::Temp || !homed_in_walk(st.lhs.tensor)) return nullptr;
        break;
      }
      case Node::Kind::Root: return nullptr;
    }
  }
  if (!fl) return nullptr;
  const std::string& f = fl->var;
  std::set<std::string> tiles;
  for (auto& k : fl->kids) {
    if (k->kind != Node::Kind::Compute) return nullptr;
    const Stmt& st = p_.stmts[k->stmt];
    const TensorInfo& t = p_.tensor(st.lhs.tensor);
    if (t.role != Role::Temp || !st.accumulate || st.reduce != "sum" || t.kept_dims != std::vector<std::string>{f} ||
        !t.compressed_by.empty() || homed_in_walk(st.lhs.tensor) || !tiles.insert(st.lhs.tensor).second)
      return nullptr;
    if (st.op != Stmt::Op::Copy && st.op != Stmt::Op::Mul && st.op != Stmt::Op::Add && st.op != Stmt::Op::Sub && st.op != Stmt::Op::Neg)
      return nullptr;
    for (auto& o : st.rhs) {
      if (o.is_const) continue;
      const auto& idx = o.access.idx;
      const auto uses = std::count(idx.begin(), idx.end(), f);
      if (uses == 0) continue;  // a scalar in the feature loop: broadcast
      // A dense operand's row (or a root matrix's), contiguous in f: one vector load per tile vector.
      const bool rows = p_.tensor(o.access.tensor).role == Role::DenseInput || root_matrix(o.access.tensor);
      if (!rows || uses != 1 || idx.back() != f) return nullptr;
    }
  }
  return fl;
}

// The walk in passes over tiles of the feature loop: tiles of 4, 2 and 1 vectors while they
// fit, each pass holding its accumulator tile in registers over the whole walk, then the
// plain walk over the remaining columns (all of them for F below one vector).
void KernelEmitter::tiled_walk(const Node& n, const std::string& level, const Node& fl) {
  std::set<std::string> tiles;
  for (auto& k : fl.kids) tiles.insert(p_.stmts[k->stmt].lhs.tensor);
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
    walk(n, level, WalkMode{&fl, lanes});
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
  walk(n, level, WalkMode{});
  tile_var_.clear();
  tile_begin_.clear();
  close();
  close();
}

// The feature loop of a tile pass: each statement once per vector of the tile, f the vector's
// first column, dense rows read as vectors, scalars broadcast.
void KernelEmitter::tile_body(const Node& fl, const WalkMode& mode) {
  open("for (int64_t v_ = 0; v_ < " + std::to_string(mode.lanes) + "; ++v_) {");
  line("const int64_t " + fl.var + " = f0_ + v_ * runtime::Vec<acc_t>::kLanes;");
  vector_reads_ = true;
  for (auto& k : fl.kids) {
    const Stmt& st = p_.stmts[k->stmt];
    line(st.lhs.tensor + "_t_[v_] += " + rhs(st) + ";");
  }
  vector_reads_ = false;
  close();
}

KernelEmitter::Gathered KernelEmitter::gathered_rows(const Node& n, const std::string& level) const {
  Gathered out;
  const bool csc = p_.walks_csc(level);
  std::set<std::string> seen;
  std::function<void(const Node&)> rec = [&](const Node& m) {
    if (m.kind == Node::Kind::Compute)
      for (auto& o : p_.stmts[m.stmt].rhs) {
        if (o.is_const || seen.count(o.access.tensor)) continue;
        const Access& a = o.access;
        const TensorInfo& t = p_.tensor(a.tensor);
        if ((t.role == Role::DenseInput || root_matrix(a.tensor)) && !a.idx.empty() && a.idx[0] == n.var) {
          out.rows.push_back(a);
        } else if (csc && t.role == Role::EdgeInput && t.pattern == level) {
          const TensorDecl* d = s_.find(a.tensor);
          std::string elems = "int64_t(1)";
          for (size_t k = 2; k < d->vars.size(); ++k) elems += " * n_" + d->vars[k];
          out.edge_rows.push_back({a.tensor, elems, ""});
        } else if (csc && t.role == Role::SparseInput && a.tensor == level && !s_.find(a.tensor)->values.empty()) {
          out.edge_rows.push_back({a.tensor + "_val", "int64_t(1)", s_.find(a.tensor)->values_optional ? "kHas" + a.tensor : ""});
        } else {
          continue;
        }
        seen.insert(a.tensor);
      }
    for (auto& k : m.kids) rec(*k);
  };
  rec(n);
  return out;
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
bool KernelEmitter::prefetch_setup(const std::string& level, const Gathered& g, const WalkMode& mode) {
  if (g.empty()) return false;
  open("{");  // sibling walks over one operand each get their own distance
  std::string bytes = "int64_t(0)";
  for (auto& a : g.rows) bytes += " + " + row_part(a, mode).second + " * static_cast<int64_t>(sizeof(scalar_t))";
  for (auto& r : g.edge_rows) bytes += " + " + r.elems + " * static_cast<int64_t>(sizeof(scalar_t))";
  line("const int64_t pfd_" + level + " = runtime::prefetch_distance(" + bytes + ");");
  line("const int64_t pfe_" + level + " = static_cast<int64_t>(" + ptr(level) + "[n_" + p_.outer_var(level) + "]);");
  return true;
}

void KernelEmitter::prefetch(const std::string& level, const Gathered& g, const WalkMode& mode) {
  if (g.empty()) return;
  const std::string ahead = pos(level) + " + pfd_" + level;
  open("if (" + ahead + " < pfe_" + level + ") {");
  if (!g.rows.empty())
    line("const int64_t pfj_ = static_cast<int64_t>(" + level + (p_.walks_csc(level) ? "_row[" : "_col[") + ahead + "]);");
  for (auto& a : g.rows) {
    auto part = row_part(a, mode);
    line("runtime::prefetch_row(" + a.tensor + " + pfj_ * " + row_elems(a) + " + " + part.first + ", " + part.second + ");");
  }
  if (!g.edge_rows.empty()) line("const int64_t pfe_row_ = " + level + "_perm[" + ahead + "];");
  for (auto& r : g.edge_rows)
    line((r.guard.empty() ? "" : "if (" + r.guard + ") ") + "runtime::prefetch_row(" + r.ptr + " + pfe_row_ * " + r.elems + ", " +
         r.elems + ");");
  close();
}

bool KernelEmitter::row_operand(const Node& top, const Access& a, RowOperand* out) const {
  const TensorInfo& t = p_.tensor(a.tensor);
  if (t.role == Role::Temp) {
    if (home_of(p_, *c_.tree, a.tensor) != &top || t.kept_dims.size() != 1 || !t.compressed_by.empty()) return false;
    for (size_t k = 0; k < t.dims.size(); ++k)
      if (t.dims[k] == t.kept_dims[0]) *out = RowOperand{a.tensor, true, a.idx[k]};
    return true;
  }
  if (t.role != Role::DenseInput || a.idx.size() != 2 || a.idx != t.dims || a.idx[0] != top.var || a.idx[1] == top.var) return false;
  *out = RowOperand{a.tensor, false, a.idx[1]};
  return true;
}

bool KernelEmitter::dense_operand(const Node& top, const Access& a) const {
  const TensorInfo& t = p_.tensor(a.tensor);
  return t.role == Role::DenseInput && a.idx.size() == 2 && a.idx == t.dims && a.idx[0] != a.idx[1] &&
         std::count(a.idx.begin(), a.idx.end(), top.var) == 0;
}

bool KernelEmitter::plain_dense_loop(const Node& n) {
  return n.kind == Node::Kind::Loop && n.walk.empty() && n.space.is_dense() && n.located.empty();
}

bool KernelEmitter::product_stmt(const Stmt& s) {
  return s.accumulate && s.reduce == "sum" && s.op == Stmt::Op::Mul && s.rhs.size() == 2 && !s.rhs[0].is_const && !s.rhs[1].is_const;
}

// `st` multiplies a row operand over `x` (not g->target) by a dense operand over (x, g->c) or
// (g->c, x): fills r, x, dense and transpose.
bool KernelEmitter::row_times_dense(const Node& top, const Stmt& st, const std::string& x, RowGemm* g) const {
  if (x == g->c) return false;
  for (int side = 0; side < 2; ++side) {
    const Access& ra = st.rhs[side].access;
    const Access& da = st.rhs[1 - side].access;
    RowOperand r;
    if (ra.tensor == g->target || !row_operand(top, ra, &r) || r.var != x || !dense_operand(top, da)) continue;
    const bool plain = da.idx == std::vector<std::string>{x, g->c};
    if (!plain && da.idx != std::vector<std::string>{g->c, x}) continue;
    g->r = r;
    g->x = x;
    g->dense = da.tensor;
    g->transpose = !plain;
    return true;
  }
  return false;
}

std::optional<KernelEmitter::RowGemm> KernelEmitter::row_gemm(const Node& top) const {
  if (!top.sched.chunks() || top.kind != Node::Kind::Loop) return std::nullopt;
  std::set<std::string> maps;
  mapped_levels(top, &maps);
  if (!maps.empty()) return std::nullopt;
  for (auto& name : p_.temps)
    if (home_of(p_, *c_.tree, name) == &top) {
      const TensorInfo& t = p_.tensor(name);
      if (t.kept_dims.empty() || !t.compressed_by.empty()) return std::nullopt;  // a scalar or a row-length buffer
    }
  for (size_t k = 0; k < top.kids.size(); ++k) {
    const Node& l1 = *top.kids[k];
    if (!plain_dense_loop(l1)) continue;
    // Product and Outer: two nested dense loops around one statement.
    if (l1.kids.size() == 1 && plain_dense_loop(*l1.kids[0]) && l1.kids[0]->kids.size() == 1 &&
        l1.kids[0]->kids[0]->kind == Node::Kind::Compute) {
      const Node& l2 = *l1.kids[0];
      const Stmt& st = p_.stmts[l2.kids[0]->stmt];
      if (!product_stmt(st)) continue;
      const std::set<std::string> vars{l1.var, l2.var};
      const TensorInfo& lhs = p_.tensor(st.lhs.tensor);
      if (lhs.role != Role::Temp || !lhs.compressed_by.empty()) continue;
      RowGemm g;
      g.kid = k;
      g.target = st.lhs.tensor;
      if (home_of(p_, *c_.tree, st.lhs.tensor) == &top && lhs.kept_dims.size() == 1) {
        g.form = RowGemm::Form::Product;
        RowOperand lr;
        if (!row_operand(top, st.lhs, &lr)) continue;
        g.c = lr.var;
        if (vars.count(g.c) && row_times_dense(top, st, *vars.begin() == g.c ? *vars.rbegin() : *vars.begin(), &g)) return g;
      } else if (root_matrix(st.lhs.tensor) && st.lhs.idx == lhs.dims && st.lhs.idx[0] == top.var && vars.count(st.lhs.idx[1])) {
        // C(i,c) += R(i,x) * D: the rows of a root matrix, in place.
        g.form = RowGemm::Form::Product;
        g.matrix_target = true;
        g.c = st.lhs.idx[1];
        if (row_times_dense(top, st, *vars.begin() == g.c ? *vars.rbegin() : *vars.begin(), &g)) return g;
      } else if (!home_of(p_, *c_.tree, st.lhs.tensor) &&
                 std::count(top.sched.private_sums().begin(), top.sched.private_sums().end(), st.lhs.tensor) && lhs.kept_dims.size() == 2 &&
                 lhs.dims == lhs.kept_dims && st.lhs.idx == lhs.dims && vars == std::set<std::string>(lhs.dims.begin(), lhs.dims.end())) {
        g.form = RowGemm::Form::Outer;
        RowOperand r0, r1;
        if (!row_operand(top, st.rhs[0].access, &r0) || !row_operand(top, st.rhs[1].access, &r1)) continue;
        if (r0.var == st.lhs.idx[1] && r1.var == st.lhs.idx[0]) std::swap(r0, r1);
        if (r0.var != st.lhs.idx[0] || r1.var != st.lhs.idx[1]) continue;
        g.r = r0;
        g.r2 = r1;
        return g;
      }
      continue;
    }
    // Dot: for c { reset s; for x: s += R(x) * D; Out(i,c) = s }.
    if (l1.kids.size() == 3 && l1.kids[0]->kind == Node::Kind::Reset && plain_dense_loop(*l1.kids[1]) &&
        l1.kids[1]->kids.size() == 1 && l1.kids[1]->kids[0]->kind == Node::Kind::Compute && l1.kids[2]->kind == Node::Kind::Compute) {
      const Stmt& st = p_.stmts[l1.kids[1]->kids[0]->stmt];
      const Stmt& out = p_.stmts[l1.kids[2]->stmt];
      const std::string& sum = l1.kids[0]->tensor;
      const TensorInfo& ot = p_.tensor(out.lhs.tensor);
      const TensorDecl* od = s_.find(out.lhs.tensor);
      if (!product_stmt(st) || st.lhs.tensor != sum || !p_.tensor(sum).kept_dims.empty() || out.op != Stmt::Op::Copy ||
          out.rhs.size() != 1 || out.rhs[0].is_const || out.rhs[0].access.tensor != sum || ot.role != Role::Output ||
          !ot.pattern.empty() || s_.selects() || !od || out.lhs.idx != std::vector<std::string>{top.var, l1.var} ||
          out.lhs.idx != ot.dims)
        continue;
      RowGemm g;
      g.form = RowGemm::Form::Dot;
      g.kid = k;
      g.target = out.lhs.tensor;
      g.c = l1.var;
      if (row_times_dense(top, st, l1.kids[1]->var, &g)) return g;
    }
  }
  return std::nullopt;
}

// Pointer to row operand r's rows of the current block, and its row stride.
std::pair<std::string, std::string> KernelEmitter::block_rows(const RowOperand& r) const {
  if (r.temp) return {"ws_" + r.tensor + ".data()", buffer_size(r.tensor)};
  return {r.tensor + " + ib_ * n_" + r.var, "n_" + r.var};
}

// Before the row loop: D in the accumulation type, row-major over (x, c) as the product reads
// it (a copy only when D is stored (c, x) or in another type; runtime::dense_as).
void KernelEmitter::pack_dense(const RowGemm& g) {
  if (g.form == RowGemm::Form::Outer) return;
  const std::string rows = g.transpose ? g.c : g.x, cols = g.transpose ? g.x : g.c;
  line("std::vector<acc_t> pk_" + g.dense + ";");
  line("const acc_t* __restrict__ pkp_" + g.dense + " = runtime::dense_as<acc_t>(" + g.dense + ", n_" + rows + ", n_" + cols + ", " +
       (g.transpose ? "true" : "false") + ", pk_" + g.dense + ");");
}

// One pass over the rows of the block running the children [from, to) of `top`.
// `skip_reset`: a temporary whose reset the block's product does instead (it overwrites).
void KernelEmitter::block_phase(const Node& top, size_t from, size_t to, const std::string& skip_reset) {
  if (from >= to) return;
  open("for (int64_t r_ = 0; r_ < nb_; ++r_) {");
  line("const int64_t " + top.var + " = ib_ + r_;");
  for (auto& name : p_.temps)
    if (home_of(p_, *c_.tree, name) == &top)
      line("acc_t* __restrict__ " + name + " = ws_" + name + ".data() + r_ * " + buffer_size(name) + ";  (void)" + name + ";");
  enter(top);
  enclosing_.insert(top.var);
  for (size_t k = from; k < to; ++k)
    if (top.kids[k]->kind != Node::Kind::Reset || top.kids[k]->tensor != skip_reset) node(*top.kids[k]);
  enclosing_.erase(top.var);
  close();
}

// Product: C's reset before the product and no other statement writing C; then the product
// overwrites C (no zeroing pass, no load of C).
bool KernelEmitter::product_overwrites(const Node& top, const RowGemm& g) const {
  if (g.form != RowGemm::Form::Product) return false;
  bool reset = false;
  for (size_t k = 0; k < g.kid; ++k)
    if (top.kids[k]->kind == Node::Kind::Reset && top.kids[k]->tensor == g.target) reset = true;
  size_t writers = 0;
  for (auto& st : p_.stmts)
    if (st.lhs.tensor == g.target) ++writers;
  return reset && writers == 1;
}

void KernelEmitter::block_product(const RowGemm& g, bool overwrite) {
  const std::string B = "pkp_" + g.dense;
  switch (g.form) {
    case RowGemm::Form::Product: {
      auto [a, lda] = block_rows(g.r);
      const std::string c = g.matrix_target ? g.target + " + ib_ * n_" + g.c : "ws_" + g.target + ".data()";
      const std::string ldc = g.matrix_target ? "n_" + g.c : buffer_size(g.target);
      line("runtime::gemm_acc<acc_t>(nb_, n_" + g.c + ", n_" + g.x + ", " + a + ", " + lda + ", int64_t(1), " + B + ", n_" + g.c +
           ", " + c + ", " + ldc + (overwrite ? ", true" : "") + ");");
      return;
    }
    case RowGemm::Form::Dot: {
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
    case RowGemm::Form::Outer: {
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
