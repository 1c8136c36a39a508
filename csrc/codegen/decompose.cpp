// Stage 2: index notation -> unit statements (three-address form) with temporaries.
#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "codegen/builtins.h"

namespace gnnfuse::codegen {

namespace {

using Vars = std::vector<std::string>;

bool has(const Vars& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

Vars unite(const Vars& a, const Vars& b) {
  Vars out = a;
  for (auto& x : b)
    if (!has(out, x)) out.push_back(x);
  return out;
}

// A value of the decomposition: an operand (tensor access or constant) with its variables.
struct Value {
  Operand operand;
  Vars vars;
};

// An operation not yet given a destination: the root assigns it to the output, inner nodes to
// a fresh temporary.
struct Pending {
  Stmt::Op op = Stmt::Op::Copy;
  std::string fn;
  double param = 0;
  bool has_param = false;
  std::string param_arg;
  Reduce reduce = Reduce::Sum;  // how materializing it reduces the variables not needed
  std::vector<Value> args;
  Vars vars;  // union of the arguments' variables
};

class Decomposer {
 public:
  Decomposer(Program& p, const std::vector<int>& choices, std::vector<int>* ties) : p_(p), choices_(choices), ties_(ties) {}

  void run() {
    const OpSpec& s = *p_.spec;
    Vars lhs = s.expr.lhs_idx;
    Pending root = lower(s.expr.rhs, lhs);
    Vars summed;
    for (auto& v : root.vars)
      if (!has(lhs, v)) summed.push_back(v);
    Access out{s.expr.lhs, lhs};
    if (summed.empty()) {
      if (s.selects()) fail(s.loc, "reduce " + to_string(s.reduce) + ": the expression reduces no index");
      add_stmt(out, root, false);
      return;
    }
    // A reduction into the output goes through an accumulator in the accumulation type; the
    // memory passes shrink it to a row buffer, and the final copy rounds once. A max or min
    // also records the chosen position in the op's second output.
    std::string acc = fresh(s.expr.lhs + "acc");
    new_temp(acc, lhs);
    root.reduce = s.reduce;
    p_.tensors[acc].init = s.reduce;
    add_stmt(Access{acc, lhs}, root, true);
    if (s.selects()) p_.stmts.back().arg_out = s.expr.lhs + "_arg";
    Pending copy;
    copy.op = Stmt::Op::Copy;
    copy.args = {Value{Operand{false, 0, Access{acc, lhs}}, lhs}};
    copy.vars = lhs;
    add_stmt(out, copy, false);
  }

 private:
  Program& p_;
  const std::vector<int>& choices_;  // per pairing step: which of the tied pairs (see decompose)
  std::vector<int>* ties_;           // per pairing step: how many pairs tied
  size_t step_ = 0;
  int next_temp_ = 0;
  std::map<std::string, Value> memo_;  // common sub-expressions: key_of -> temporary

  std::string fresh(const std::string& want) {
    std::string name = want;
    while (p_.tensors.count(name)) name = want + std::to_string(next_temp_++);
    return name;
  }
  std::string fresh_temp() {
    std::string name;
    do name = "T" + std::to_string(next_temp_++);
    while (p_.tensors.count(name));
    return name;
  }
  Vars in_loop_order(const Vars& v) const {
    Vars out;
    for (auto& x : p_.order)
      if (has(v, x)) out.push_back(x);
    return out;
  }
  void new_temp(const std::string& name, const Vars& dims) {
    TensorInfo t;
    t.name = name;
    t.role = Role::Temp;
    t.dims = dims;
    t.kept_dims = dims;
    p_.tensors[name] = t;
    p_.temps.push_back(name);
  }
  void add_stmt(const Access& lhs, const Pending& pd, bool accumulate) {
    Stmt st;
    st.id = static_cast<int>(p_.stmts.size());
    st.lhs = lhs;
    st.op = pd.op;
    st.fn = pd.fn;
    st.param = pd.param;
    st.has_param = pd.has_param;
    st.param_arg = pd.param_arg;
    for (auto& a : pd.args) st.rhs.push_back(a.operand);
    st.accumulate = accumulate;
    st.reduce = accumulate ? pd.reduce : Reduce::Sum;
    for (auto& v : pd.vars)
      if (!has(lhs.idx, v)) st.sum_vars.push_back(v);
    st.sum_vars = in_loop_order(st.sum_vars);
    st.vars = in_loop_order(unite(lhs.idx, pd.vars));
    p_.stmts.push_back(st);
  }

  // Gives a pending operation a temporary holding the variables in `needed`; the others are
  // summed over.
  Value materialize(const Pending& pd, const Vars& needed) {
    Vars kept;
    for (auto& v : pd.vars)
      if (has(needed, v)) kept.push_back(v);
    kept = in_loop_order(kept);
    std::string t = fresh_temp();
    new_temp(t, kept);
    p_.tensors[t].init = pd.reduce;
    add_stmt(Access{t, kept}, pd, kept.size() != pd.vars.size());
    return Value{Operand{false, 0, Access{t, kept}}, kept};
  }

  // The text of `e` with the variables it sums privately (free but not needed, and those bound
  // by max/min) renamed canonically: two sub-expressions with the same key compute the same
  // temporary (the row sums and maxima an adjoint repeats in its kept copies).
  static std::string key_of(const ExprP& e, const Vars& needed) {
    std::map<std::string, std::string> ren;
    int next = 0;
    std::function<ExprP(const ExprP&)> canon = [&](const ExprP& x) -> ExprP {
      Expr c = *x;
      for (auto& v : c.idx)
        if (!has(needed, v)) {
          if (!ren.count(v)) ren[v] = "_" + std::to_string(next++);
          v = ren[v];
        }
      for (auto& a : c.args) a = canon(a);
      return std::make_shared<const Expr>(std::move(c));
    };
    std::string key = to_string(canon(e)) + " |";
    for (auto& v : vars_of(e))
      if (has(needed, v)) key += " " + v;
    return key;
  }

  // A value whose variables are all needed; reduces the others away in a temporary.
  Value value(const ExprP& e, const Vars& needed) {
    if (e->kind != Expr::Kind::Const && e->kind != Expr::Kind::Access) {
      std::string key = key_of(e, needed);
      auto hit = memo_.find(key);
      if (hit != memo_.end()) return hit->second;
      Value v = materialize(lower(e, needed), needed);
      memo_[key] = v;
      return v;
    }
    return value_uncached(e, needed);
  }

  Value value_uncached(const ExprP& e, const Vars& needed) {
    if (e->kind == Expr::Kind::Const) return Value{Operand{true, e->value, {}}, {}};
    if (e->kind == Expr::Kind::Access) {
      Value v{Operand{false, 0, Access{e->name, e->idx}}, e->idx};
      bool all = std::all_of(e->idx.begin(), e->idx.end(), [&](const std::string& x) { return has(needed, x); });
      if (all) return v;
      Pending copy;
      copy.args = {v};
      copy.vars = v.vars;
      return materialize(copy, needed);
    }
    return materialize(lower(e, needed), needed);
  }

  // The factors of a product chain. A parenthesized sub-product that sums a variable of its
  // own (one no other factor and no consumer uses) stays one factor, so that it is lowered as a
  // value of its own and shared when it repeats (the row sums of an adjoint's kept copies).
  // A product whose leaves are all sparse, edge or select operands (a chain of walks).
  bool sparse_product(const ExprP& e) const {
    if (e->kind == Expr::Kind::Access) {
      Role r = p_.tensor(e->name).role;
      return r == Role::SparseInput || r == Role::EdgeInput || r == Role::SelectInput;
    }
    return e->kind == Expr::Kind::Binary && e->op == '*' && sparse_product(e->args[0]) && sparse_product(e->args[1]);
  }

  void flatten_product(const ExprP& e, const Vars& outside, std::vector<ExprP>* out) const {
    if (e->kind != Expr::Kind::Binary || e->op != '*') {
      out->push_back(e);
      return;
    }
    for (int k = 0; k < 2; ++k) {
      const ExprP& a = e->args[static_cast<size_t>(k)];
      Vars around = unite(outside, vars_of(e->args[static_cast<size_t>(1 - k)]));
      bool own_sum = false;
      if (a->grouped && a->kind == Expr::Kind::Binary && a->op == '*' && !sparse_product(e))
        for (auto& v : vars_of(a))
          if (!has(around, v)) own_sum = true;
      if (own_sum) out->push_back(a);
      else flatten_product(a, around, out);
    }
  }

  bool is_sparse(const Value& v) const {
    if (v.operand.is_const) return false;
    Role r = p_.tensor(v.operand.access.tensor).role;
    return r == Role::SparseInput || r == Role::EdgeInput || r == Role::SelectInput;
  }

  // Whether multiplying a and b and summing the variables not in `kept` aggregates a csr
  // operand along its rows (sums its column, keeps its row): a gather walk, preferred on ties
  // over a scatter (A^T dY) that would need the whole [columns x F] result at once.
  bool gathers(const Value& a, const Value& b, const Vars& kept) const {
    for (const Value* v : {&a, &b}) {
      if (v->operand.is_const || p_.tensor(v->operand.access.tensor).role != Role::SparseInput) continue;
      const auto& idx = v->operand.access.idx;
      if (idx.size() == 2 && has(kept, idx[0]) && !has(kept, idx[1])) return true;
    }
    return false;
  }

  Pending lower(const ExprP& e, const Vars& needed) {
    Pending pd;
    switch (e->kind) {
      case Expr::Kind::Access:
      case Expr::Kind::Const: {
        Value v = e->kind == Expr::Kind::Const ? Value{Operand{true, e->value, {}}, {}}
                                               : Value{Operand{false, 0, Access{e->name, e->idx}}, e->idx};
        pd.op = Stmt::Op::Copy;
        pd.args = {v};
        pd.vars = v.vars;
        return pd;
      }
      case Expr::Kind::Reduce: {
        // max[j](e): e's value over the needed variables and j, then reduced over j alone.
        Vars inner = needed;
        inner.push_back(e->idx[0]);
        Value body = value(e->args[0], inner);
        pd.op = Stmt::Op::Copy;
        pd.reduce = *parse_reduce(e->name);  // max or min (the parser reads no other)
        pd.args = {body};
        pd.vars = body.vars;
        Value m = materialize(pd, needed);
        Pending out;
        out.op = Stmt::Op::Copy;
        out.args = {m};
        out.vars = m.vars;
        return out;
      }
      case Expr::Kind::Call:
        // detach(e) is e (it only stops differentiation).
        if (find_function(e->name)->detach) return lower(e->args[0], needed);
        [[fallthrough]];
      case Expr::Kind::Neg: {
        pd.op = e->kind == Expr::Kind::Neg ? Stmt::Op::Neg : Stmt::Op::Call;
        pd.fn = e->name;
        pd.param = e->value;
        pd.has_param = e->has_param;
        pd.param_arg = e->param_arg;
        pd.args = {value(e->args[0], needed)};
        pd.vars = pd.args[0].vars;
        return pd;
      }
      case Expr::Kind::Binary:
        break;
    }
    if (e->op == '+' || e->op == '-') {
      // Each term sums its own private variables.
      pd.op = e->op == '+' ? Stmt::Op::Add : Stmt::Op::Sub;
      pd.args = {value(e->args[0], needed), value(e->args[1], needed)};
      pd.vars = unite(pd.args[0].vars, pd.args[1].vars);
      return pd;
    }
    if (e->op == '/') {
      Vars va = vars_of(e->args[0]), vb = vars_of(e->args[1]);
      pd.op = Stmt::Op::Div;
      pd.args = {value(e->args[0], unite(needed, vb)), value(e->args[1], unite(needed, va))};
      pd.vars = unite(pd.args[0].vars, pd.args[1].vars);
      return pd;
    }
    // A product chain: lower the factors, then pair them greedily, smallest temporary first.
    std::vector<ExprP> fs;
    flatten_product(e, needed, &fs);
    std::vector<Value> vals;
    for (size_t k = 0; k < fs.size(); ++k) {
      Vars others = needed;
      for (size_t m = 0; m < fs.size(); ++m)
        if (m != k) others = unite(others, vars_of(fs[m]));
      vals.push_back(value(fs[k], others));
    }
    // A chain of sparse operands only (P^T A P: walks nested in walks) is multiplied out in the
    // innermost loop, over every variable of the chain, and reduced once, into the output's
    // workspace: summing a pair early would need a temporary over a walked coordinate (a dense
    // row of P^T A, say), which only a sparse workspace could hold, and a pair kept over fewer
    // variables would be computed in a nest of its own.
    bool chain = vals.size() > 2 && std::all_of(vals.begin(), vals.end(), [&](const Value& v) { return is_sparse(v); });
    while (vals.size() > 2) {
      size_t best_a = 0, best_b = 1, best_size = SIZE_MAX;
      bool best_sparse = false, best_gather = false;
      std::vector<std::pair<size_t, size_t>> pairs;  // every pair, and the temporary it keeps
      std::vector<size_t> sizes;
      for (size_t a = 0; a < vals.size(); ++a)
        for (size_t b = a + 1; b < vals.size(); ++b) {
          Vars others = needed;
          for (size_t m = 0; m < vals.size(); ++m)
            if (m != a && m != b) others = unite(others, vals[m].vars);
          size_t kept = 0;
          Vars kept_vars;
          for (auto& v : unite(vals[a].vars, vals[b].vars))
            if (has(others, v)) {
              ++kept;
              kept_vars.push_back(v);
            }
          pairs.push_back({a, b});
          sizes.push_back(kept);
          bool sparse = is_sparse(vals[a]) || is_sparse(vals[b]);
          bool gather = gathers(vals[a], vals[b], kept_vars);
          if (kept < best_size || (kept == best_size && sparse && !best_sparse) ||
              (kept == best_size && sparse == best_sparse && gather && !best_gather)) {
            best_a = a;
            best_b = b;
            best_size = kept;
            best_sparse = sparse;
            best_gather = gather;
          }
        }
      // The pairs that tie on the smallest temporary: the rule's choice first, then the others.
      std::vector<std::pair<size_t, size_t>> tied{{best_a, best_b}};
      if (!chain)
        for (size_t k = 0; k < pairs.size(); ++k)
          if (sizes[k] == best_size && pairs[k] != tied[0]) tied.push_back(pairs[k]);
      if (ties_) ties_->push_back(static_cast<int>(tied.size()));
      const size_t pick = step_ < choices_.size() ? static_cast<size_t>(choices_[step_]) : 0;
      ++step_;
      if (pick >= tied.size()) throw SpecError("internal error: decomposition choice out of range");
      best_a = tied[pick].first;
      best_b = tied[pick].second;
      Vars others = needed;
      for (size_t m = 0; m < vals.size(); ++m)
        if (m != best_a && m != best_b) others = unite(others, vals[m].vars);
      if (chain)
        for (auto& v : vals) others = unite(others, v.vars);  // every variable of the chain
      Pending pair;
      pair.op = Stmt::Op::Mul;
      pair.args = {vals[best_a], vals[best_b]};
      pair.vars = unite(vals[best_a].vars, vals[best_b].vars);
      if (chain) pair.vars = unite(pair.vars, others);
      vals[best_a] = materialize(pair, others);
      vals.erase(vals.begin() + static_cast<long>(best_b));
    }
    if (vals.size() == 1) {
      pd.op = Stmt::Op::Copy;
      pd.args = vals;
      pd.vars = vals[0].vars;
      return pd;
    }
    pd.op = Stmt::Op::Mul;
    pd.args = vals;
    pd.vars = unite(vals[0].vars, vals[1].vars);
    return pd;
  }
};

}  // namespace

Program decompose(const OpSpec& spec, const std::vector<int>& choices, std::vector<int>* ties) {
  Program p;
  p.spec = &spec;
  p.order = spec.order;
  for (auto& t : spec.tensors) {
    TensorInfo ti;
    ti.name = t.name;
    ti.role = t.role;
    ti.dims = t.vars;
    ti.kept_dims = t.vars;
    ti.pattern = t.role == Role::SparseInput ? t.name : t.role == Role::CountInput ? "" : t.pattern;
    if (t.role == Role::SparseInput) {
      // Walked by columns when the order puts its column variable first (the frontend checks
      // that the CSC view is declared then).
      auto at = [&](const std::string& v) { return std::find(spec.order.begin(), spec.order.end(), v) - spec.order.begin(); };
      ti.outer = at(t.vars[1]) < at(t.vars[0]) ? 1 : 0;
    }
    p.tensors[t.name] = ti;
  }
  Decomposer(p, choices, ties).run();
  return p;
}

std::string print_program(const Program& p) {
  std::ostringstream os;
  for (auto& s : p.stmts) {
    os << "S" << s.id << ": " << to_string(s);
    if (!s.sum_vars.empty()) {
      os << "   (" << to_string(s.reduce) << " over";
      for (auto& v : s.sum_vars) os << " " << v;
      os << ")";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace gnnfuse::codegen
