// The lowering below the scheduled index tree, for every target: stored-entry semantics
// (entry_semantics), the imperative IR (imp::lower) and its text (imp::print).
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

class Lowering {
 public:
  explicit Lowering(const Compiled& c) : c_(c), p_(c.program), s_(c.spec), rules_(entry_semantics(p_, *c.tree)) {}

  Kernel run() {
    Kernel k;
    k.name = s_.name;
    k.body = std::make_unique<Stmt>();
    for (auto& name : p_.temps)
      if (!home_of(p_, *c_.tree, name)) k.body->body.push_back(alloc(name));
    for (auto& n : c_.tree->kids) node(*n, k.body->body, nullptr);
    return k;
  }

 private:
  const Compiled& c_;
  const Program& p_;
  const OpSpec& s_;
  const std::vector<EntryRule> rules_;

  StmtP alloc(const std::string& name) const {
    const TensorInfo& t = p_.tensor(name);
    auto a = std::make_unique<Stmt>();
    a->kind = Stmt::Kind::Alloc;
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
        v.param_value = s.param;
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
    auto a = std::make_unique<Stmt>();
    a->kind = s.accumulate ? Stmt::Kind::Accumulate : Stmt::Kind::Assign;
    a->lhs = kept(s.lhs);
    a->reduce = s.reduce;
    a->arg_out = s.arg_out;
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

  // Row bounds of the operands whose rows the loop over var selects, and the temporaries homed at n.
  void enter(const Node& n, std::vector<StmtP>& out) const {
    for (auto& t : s_.tensors)
      if (t.role == Role::SparseInput && p_.outer_var(t.name) == n.var) {
        auto r = std::make_unique<Stmt>();
        r->kind = Stmt::Kind::RowBounds;
        r->var = n.var;
        r->level = t.name;
        r->csc = p_.walks_csc(t.name);
        out.push_back(std::move(r));
      }
    for (auto& name : p_.temps)
      if (home_of(p_, *c_.tree, name) == &n) out.push_back(alloc(name));
  }

  void node(const Node& n, std::vector<StmtP>& out, const MatmulBlock* block) const {
    switch (n.kind) {
      case Node::Kind::Root: return;
      case Node::Kind::Compute: compute(p_.stmts[n.stmt], out); return;
      case Node::Kind::Reset: {
        const TensorInfo& t = p_.tensor(n.tensor);
        if (t.kept_dims.empty() || !home_of(p_, *c_.tree, n.tensor)) return;  // set where allocated
        if (block && block->overwrite && block->target == n.tensor) return;   // the block's product overwrites it
        auto f = std::make_unique<Stmt>();
        f->kind = Stmt::Kind::Fill;
        f->tensor = n.tensor;
        f->init = t.init;
        out.push_back(std::move(f));
        return;
      }
      case Node::Kind::Loop: break;
    }
    if (n.sched.matmul) {
      auto m = std::make_unique<Stmt>();
      m->kind = Stmt::Kind::Matmul;
      m->matmul = n.sched.matmul;
      out.push_back(std::move(m));
      return;
    }
    std::string level = n.walk;
    if (level.empty() && !n.space.is_dense()) n.space.single_level(&level);
    auto l = std::make_unique<Stmt>();
    l->var = n.var;
    l->sched = n.sched;
    const bool parallel = n.sched.chunks() || n.sched.unit == ParallelUnit::Grid;
    l->kind = parallel ? Stmt::Kind::Parallel : level.empty() ? Stmt::Kind::For : Stmt::Kind::Walk;
    l->level = level;
    l->csc = !level.empty() && p_.walks_csc(level);
    const MatmulBlock* inner = nullptr;
    for (auto& k : n.kids)
      if (k->sched.matmul) inner = k->sched.matmul.get();
    l->blocked = inner != nullptr;
    for (size_t k = 0; k < n.located.size(); ++k) {
      auto loc = std::make_unique<Stmt>();
      loc->kind = Stmt::Kind::Locate;
      loc->var = n.var;
      loc->level = n.located[k];
      loc->csc = p_.walks_csc(n.located[k]);
      loc->by_map = n.located_by_map[k];
      l->body.push_back(std::move(loc));
    }
    enter(n, l->body);
    for (auto& k : n.kids) node(*k, l->body, inner);
    out.push_back(std::move(l));
  }
};

std::string access_str(const Access& a) {
  std::string s = a.tensor;
  if (a.idx.empty()) return s;
  s += "(";
  for (size_t k = 0; k < a.idx.size(); ++k) s += (k ? "," : "") + a.idx[k];
  return s + ")";
}

std::string value_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Const: {
      std::ostringstream os;
      os << v.value;
      return os.str();
    }
    case Value::Kind::Read: return access_str(v.access);
    case Value::Kind::Neg: return "-" + value_str(*v.args[0]);
    case Value::Kind::Binary: return value_str(*v.args[0]) + " " + v.op + " " + value_str(*v.args[1]);
    case Value::Kind::Call: return v.fn + "(" + value_str(*v.args[0]) + (v.param.empty() ? "" : ", " + v.param) + ")";
    case Value::Kind::Guard:
      return "(" + std::string(v.row_open ? "row " : "row pointers of ") + v.guard_level + "(" + v.guard_row + ") nonempty ? " +
             value_str(*v.args[0]) + " : " + value_str(*v.args[1]) + ")";
  }
  return "";
}

std::string schedule_str(const LoopSchedule& s) {
  std::string out;
  auto add = [&](const std::string& x) { out += (out.empty() ? "" : ", ") + x; };
  if (s.unit != ParallelUnit::None) add(to_string(s.unit) + (s.group ? " of " + std::to_string(s.group) : std::string()));
  if (s.rows_per_block) add(std::to_string(s.rows_per_block) + " rows per block");
  if (s.feature_tile)
    add("feature tile " + std::to_string(s.feature_tile) + ", vector width " + (s.vector_width ? std::to_string(s.vector_width) : "at launch"));
  if (s.stage_shared) add("staged in shared memory");
  if (!s.balance_by.empty()) add("balanced by " + s.balance_by);
  if (s.reduction != ReductionStrategy::Serial) {
    std::string r = std::string(to_string(s.reduction)) + " reduction";
    for (auto& t : s.reduced) r += " " + t;
    add(r);
  }
  if (s.register_tile) add("register tile");
  if (!s.prefetch_rows.empty() || !s.prefetch_edges.empty()) {
    std::string f = "prefetch";
    for (auto& a : s.prefetch_rows) f += " " + access_str(a);
    for (auto& e : s.prefetch_edges) f += " " + e + "[e]";
    add(f);
  }
  return out.empty() ? "" : "  [" + out + "]";
}

std::string matmul_str(const MatmulBlock& m) {
  // A row operand of the block: a temporary holding the row, or a dense input's row.
  auto row = [](const MatmulBlock::RowOperand& r) { return r.tensor + "(" + (r.temp ? "" : "row,") + r.var + ")"; };
  const std::string d = m.dense + (m.transpose ? "(" + m.c + "," + m.x + ")" : "(" + m.x + "," + m.c + ")");
  switch (m.form) {
    case MatmulBlock::Form::Product:
      return "matmul product " + m.target + "(" + (m.matrix_target ? "row," : "") + m.c + ") " + (m.overwrite ? "=" : "+=") + " sum over " +
             m.x + " of " + row(m.r) + " * " + d;
    case MatmulBlock::Form::Dot: return "matmul dot " + m.target + "(row," + m.c + ") = sum over " + m.x + " of " + row(m.r) + " * " + d;
    case MatmulBlock::Form::Outer: return "matmul outer " + m.target + " += sum over rows of " + row(m.r) + " * " + row(m.r2);
  }
  return "";
}

void print_stmt(const Stmt& s, int depth, std::ostringstream& os) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  auto body = [&] {
    for (auto& k : s.body) print_stmt(*k, depth + 1, os);
  };
  switch (s.kind) {
    case Stmt::Kind::Block:
      for (auto& k : s.body) print_stmt(*k, depth, os);
      return;
    case Stmt::Kind::Parallel:
      os << pad << "parallel for " << s.var << " < n_" << s.var << schedule_str(s.sched) << (s.blocked ? "  [row blocks]" : "") << "\n";
      body();
      return;
    case Stmt::Kind::For:
      os << pad << "for " << s.var << " < n_" << s.var << schedule_str(s.sched) << "\n";
      body();
      return;
    case Stmt::Kind::Walk:
      os << pad << "walk " << s.var << " in " << s.level << (s.csc ? " by columns" : "") << schedule_str(s.sched) << "\n";
      body();
      return;
    case Stmt::Kind::RowBounds: os << pad << "row " << s.level << "(" << s.var << ")" << (s.csc ? " by columns" : "") << "\n"; return;
    case Stmt::Kind::Locate:
      os << pad << "locate " << s.var << " in " << s.level << (s.by_map ? " by row map" : " by search") << ", else next\n";
      return;
    case Stmt::Kind::Alloc: {
      os << pad << "alloc " << s.tensor;
      if (!s.dims.empty()) {
        os << "(";
        for (size_t d = 0; d < s.dims.size(); ++d) os << (d ? "," : "") << s.dims[d];
        os << ")";
      }
      if (!s.compressed_by.empty()) os << " by " << s.compressed_by << (s.global ? " positions" : " row positions");
      os << " = " << identity(s.init) << "\n";
      return;
    }
    case Stmt::Kind::Fill: os << pad << "fill " << s.tensor << " = " << identity(s.init) << "\n"; return;
    case Stmt::Kind::Assign: os << pad << access_str(s.lhs) << " = " << value_str(*s.rhs) << "\n"; return;
    case Stmt::Kind::Accumulate:
      os << pad << access_str(s.lhs) << (s.reduce == Reduce::Sum ? " += " : " " + to_string(s.reduce) + "= ") << value_str(*s.rhs)
         << (s.arg_out.empty() ? "" : "  [position to " + s.arg_out + "]") << "\n";
      return;
    case Stmt::Kind::Matmul: os << pad << matmul_str(*s.matmul) << "\n"; return;
  }
}

}  // namespace

Kernel lower(const Compiled& c) { return Lowering(c).run(); }

Kernel lower(const Compiled& c, const Node& tree) {
  Compiled v;
  v.spec = c.spec;
  v.target = c.target;
  v.program = c.program;
  v.program.spec = &v.spec;
  v.tree = tree.clone();
  return Lowering(v).run();
}

std::string print(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << "\n";
  for (auto& s : k.body->body) print_stmt(*s, 1, os);
  return os.str();
}

}  // namespace gnnfuse::codegen::imp
