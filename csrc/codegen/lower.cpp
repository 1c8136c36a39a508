// The lowering below the scheduled index tree, for every target: stored-entry semantics
// (entry_semantics) and the imperative IR (imp::lower: the values kernel of an op, and for a
// `symbolic S` op its assembling and pattern kernels). Its text: imperative_print.cpp.
#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "codegen/imperative.h"

namespace gnnfuse::codegen {

namespace {

// The sparse operand whose row (open in an enclosing loop, not being walked) a temporary is a
// sum over, directly or as a factor of a product or a sum of such products; "" if none. Such a
// value is an empty sum, 0, for a row without entries, whatever it is multiplied by.
std::string empty_walk_of(const Program& p, const Operand& o, const std::set<std::string>& enclosing,
                          const std::set<std::string>& walking, int depth = 0) {
  if (o.is_const || depth > 8 || p.tensor(o.access.tensor).role != Role::Temp) return "";
  for (auto& st : p.stmts) {
    if (st.lhs.tensor != o.access.tensor) continue;
    if (st.accumulate && st.reduce == Reduce::Sum)
      for (auto& t : p.spec->tensors)
        if (t.role == Role::SparseInput && enclosing.count(p.outer_var(t.name)) && !walking.count(t.name))
          for (auto& v : st.sum_vars)
            if (v == p.inner_var(t.name)) return t.name;
    if (st.op == Stmt::Op::Mul || st.op == Stmt::Op::Copy)
      for (size_t k = 0; k < st.rhs.size(); ++k) {
        std::string w = empty_walk_of(p, st.rhs[k], enclosing, walking, depth + 1);
        if (!w.empty()) return w;
      }
  }
  return "";
}

}  // namespace

std::vector<EntryRule> entry_semantics(const Program& p, const Node& root) {
  std::vector<EntryRule> out(p.stmts.size());
  const OpSpec& s = *p.spec;
  std::set<std::string> enclosing, walking;  // variables of the enclosing loops; levels they walk or locate
  std::function<void(const Node&)> rec = [&](const Node& n) {
    if (n.kind == Node::Kind::Compute) {
      const Stmt& st = p.stmts[n.stmt];
      EntryRule& r = out[static_cast<size_t>(n.stmt)];
      if (st.op == Stmt::Op::Div) {
        r.div_nonempty = empty_walk_of(p, st.rhs[0], enclosing, walking);
        if (r.div_nonempty.empty()) r.div_nonempty = empty_walk_of(p, st.rhs[1], enclosing, walking);
      }
      if (p.tensor(st.lhs.tensor).role == Role::Output && s.selects()) {
        r.store_empty_zero = s.reduced_operand()->name;
        r.row = s.reduced_operand()->vars[0];
      }
    }
    std::vector<std::string> added;
    if (n.kind == Node::Kind::Loop) {
      std::string level = n.walk;
      if (level.empty() && !n.space.is_dense()) n.space.single_level(&level);
      if (!level.empty()) added.push_back(level);
      added.insert(added.end(), n.located.begin(), n.located.end());
    }
    std::vector<std::string> fresh;
    for (auto& l : added)
      if (walking.insert(l).second) fresh.push_back(l);
    const bool bound = n.kind == Node::Kind::Loop && enclosing.insert(n.var).second;
    for (auto& k : n.kids) rec(*k);
    if (bound) enclosing.erase(n.var);
    for (auto& l : fresh) walking.erase(l);
  };
  rec(root);
  return out;
}

}  // namespace gnnfuse::codegen

// ---------------------------------------------------------------- the imperative IR
namespace gnnfuse::codegen::imp {

namespace {

ValueP make(Value v) { return std::make_shared<const Value>(std::move(v)); }

StmtP stmt(Stmt::Kind kind) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  return s;
}

class Lowering {
 public:
  Lowering(const Compiled& c, Mode mode)
      : c_(c), p_(c.program), s_(c.spec), mode_(mode), S_(mode == Mode::Values ? std::string() : c.spec.symbolic),
        rules_(entry_semantics(p_, *c.tree)) {
    for (auto& name : p_.temps) home_[name] = home_of(p_, *c.tree, name);
  }

  Kernel run() {
    Kernel k;
    k.name = s_.name + (mode_ == Mode::Assemble ? "_assemble" : mode_ == Mode::Pattern ? "_symbolic" : "");
    k.mode = mode_;
    k.pattern = S_;
    k.body = stmt(Stmt::Kind::Block);
    if (mode_ == Mode::Pattern) {
      pattern_kernel(k.body->body);
      return k;
    }
    for (auto& name : p_.temps)
      if (!home_.at(name)) k.body->body.push_back(alloc(name));
    for (auto& n : c_.tree->kids) top(*n, k.body->body);
    return k;
  }

 private:
  const Compiled& c_;
  const Program& p_;
  const OpSpec& s_;
  const Mode mode_;
  const std::string S_;  // Assemble, Pattern: the output pattern the kernel builds
  const std::vector<EntryRule> rules_;
  std::map<std::string, const Node*> home_;  // per temporary: the loop that is its home (nullptr: the root)
  std::set<std::string> enclosing_;  // variables of the enclosing loops
  std::set<std::string> walking_;    // sparse operands walked or located by the enclosing loops
  std::string row_var_;              // Assemble: the variable of the loop over S's rows

  StmtP alloc(const std::string& name, Stmt::Kind kind = Stmt::Kind::Alloc) const {
    const TensorInfo& t = p_.tensor(name);
    auto a = stmt(kind);
    a->tensor = name;
    a->init = t.init;
    a->dims = t.kept_dims;
    a->compressed_by = t.compressed_by;
    a->global = t.compressed_global;
    return a;
  }

  // A temporary's access at its kept indices.
  Access kept(const Access& a) const {
    const TensorInfo& t = p_.tensor(a.tensor);
    if (t.role != Role::Temp) return a;
    Access out{a.tensor, {}};
    for (size_t d = 0; d < a.idx.size() && d < t.dims.size(); ++d)
      if (std::count(t.kept_dims.begin(), t.kept_dims.end(), t.dims[d])) out.idx.push_back(a.idx[d]);
    return out;
  }

  ValueP read(const Operand& o) const {
    Value v;
    if (o.is_const) {
      v.value = o.value;
      return make(v);
    }
    v.kind = Value::Kind::Read;
    v.access = kept(o.access);
    v.role = p_.tensor(o.access.tensor).role;
    v.root_matrix = root_matrix(p_, *c_.tree, o.access.tensor);
    return make(v);
  }

  ValueP value(const codegen::Stmt& s) const {
    Value v;
    auto arg = [&](size_t k) { return read(s.rhs.at(k)); };
    switch (s.op) {
      case codegen::Stmt::Op::Copy: return arg(0);
      case codegen::Stmt::Op::Neg:
        v.kind = Value::Kind::Neg;
        v.args = {arg(0)};
        return make(v);
      case codegen::Stmt::Op::Call:
        v.kind = Value::Kind::Call;
        v.fn = s.fn;
        if (s.has_param || !s.param_arg.empty()) v.param = s.param_arg.empty() ? emit_number(s.param) : s.param_arg;
        v.param_arg = s.param_arg;
        v.value = s.param;
        v.args = {arg(0)};
        return make(v);
      default: break;
    }
    v.kind = Value::Kind::Binary;
    v.op = s.op == codegen::Stmt::Op::Mul ? '*' : s.op == codegen::Stmt::Op::Div ? '/' : s.op == codegen::Stmt::Op::Add ? '+' : '-';
    v.args = {arg(0), arg(1)};
    const std::string& guard = rules_[static_cast<size_t>(s.id)].div_nonempty;
    if (guard.empty()) return make(v);
    Value g;
    g.kind = Value::Kind::Guard;
    g.guard_level = guard;
    g.guard_row = p_.outer_var(guard);
    g.row_open = true;
    g.args = {make(v), make(Value{})};
    return make(g);
  }

  static std::string emit_number(double x) {
    std::ostringstream os;
    os << x;
    return os.str();
  }

  void compute(const codegen::Stmt& s, std::vector<StmtP>& out) const {
    auto a = stmt(s.accumulate ? Stmt::Kind::Accumulate : Stmt::Kind::Assign);
    a->lhs = kept(s.lhs);
    a->reduce = s.reduce;
    a->arg_out = s.arg_out;
    if (!s.arg_out.empty()) {
      a->arg_at = Access{s.arg_out, s.lhs.idx};
      a->arg_of = s_.reduced_operand()->name;
    }
    a->rhs = value(s);
    const EntryRule& r = rules_[static_cast<size_t>(s.id)];
    if (!r.store_empty_zero.empty()) {
      Value g;
      g.kind = Value::Kind::Guard;
      g.guard_level = r.store_empty_zero;
      g.guard_row = r.row;
      g.args = {a->rhs, make(Value{})};
      a->rhs = make(g);
    }
    out.push_back(std::move(a));
  }

  // The sparse operands whose rows the loop over `var` selects (S, built by the kernel, aside).
  void row_bounds(const std::string& var, std::vector<StmtP>& out) const {
    for (auto& t : s_.tensors)
      if (t.role == Role::SparseInput && p_.outer_var(t.name) == var && t.name != S_) {
        auto r = stmt(Stmt::Kind::RowBounds);
        r->var = var;
        r->level = t.name;
        r->csc = p_.walks_csc(t.name);
        out.push_back(std::move(r));
      }
  }

  // The header of a loop (after its Locates): row bounds, the start of S's row, the temporaries
  // homed at n.
  void enter(const Node& n, std::vector<StmtP>& out) const {
    row_bounds(n.var, out);
    if (mode_ == Mode::Assemble && p_.outer_var(S_) == n.var) out.push_back(begin_output_row(n));
    for (auto& name : p_.temps)
      if (home_.at(name) == &n) out.push_back(alloc(name));
  }

  // The row maps some loop under `top` locates through (S, built by the kernel, aside).
  std::set<std::string> maps(const Node& top) const {
    std::set<std::string> m;
    mapped_levels(top, &m);
    m.erase(S_);
    return m;
  }

  StmtP map_stmt(Stmt::Kind kind, const std::string& level) const {
    auto m = stmt(kind);
    m->level = level;
    m->csc = p_.walks_csc(level);
    return m;
  }

  // The storage a worker of the top-level loop `top` allocates once: the non-scalar temporaries
  // homed inside it (a slot per row of a block for those homed at a row-blocked top), row maps.
  void per_worker(const Node& top, bool blocked, std::vector<StmtP>& out) const {
    std::function<void(const Node&)> rec = [&](const Node& n) {
      for (auto& name : p_.temps)
        if (home_.at(name) == &n && !p_.tensor(name).kept_dims.empty()) {
          auto w = alloc(name, Stmt::Kind::Workspace);
          w->blocked = blocked && &n == &top && w->compressed_by.empty();
          out.push_back(std::move(w));
        }
      for (auto& k : n.kids) rec(*k);
    };
    rec(top);
    for (auto& L : maps(top)) out.push_back(map_stmt(Stmt::Kind::MapWorkspace, L));
  }

  void top(const Node& n, std::vector<StmtP>& out) {
    if (mode_ == Mode::Assemble) {
      if (n.kind != Node::Kind::Loop || n.var != p_.outer_var(S_) || !n.space.is_dense() || !n.sched.private_sums().empty())
        fail(s_.loc, "assemble " + S_ + ": the output must be computed under one dense loop over " + S_ + "'s rows");
      for (auto& name : p_.temps)
        if (p_.tensor(name).compressed_by == S_ && p_.tensor(name).compressed_global)
          fail(s_.loc, "assemble " + S_ + ": temporary " + name + " is stored by positions of all of " + S_);
      row_var_ = n.var;
    }
    if (n.kind != Node::Kind::Loop) {
      node(n, out, nullptr);
      return;
    }
    std::string level;
    if (!n.space.single_level(&level) || !level.empty())
      fail(s_.loc, "an outermost loop over '" + n.var + "' must be dense (a csr operand's columns need its row loop outside)");
    loop(n, out, true);
  }

  void node(const Node& n, std::vector<StmtP>& out, const MatmulBlock* block) {
    switch (n.kind) {
      case Node::Kind::Root: return;
      case Node::Kind::Compute: compute(p_.stmts[n.stmt], out); return;
      case Node::Kind::Reset: {
        const TensorInfo& t = p_.tensor(n.tensor);
        if (t.kept_dims.empty() || !home_.at(n.tensor)) return;              // set where allocated
        if (block && block->overwrite && block->target == n.tensor) return;  // the block's product overwrites it
        if (!S_.empty() && t.compressed_by == S_) return;                    // assembling: a slot starts when inserted
        auto f = stmt(Stmt::Kind::Fill);
        f->tensor = n.tensor;
        f->init = t.init;
        out.push_back(std::move(f));
        return;
      }
      case Node::Kind::Loop: loop(n, out, false); return;
    }
  }

  // The matmul block a loop is (none in an assembling kernel, which runs the block's loops as
  // they are).
  const MatmulBlock* matmul(const Node& n) const { return mode_ == Mode::Assemble ? nullptr : n.sched.matmul.get(); }

  void loop(const Node& n, std::vector<StmtP>& out, bool is_top) {
    if (matmul(n)) {
      auto m = stmt(Stmt::Kind::Matmul);
      m->matmul = n.sched.matmul;
      out.push_back(std::move(m));
      return;
    }
    std::string level = n.walk;
    if (level.empty() && !n.space.single_level(&level))
      fail(s_.loc, "loop over '" + n.var + "' iterates " + n.space.str() + ": a union of sparse levels is not lowered yet");
    if (!is_top) {
      for (auto& l : n.located)
        if (!enclosing_.count(p_.outer_var(l)) || walking_.count(l))
          fail(s_.loc, "the loop over '" + n.var + "' co-iterates " + l + ", whose row '" + p_.outer_var(l) + "' no enclosing loop binds");
      if (!level.empty() && level != S_ && walking_.count(level))
        fail(s_.loc, "the loop over '" + n.var + "' walks " + level + " inside another walk over " + level +
                         ": nested walks over one sparse operand are not lowered (write the inner sum so that it is hoisted)");
    }
    auto l = std::make_unique<Stmt>();
    l->var = n.var;
    l->sched = n.sched;
    l->level = level;
    l->csc = !level.empty() && p_.walks_csc(level);
    if (is_top && mode_ == Mode::Assemble) {
      l->kind = Stmt::Kind::BuildRows;
      l->level = S_;
    } else if (level.empty()) {
      l->kind = n.sched.chunks() || n.sched.unit == ParallelUnit::Grid ? Stmt::Kind::Parallel : Stmt::Kind::For;
    } else if (level == S_) {
      const TensorDecl& o = s_.output();
      if (o.pattern != S_ || o.vars.size() != 2) fail(s_.loc, "assemble " + S_ + ": the output must be a matrix on " + S_);
      l->kind = Stmt::Kind::OutputWalk;
      l->tensor = o.name;
      l->row = row_var_;
    } else {
      l->kind = Stmt::Kind::Walk;
    }
    const MatmulBlock* inner = nullptr;  // the (first) child that is a matmul block
    for (auto& k : n.kids)
      if (!inner) inner = matmul(*k);
    l->blocked = inner != nullptr;
    if (is_top) per_worker(n, l->blocked, l->per_worker);
    // Entering the loop: its level is walked, the levels it locates too (located below).
    std::vector<std::string> walked;
    if (!level.empty()) walked.push_back(level);
    for (size_t k = 0; k < n.located.size(); ++k) {
      const std::string& L = n.located[k];
      if (L == S_) {
        auto ins = stmt(Stmt::Kind::Insert);
        ins->var = n.var;
        ins->level = S_;
        for (auto& name : p_.temps)
          if (p_.tensor(name).compressed_by == S_) {
            auto f = stmt(Stmt::Kind::Fill);
            f->tensor = name;
            f->init = p_.tensor(name).init;
            ins->body.push_back(std::move(f));
          }
        l->body.push_back(std::move(ins));
      } else {
        auto loc = stmt(Stmt::Kind::Locate);
        loc->var = n.var;
        loc->level = L;
        loc->csc = p_.walks_csc(L);
        loc->by_map = n.located_by_map[k];
        l->body.push_back(std::move(loc));
      }
      walked.push_back(L);
    }
    for (auto& w : walked) walking_.insert(w);
    const bool bound = enclosing_.insert(n.var).second;
    if (is_top && l->blocked && l->kind == Stmt::Kind::Parallel) {
      row_passes(n, *inner, l->body);
    } else {
      enter(n, l->body);
      if (is_top)
        for (auto& L : maps(n)) l->body.push_back(map_stmt(Stmt::Kind::FillMap, L));
      for (auto& k : n.kids) node(*k, l->body, inner);
    }
    if (bound) enclosing_.erase(n.var);
    for (auto& w : walked) walking_.erase(w);
    if (is_top)
      for (auto& L : maps(n)) l->body.push_back(map_stmt(Stmt::Kind::ClearMap, L));
    out.push_back(std::move(l));
  }

  // A row-blocked Parallel over n: a pass over the rows of a block for the children before the
  // matmul block (when there are any: the reset the product replaces, left out, included), the
  // block, a pass for the children after it. Each pass starts with the row header.
  void row_passes(const Node& n, const MatmulBlock& block, std::vector<StmtP>& out) {
    size_t at = 0;
    while (at < n.kids.size() && matmul(*n.kids[at]) != &block) ++at;
    auto pass = [&](size_t from, size_t to) {
      if (from >= to) return;
      auto r = stmt(Stmt::Kind::RowPass);
      r->var = n.var;
      enter(n, r->body);
      for (size_t k = from; k < to; ++k) node(*n.kids[k], r->body, &block);
      out.push_back(std::move(r));
    };
    pass(0, at);
    node(*n.kids[at], out, &block);
    pass(at + 1, n.kids.size());
  }

  // ---- pattern nests: the loops of the values kernel that insert output coordinates, without
  // values (seed 002's sparse workspace at order 1). `bound`: the product count of a row instead
  // (the nest without its innermost walks, each adding its row's length).

  // Whether a statement inserts output coordinates: it writes the output on S, or a temporary
  // stored by S's positions, in a loop that does not walk S itself (S is what is computed).
  bool inserts(const Node& n, const std::string& walk) const {
    if (n.kind != Node::Kind::Compute) return false;
    const codegen::Stmt& st = p_.stmts[static_cast<size_t>(n.stmt)];
    const TensorInfo& t = p_.tensor(st.lhs.tensor);
    const std::string& S = s_.symbolic;
    bool on_s = (t.role == Role::Output && t.pattern == S) || (t.role == Role::Temp && t.compressed_by == S);
    return on_s && walk != S;
  }

  bool has_insert(const Node& n, const std::string& walk = "") const {
    if (inserts(n, walk)) return true;
    std::string w = n.kind == Node::Kind::Loop && n.var == p_.inner_var(s_.symbolic) ? n.walk : walk;
    for (auto& k : n.kids)
      if (has_insert(*k, w)) return true;
    return false;
  }

  void pattern_node(const Node& n, const std::string& walk, bool bound, std::vector<StmtP>& out) const {
    const std::string& S = s_.symbolic;
    if (!has_insert(n, walk)) return;
    if (n.kind == Node::Kind::Compute) {
      if (bound) return;
      auto ins = stmt(Stmt::Kind::Insert);
      ins->var = p_.inner_var(S);
      ins->level = S;
      out.push_back(std::move(ins));
      return;
    }
    if (n.kind != Node::Kind::Loop) return;
    std::vector<std::string> levels;
    if (!n.space.is_dense()) {
      if (n.space.terms.size() != 1) fail(s_.loc, "symbolic " + S + ": the loop over '" + n.var + "' iterates a union of levels");
      for (auto& l : *n.space.terms.begin())
        if (l != S) levels.push_back(l);
    }
    std::string w = n.var == p_.inner_var(S) ? n.walk : walk;
    if (levels.size() > 1) fail(s_.loc, "symbolic " + S + ": the loop over '" + n.var + "' co-iterates several input operands");
    if (levels.empty()) {
      // A dense loop: needed only when a walk below starts from its variable.
      bool needed = false;
      for (auto& t : s_.tensors) needed = needed || (t.role == Role::SparseInput && t.name != S && p_.outer_var(t.name) == n.var);
      if (!needed) {
        for (auto& k : n.kids) pattern_node(*k, w, bound, out);
        return;
      }
      auto l = stmt(Stmt::Kind::For);
      l->var = n.var;
      row_bounds(n.var, l->body);
      for (auto& k : n.kids) pattern_node(*k, w, bound, l->body);
      out.push_back(std::move(l));
      return;
    }
    const std::string& L = levels[0];
    bool innermost = false;
    for (auto& k : n.kids) innermost = innermost || inserts(*k, w);
    if (bound && innermost) {
      auto c = stmt(Stmt::Kind::CountRow);
      c->level = L;
      out.push_back(std::move(c));
      return;
    }
    auto l = stmt(Stmt::Kind::Walk);
    l->var = n.var;
    l->level = L;
    l->csc = p_.walks_csc(L);
    row_bounds(n.var, l->body);
    for (auto& k : n.kids) pattern_node(*k, w, bound, l->body);
    out.push_back(std::move(l));
  }

  // At the loop `n` over S's rows: the row of S starts, with the product count of its row.
  StmtP begin_output_row(const Node& n) const {
    auto b = stmt(Stmt::Kind::BeginOutputRow);
    b->var = n.var;
    b->level = s_.symbolic;
    for (auto& k : n.kids) pattern_node(*k, "", true, b->body);
    return b;
  }

  // The pattern kernel: one loop over S's rows (in tasks balanced by the first operand walked
  // from its rows by CSR), each row's coordinates inserted where the values kernel computes
  // them, then written sorted.
  void pattern_kernel(std::vector<StmtP>& out) const {
    const std::string& S = s_.symbolic;
    const Node* top = nullptr;
    for (auto& k : c_.tree->kids)
      if (has_insert(*k)) {
        if (top) fail(s_.loc, "symbolic " + S + ": the output's products are computed in two loop nests");
        top = k.get();
      }
    if (!top || top->kind != Node::Kind::Loop || top->var != p_.outer_var(S) || !top->space.is_dense())
      fail(s_.loc, "symbolic " + S + ": the products must be computed under one dense loop over " + S + "'s rows");
    for (auto& t : s_.tensors)
      if (t.role == Role::SparseInput && t.name != S && p_.walks_csc(t.name))
        fail(s_.loc, "symbolic " + S + ": " + t.name + " is walked by columns, which the symbolic pass does not lower");
    auto l = stmt(Stmt::Kind::BuildRows);
    l->var = top->var;
    l->level = S;
    l->sched.unit = ParallelUnit::CpuChunk;
    for (auto& t : s_.tensors)
      if (t.role == Role::SparseInput && t.name != S && l->sched.balance_by.empty() && p_.outer_var(t.name) == top->var) l->sched.balance_by = t.name;
    row_bounds(top->var, l->body);
    l->body.push_back(begin_output_row(*top));
    for (auto& k : top->kids) pattern_node(*k, "", false, l->body);
    auto end = stmt(Stmt::Kind::EndOutputRow);
    end->var = top->var;
    end->level = S;
    l->body.push_back(std::move(end));
    out.push_back(std::move(l));
  }
};

}  // namespace

Kernel lower(const Compiled& c, Mode mode) {
  if (mode != Mode::Values && c.spec.symbolic.empty()) fail(c.spec.loc, "internal error: " + c.spec.name + " does not compute its output pattern");
  return Lowering(c, mode).run();
}

Kernel lower(const Compiled& c, const Node& tree) {
  Compiled v;
  v.spec = c.spec;
  v.target = c.target;
  v.program = c.program;
  v.program.spec = &v.spec;
  v.tree = tree.clone();
  return Lowering(v, Mode::Values).run();
}

}  // namespace gnnfuse::codegen::imp
