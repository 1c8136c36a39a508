// Stage 6, CPU target, continued: the decisions below the loop structure that the CPU kernel
// printer used to take while printing. Register tiles of the feature loop of a walk, software
// prefetch of what a walk gathers, and dense product blocks of the parallel row loops become
// annotations of the scheduled tree (LoopSchedule::register_tile, prefetch_rows/_edges, matmul).
#include <algorithm>
#include <functional>
#include <optional>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

bool root_matrix(const Program& p, const Node& root, const std::string& temp) {
  const TensorInfo& t = p.tensor(temp);
  return t.role == Role::Temp && !home_of(p, root, temp) && t.compressed_by.empty() && t.kept_dims == t.dims && t.dims.size() == 2;
}

void mapped_levels(const Node& n, std::set<std::string>* out) {
  for (size_t k = 0; k < n.located.size(); ++k)
    if (n.located_by_map[k]) out->insert(n.located[k]);
  for (auto& c : n.kids) mapped_levels(*c, out);
}

namespace {

class BlockSchedule {
 public:
  BlockSchedule(const Program& p, Node& root) : p_(p), s_(*p.spec), root_(root) {}

  void run(Node& n) {
    std::string level = n.walk;
    if (n.kind == Node::Kind::Loop && level.empty() && !n.space.is_dense()) n.space.single_level(&level);
    if (!level.empty()) {
      if (Node* fl = tile_loop(n)) fl->sched.register_tile = true;
      gathered_rows(n, level);
    }
    if (n.kind == Node::Kind::Loop && n.sched.chunks()) {
      std::size_t kid = 0;
      if (auto g = row_gemm(n, &kid)) {
        g->overwrite = product_overwrites(n, *g, kid);
        n.kids[kid]->sched.matmul = std::make_shared<const MatmulBlock>(*g);
      }
    }
    for (auto& k : n.kids) run(*k);
  }

 private:
  const Program& p_;
  const OpSpec& s_;
  const Node& root_;

  bool root_matrix(const std::string& name) const { return codegen::root_matrix(p_, root_, name); }

  // ---- register tiles ----
  // A walk whose body is scalar statements on per-entry values (temporaries homed in the walk)
  // and one dense simd loop over f that sums into row accumulators (temporaries kept over f
  // alone, homed outside the walk) with + - * of scalars and dense rows contiguous in f.
  // Returns that loop, or nullptr when the walk has another form.
  Node* tile_loop(Node& n) const {
    std::function<bool(const Node&, const Node&)> inside = [&](const Node& root, const Node& x) {
      if (&root == &x) return true;
      for (auto& k : root.kids)
        if (inside(*k, x)) return true;
      return false;
    };
    auto homed_in_walk = [&](const std::string& temp) {
      const Node* h = home_of(p_, root_, temp);
      return h && inside(n, *h);
    };
    Node* fl = nullptr;
    for (auto& k : n.kids) {
      switch (k->kind) {
        case Node::Kind::Loop:
          if (fl || !k->walk.empty() || !k->space.is_dense() || !k->sched.simd() || !k->sched.simd_reduction().empty() ||
              !k->located.empty())
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
      if (t.role != Role::Temp || !st.accumulate || st.reduce != Reduce::Sum || t.kept_dims != std::vector<std::string>{f} ||
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

  // ---- prefetch ----
  void gathered_rows(Node& n, const std::string& level) const {
    const bool csc = p_.walks_csc(level);
    std::set<std::string> seen;
    n.sched.prefetch_rows.clear();
    n.sched.prefetch_edges.clear();
    std::function<void(const Node&)> rec = [&](const Node& m) {
      if (m.kind == Node::Kind::Compute)
        for (auto& o : p_.stmts[m.stmt].rhs) {
          if (o.is_const || seen.count(o.access.tensor)) continue;
          const Access& a = o.access;
          const TensorInfo& t = p_.tensor(a.tensor);
          if ((t.role == Role::DenseInput || root_matrix(a.tensor)) && !a.idx.empty() && a.idx[0] == n.var) {
            n.sched.prefetch_rows.push_back(a);
          } else if (csc && t.role == Role::EdgeInput && t.pattern == level) {
            n.sched.prefetch_edges.push_back(a.tensor);
          } else if (csc && t.role == Role::SparseInput && a.tensor == level && !s_.find(a.tensor)->values.empty()) {
            n.sched.prefetch_edges.push_back(a.tensor);
          } else {
            continue;
          }
          seen.insert(a.tensor);
        }
      for (auto& k : m.kids) rec(*k);
    };
    rec(n);
  }

  // ---- dense product blocks ----
  using RowOperand = MatmulBlock::RowOperand;

  bool row_operand(const Node& top, const Access& a, RowOperand* out) const {
    const TensorInfo& t = p_.tensor(a.tensor);
    if (t.role == Role::Temp) {
      if (home_of(p_, root_, a.tensor) != &top || t.kept_dims.size() != 1 || !t.compressed_by.empty()) return false;
      for (size_t k = 0; k < t.dims.size(); ++k)
        if (t.dims[k] == t.kept_dims[0]) *out = RowOperand{a.tensor, true, a.idx[k]};
      return true;
    }
    if (t.role != Role::DenseInput || a.idx.size() != 2 || a.idx != t.dims || a.idx[0] != top.var || a.idx[1] == top.var) return false;
    *out = RowOperand{a.tensor, false, a.idx[1]};
    return true;
  }

  bool dense_operand(const Node& top, const Access& a) const {
    const TensorInfo& t = p_.tensor(a.tensor);
    return t.role == Role::DenseInput && a.idx.size() == 2 && a.idx == t.dims && a.idx[0] != a.idx[1] &&
           std::count(a.idx.begin(), a.idx.end(), top.var) == 0;
  }

  static bool plain_dense_loop(const Node& n) {
    return n.kind == Node::Kind::Loop && n.walk.empty() && n.space.is_dense() && n.located.empty();
  }

  static bool product_stmt(const Stmt& s) {
    return s.accumulate && s.reduce == Reduce::Sum && s.op == Stmt::Op::Mul && s.rhs.size() == 2 && !s.rhs[0].is_const && !s.rhs[1].is_const;
  }

  // `st` multiplies a row operand over `x` (not g->target) by a dense operand over (x, g->c) or
  // (g->c, x): fills r, x, dense and transpose.
  bool row_times_dense(const Node& top, const Stmt& st, const std::string& x, MatmulBlock* g) const {
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

  // The first child of the parallel row loop `top` that is a dense product block (its index in
  // *kid), if any; none when the row loop fills row maps or holds scalar or row-length buffers.
  std::optional<MatmulBlock> row_gemm(const Node& top, std::size_t* kid) const {
    std::set<std::string> maps;
    mapped_levels(top, &maps);
    if (!maps.empty()) return std::nullopt;
    for (auto& name : p_.temps)
      if (home_of(p_, root_, name) == &top) {
        const TensorInfo& t = p_.tensor(name);
        if (t.kept_dims.empty() || !t.compressed_by.empty()) return std::nullopt;  // a scalar or a row-length buffer
      }
    for (size_t k = 0; k < top.kids.size(); ++k) {
      const Node& l1 = *top.kids[k];
      if (!plain_dense_loop(l1)) continue;
      *kid = k;
      // Product and Outer: two nested dense loops around one statement.
      if (l1.kids.size() == 1 && plain_dense_loop(*l1.kids[0]) && l1.kids[0]->kids.size() == 1 &&
          l1.kids[0]->kids[0]->kind == Node::Kind::Compute) {
        const Node& l2 = *l1.kids[0];
        const Stmt& st = p_.stmts[l2.kids[0]->stmt];
        if (!product_stmt(st)) continue;
        const std::set<std::string> vars{l1.var, l2.var};
        const TensorInfo& lhs = p_.tensor(st.lhs.tensor);
        if (lhs.role != Role::Temp || !lhs.compressed_by.empty()) continue;
        MatmulBlock g;
        g.target = st.lhs.tensor;
        if (home_of(p_, root_, st.lhs.tensor) == &top && lhs.kept_dims.size() == 1) {
          g.form = MatmulBlock::Form::Product;
          RowOperand lr;
          if (!row_operand(top, st.lhs, &lr)) continue;
          g.c = lr.var;
          if (vars.count(g.c) && row_times_dense(top, st, *vars.begin() == g.c ? *vars.rbegin() : *vars.begin(), &g)) return g;
        } else if (root_matrix(st.lhs.tensor) && st.lhs.idx == lhs.dims && st.lhs.idx[0] == top.var && vars.count(st.lhs.idx[1])) {
          // C(i,c) += R(i,x) * D: the rows of a root matrix, in place.
          g.form = MatmulBlock::Form::Product;
          g.matrix_target = true;
          g.c = st.lhs.idx[1];
          if (row_times_dense(top, st, *vars.begin() == g.c ? *vars.rbegin() : *vars.begin(), &g)) return g;
        } else if (!home_of(p_, root_, st.lhs.tensor) && std::count(top.sched.private_sums().begin(), top.sched.private_sums().end(), st.lhs.tensor) &&
                   lhs.kept_dims.size() == 2 && lhs.dims == lhs.kept_dims && st.lhs.idx == lhs.dims &&
                   vars == std::set<std::string>(lhs.dims.begin(), lhs.dims.end())) {
          g.form = MatmulBlock::Form::Outer;
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
        MatmulBlock g;
        g.form = MatmulBlock::Form::Dot;
        g.target = out.lhs.tensor;
        g.c = l1.var;
        if (row_times_dense(top, st, l1.kids[1]->var, &g)) return g;
      }
    }
    return std::nullopt;
  }

  // Product: C's reset before the product and no other statement writing C; then the product
  // overwrites C (no zeroing pass, no load of C).
  bool product_overwrites(const Node& top, const MatmulBlock& g, std::size_t kid) const {
    if (g.form != MatmulBlock::Form::Product) return false;
    bool reset = false;
    for (size_t k = 0; k < kid; ++k)
      if (top.kids[k]->kind == Node::Kind::Reset && top.kids[k]->tensor == g.target) reset = true;
    size_t writers = 0;
    for (auto& st : p_.stmts)
      if (st.lhs.tensor == g.target) ++writers;
    return reset && writers == 1;
  }
};

}  // namespace

void schedule_cpu_blocks(const Program& p, Node& root) { BlockSchedule(p, root).run(root); }

}  // namespace gnnfuse::codegen
