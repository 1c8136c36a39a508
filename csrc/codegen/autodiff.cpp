// Automatic differentiation of index notation. The adjoint of an op with respect to one of its
// floating inputs is written as a new spec (in the spec language, so it is printed, parsed and
// checked like a user's) and then goes through the same pipeline as the forward: decomposition,
// iteration spaces, trie fusion, temporary shrinking, schedule, emission.
//
// For Y(o) = e and an input T(t):  dT(t) = sum over every other variable of  dY(o) * de/dT(t),
// masked to T's pattern when T is sparse (the adjoint's output is then "on" that pattern).
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <sstream>

#include "codegen/builtins.h"

namespace gnnfuse::codegen {
namespace {

using Vars = std::vector<std::string>;

bool has(const Vars& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

Vars unite(Vars a, const Vars& b) {
  for (auto& x : b)
    if (!has(a, x)) a.push_back(x);
  return a;
}

std::string join(const Vars& v, const std::string& sep = ",") {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) out += (k ? sep : "") + v[k];
  return out;
}

void flatten_product(const ExprP& e, std::vector<ExprP>* out) {
  if (e->kind == Expr::Kind::Binary && e->op == '*') {
    flatten_product(e->args[0], out);
    flatten_product(e->args[1], out);
  } else {
    out->push_back(e);
  }
}

// One product of the derivative: coefficient times factors (kept copies of forward
// sub-expressions, derivative-table factors, and what differentiation left of the rest).
struct Term {
  double coeff = 1;
  std::vector<ExprP> factors;
};
using Terms = std::vector<Term>;

class Differentiator {
 public:
  Differentiator(const OpSpec& s, const std::string& target) : s_(s), target_(target) {
    for (auto& v : s.order) taken_.insert(v);
  }

  // d e / d target(declared indices), where `needed` are the variables e's value must keep (as
  // in the decomposition: the others are summed inside e).
  Terms d(const ExprP& e, const Vars& needed) {
    switch (e->kind) {
      case Expr::Kind::Const: return {};
      case Expr::Kind::Access: {
        // Only reads with the declared indices are the target in one pass; differentiate()
        // renames the expression once per other way the input is read (see there).
        if (e->name != target_ || e->idx != s_.find(target_)->vars) return {};
        return {Term{1, {}}};
      }
      case Expr::Kind::Neg: return scaled(d(e->args[0], needed), -1);
      case Expr::Kind::Reduce: {
        std::set<std::string> inside;
        collect(e->args[0], &inside);
        if (inside.count(target_))
          fail(e->loc, "cannot differentiate " + to_string(e) + " with respect to " + target_ +
                           ": wrap it in detach(...) where the expression does not depend on it (the shift of a softmax), or use 'reduce " +
                           e->name + "'");
        return {};
      }
      case Expr::Kind::Call: {
        if (find_function(e->name)->detach) return {};  // stops differentiation: its derivative is zero
        const ExprP& g = e->args[0];
        Terms dg = d(g, needed);
        if (dg.empty()) return {};
        Term fp = derivative_of(*e, g, needed);
        Terms out;
        for (auto& t : dg) {
          if (fp.coeff == 0) break;
          Term r{t.coeff * fp.coeff, fp.factors};
          r.factors.insert(r.factors.end(), t.factors.begin(), t.factors.end());
          out.push_back(r);
        }
        return out;
      }
      case Expr::Kind::Binary: break;
    }
    const ExprP& a = e->args[0];
    const ExprP& b = e->args[1];
    if (e->op == '+' || e->op == '-') {
      Terms out = d(a, needed);
      Terms db = scaled(d(b, needed), e->op == '-' ? -1 : 1);
      out.insert(out.end(), db.begin(), db.end());
      return out;
    }
    if (e->op == '/') {
      Vars na = unite(needed, vars_of(b)), nb = unite(needed, vars_of(a));
      Terms out;
      // d(a/b) = da / b - a * db / (b * b)
      for (auto& t : d(a, na)) {
        Term r = t;
        r.factors.push_back(binary('/', constant(1), copy(b, nb)));
        out.push_back(r);
      }
      for (auto& t : d(b, nb)) {
        Term r{-t.coeff, {a}};
        r.factors.insert(r.factors.end(), t.factors.begin(), t.factors.end());
        ExprP b1 = copy(b, nb);
        ExprP b2 = copy(b, nb);
        r.factors.push_back(binary('/', constant(1), binary('*', b1, b2)));
        out.push_back(r);
      }
      return out;
    }
    // Product rule over the flattened chain; the other factors are kept as they are (their
    // bound variables are private to them).
    std::vector<ExprP> fs;
    flatten_product(e, &fs);
    Terms out;
    for (size_t k = 0; k < fs.size(); ++k) {
      Vars others = needed;
      for (size_t m = 0; m < fs.size(); ++m)
        if (m != k) others = unite(others, vars_of(fs[m]));
      for (auto& t : d(fs[k], others)) {
        Term r{t.coeff, {}};
        for (size_t m = 0; m < fs.size(); ++m)
          if (m != k) r.factors.push_back(fs[m]);
        r.factors.insert(r.factors.end(), t.factors.begin(), t.factors.end());
        out.push_back(r);
      }
    }
    return out;
  }

  const std::map<std::string, std::string>& renamed_from() const { return origin_; }

  // A variable name not used yet, recorded as a copy of `v`.
  std::string fresh(const std::string& v) {
    std::string f;
    for (int n = 2;; ++n) {
      f = v + std::to_string(n);
      if (!taken_.count(f)) break;
    }
    taken_.insert(f);
    origin_[f] = v;
    return f;
  }
  void take(const Vars& vs) { taken_.insert(vs.begin(), vs.end()); }

 private:
  const OpSpec& s_;
  std::string target_;
  std::set<std::string> taken_;
  std::map<std::string, std::string> origin_;  // fresh variable -> the variable it copies

  static void collect(const ExprP& e, std::set<std::string>* out) {
    if (e->kind == Expr::Kind::Access) out->insert(e->name);
    for (auto& a : e->args) collect(a, out);
  }

  static Terms scaled(Terms t, double c) {
    for (auto& x : t) x.coeff *= c;
    return t;
  }

  // A copy of g kept in the derivative: the variables g sums privately are renamed, because the
  // differentiated factor next to it may have freed the original names (d/dU(i,k) of
  // exp(U(i,k) * V(j,k)) is exp(U(i,k2) * V(j,k2)) * V(j,k)), and two copies must not share them.
  ExprP copy(const ExprP& g, const Vars& needed) {
    std::map<std::string, std::string> ren;
    for (auto& v : vars_of(g))
      if (!has(needed, v)) ren[v] = fresh(v);
    if (ren.empty()) return g;
    std::function<ExprP(const ExprP&)> rec = [&](const ExprP& e) -> ExprP {
      Expr c = *e;
      if (c.kind == Expr::Kind::Access) {
        // A renamed column of a sparse, edge or select operand is another walk over the row
        // (lowered when the copy's sum is hoisted out of the other walk); a renamed row is not.
        bool renamed = false;
        for (size_t k = 0; k < c.idx.size(); ++k)
          if (ren.count(c.idx[k])) {
            c.idx[k] = ren[c.idx[k]];
            if (k != 1) renamed = true;
          }
        const TensorDecl* t = s_.find(c.name);
        if (renamed && t && t->role != Role::DenseInput)
          fail(e->loc, "the derivative needs a second, independent walk over " + (t->role == Role::SparseInput ? t->name : t->pattern) +
                           " inside " + to_string(g) + ", which the generator does not lower");
      }
      for (auto& a : c.args) a = rec(a);
      return make_expr(std::move(c));
    };
    return rec(g);
  }

  // f'(g) as factors (the derivative column of the function table).
  Term derivative_of(const Expr& f, const ExprP& g, const Vars& needed) {
    const Function* fn = find_function(f.name);
    if (fn && fn->derivative) {
      Derivative d = fn->derivative(f, [&] { return copy(g, needed); });
      return {d.coeff, std::move(d.factors)};
    }
    fail(f.loc, "no derivative known for function " + f.name);
  }
};

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string factor_text(const ExprP& f) {
  std::string t = to_string(f);
  return f->kind == Expr::Kind::Binary ? "(" + t + ")" : t;
}

std::string fresh_name(const OpSpec& s, const std::string& want, const std::set<std::string>& also = {}) {
  auto taken = [&](const std::string& n) {
    if (also.count(n) || s.find(n) || s.schema.arg(n)) return true;
    return false;
  };
  if (!taken(want)) return want;
  for (int k = 2;; ++k)
    if (!taken(want + std::to_string(k))) return want + std::to_string(k);
}

void collect_accesses(const ExprP& e, std::set<std::string>* out) {
  if (e->kind == Expr::Kind::Access) out->insert(e->name);
  for (auto& a : e->args) collect_accesses(a, out);
}

// e with its variables renamed by `ren` (simultaneously).
ExprP rename_vars(const ExprP& e, const std::map<std::string, std::string>& ren) {
  Expr c = *e;
  for (auto& v : c.idx) {
    auto it = ren.find(v);
    if (it != ren.end()) v = it->second;
  }
  for (auto& a : c.args) a = rename_vars(a, ren);
  return make_expr(std::move(c));
}

// Occurrences of each variable in the accesses and max/min bindings of e.
void count_vars(const ExprP& e, std::map<std::string, int>* n) {
  if (e->kind == Expr::Kind::Access)
    for (auto& v : e->idx) ++(*n)[v];
  if (e->kind == Expr::Kind::Reduce) ++(*n)[e->idx[0]];
  for (auto& a : e->args) count_vars(a, n);
}

// Replaces the row statistics of an adjoint that walks the csr operand A by columns: maximal
// sub-expressions (or, in a product, the group of factors free of the walked column) that walk a
// row of A under another column name, keep none of those names and do not depend on the walked
// column. `sink(stat, free, cols)` returns the access that stands for the statistic `stat`
// (free: its indices, A's row first; cols: the private column names it walks).
using StatSink = std::function<ExprP(const ExprP&, const Vars&, const Vars&)>;

class RowStatHoister {
 public:
  RowStatHoister(const OpSpec& s, const TensorDecl& A, const std::string& gy, const std::string& y_pattern, const Vars& lhs,
                 const StatSink& sink)
      : s_(s), A_(A), gy_(gy), y_pattern_(y_pattern), lhs_(lhs), sink_(sink), walk_(A.vars[1]) {}

  ExprP run(const ExprP& e) {
    if (e->kind == Expr::Kind::Binary && (e->op == '+' || e->op == '-')) {
      Expr c = *e;
      c.args = {run(e->args[0]), run(e->args[1])};
      return make_expr(std::move(c));
    }
    if (e->kind == Expr::Kind::Neg) {
      Expr c = *e;
      c.args = {run(e->args[0])};
      return make_expr(std::move(c));
    }
    return term(e);
  }

 private:
  const OpSpec& s_;
  const TensorDecl& A_;
  std::string gy_, y_pattern_;
  Vars lhs_;
  const StatSink& sink_;
  std::string walk_;
  std::map<std::string, int> term_count_;

  bool on_A(const std::string& name) const {
    if (name == gy_) return y_pattern_ == A_.name;
    const TensorDecl* t = s_.find(name);
    if (!t) return false;
    if (t->role == Role::SparseInput) return t->name == A_.name;
    return (t->role == Role::EdgeInput || t->role == Role::SelectInput) && t->pattern == A_.name;
  }
  void nested_cols(const ExprP& e, Vars* out) const {
    if (e->kind == Expr::Kind::Access && on_A(e->name) && e->idx[1] != walk_ && !has(*out, e->idx[1])) out->push_back(e->idx[1]);
    for (auto& a : e->args) nested_cols(a, out);
  }
  Vars free_of(const std::vector<ExprP>& parts) const {
    std::map<std::string, int> inside;
    Vars all;
    for (auto& p : parts) {
      count_vars(p, &inside);
      all = unite(all, vars_of(p));  // variables bound by max/min inside are private
    }
    Vars out;
    for (auto& v : all)
      if (has(lhs_, v) || term_count_.at(v) > inside[v]) out.push_back(v);
    return out;
  }
  // Whether the product of `parts` is a statistic; its indices (A's row first) and walked columns.
  bool stat(const std::vector<ExprP>& parts, Vars* free, Vars* cols) const {
    cols->clear();
    for (auto& p : parts) {
      if (has(all_vars_of(p), walk_)) return false;
      nested_cols(p, cols);
    }
    if (cols->empty()) return false;
    Vars f = free_of(parts);
    for (auto& c : *cols)
      if (has(f, c)) return false;
    if (!has(f, A_.vars[0])) return false;
    free->assign(1, A_.vars[0]);
    for (auto& v : f)
      if (v != A_.vars[0]) free->push_back(v);
    return true;
  }
  static ExprP product(const std::vector<ExprP>& parts) {
    ExprP out = parts[0];
    for (size_t k = 1; k < parts.size(); ++k) out = binary('*', out, parts[k]);
    return out;
  }
  static void factors(const ExprP& e, std::vector<ExprP>* out) {
    if (e->kind == Expr::Kind::Binary && e->op == '*' && !e->grouped) {
      factors(e->args[0], out);
      factors(e->args[1], out);
    } else {
      out->push_back(e);
    }
  }
  ExprP sub(const ExprP& e) {
    Vars free, cols;
    if (e->kind != Expr::Kind::Const && stat({e}, &free, &cols)) return sink_(e, free, cols);
    if (e->args.empty()) return e;
    Expr c = *e;
    for (auto& a : c.args) a = sub(a);
    return make_expr(std::move(c));
  }
  ExprP term(const ExprP& e) {
    term_count_.clear();
    count_vars(e, &term_count_);
    std::vector<ExprP> fs, group, plain, rest;
    factors(e, &fs);
    size_t nested_widest = 0;
    bool any_nested = false;
    Vars group_vars;
    for (auto& f : fs) {
      if (has(all_vars_of(f), walk_)) {
        rest.push_back(f);
        continue;
      }
      Vars fc, ff;
      nested_cols(f, &fc);
      if (fc.empty()) {
        plain.push_back(f);
        continue;
      }
      group.push_back(f);
      group_vars = unite(group_vars, vars_of(f));
      any_nested = true;
      nested_widest = std::max(nested_widest, stat({f}, &ff, &fc) ? ff.size() : SIZE_MAX);
    }
    // Factors free of the walked column join the group when they share an index it sums (dY
    // with the features the statistic reduces); the others stay outside (N x H, not N x H x D).
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t k = 0; k < plain.size(); ++k) {
        bool shares = false;
        for (auto& v : vars_of(plain[k]))
          shares = shares || (v != A_.vars[0] && !has(lhs_, v) && has(group_vars, v));
        if (!shares) continue;
        group.push_back(plain[k]);
        group_vars = unite(group_vars, vars_of(plain[k]));
        plain.erase(plain.begin() + static_cast<std::ptrdiff_t>(k));
        grew = true;
        break;
      }
    }
    rest.insert(rest.begin(), plain.begin(), plain.end());
    if (!any_nested) {
      bool inside = false;  // a statistic inside a factor that depends on the walked column?
      for (auto& f : rest) {
        Vars c;
        nested_cols(f, &c);
        inside = inside || !c.empty();
      }
      if (!inside) return e;
    }
    Vars free, cols;
    std::vector<ExprP> out;
    // The whole group as one statistic when it is no wider than hoisting its parts one by one
    // (the sum over the features of dY * Y in a softmax adjoint: N x H instead of N x H x F).
    if (any_nested && stat(group, &free, &cols) && free.size() <= nested_widest) {
      out.push_back(sink_(product(group), free, cols));
    } else {
      for (auto& f : group) out.push_back(sub(f));
    }
    for (auto& f : rest) out.push_back(sub(f));
    return product(out);
  }
};

ExprP hoist_row_stats(const OpSpec& s, const TensorDecl& A, const std::string& gy, const std::string& y_pattern, const Vars& lhs,
                      const ExprP& rhs, const StatSink& sink) {
  return RowStatHoister(s, A, gy, y_pattern, lhs, sink).run(rhs);
}

}  // namespace

std::vector<Adjoint> differentiate(const OpSpec& s) {
  std::vector<Adjoint> out;
  std::map<std::string, std::pair<std::string, std::string>> stat_ops;  // canonical text -> (op, spec text)
  // Whether some floating input is indexed first by A's column (its adjoint walks A by columns).
  auto column_adjoint = [&](const TensorDecl& A) {
    for (auto& t : s.tensors)
      if ((t.role == Role::DenseInput || t.role == Role::EdgeInput) && !t.vars.empty() && t.vars[0] == A.vars[1]) return true;
    return false;
  };
  const TensorDecl& Y = s.output();
  std::set<std::string> reserved;
  for (auto& t : s.tensors) reserved.insert(t.name);
  for (auto& a : s.schema.args) reserved.insert(a.name);
  for (auto& arg : s.schema.args) {
    // The floating inputs, in schema order.
    const TensorDecl* T = nullptr;
    for (auto& t : s.tensors) {
      if ((t.role == Role::DenseInput || t.role == Role::EdgeInput) && t.arg == arg.name) T = &t;
      if (t.role == Role::SparseInput && t.values == arg.name) T = &t;
    }
    if (!T) continue;
    Adjoint adj;
    adj.input = arg.name;
    adj.input_tensor = T->name;
    Differentiator D(s, T->name);
    // One pass per way T is read. T(i,j3) read beside the declared T(i,j) (a row sum in a
    // softmax, X(j,k) beside X(i,k)) is differentiated by renaming the whole expression so that
    // this read carries the declared indices (j3 -> j, and the old j -> a fresh name); d/dT(t)
    // then picks that read out, and the output's indices of the pass are renamed alike.
    std::vector<Vars> reads;
    std::function<void(const ExprP&)> find_reads = [&](const ExprP& e) {
      if (e->kind == Expr::Kind::Access && e->name == T->name &&
          std::find(reads.begin(), reads.end(), e->idx) == reads.end())
        reads.push_back(e->idx);
      for (auto& a : e->args) find_reads(a);
    };
    find_reads(s.expr.rhs);
    if (s.selects() && reads.size() > 1)
      fail(s.loc, "reduce " + to_string(s.reduce) + ": " + T->name + " is read in several ways, which the select routing does not rename");
    D.take(all_vars_of(s.expr.rhs));
    Terms terms;
    std::vector<Vars> term_lhs;  // the forward output's indices as each term names them
    for (auto& idx : reads) {
      std::map<std::string, std::string> ren;
      for (size_t k = 0; k < idx.size(); ++k)
        if (idx[k] != T->vars[k]) {
          ren[idx[k]] = T->vars[k];
          if (!ren.count(T->vars[k])) ren[T->vars[k]] = D.fresh(T->vars[k]);
        }
      auto rn = [&](const std::string& v) { return ren.count(v) ? ren[v] : v; };
      std::function<ExprP(const ExprP&)> rename = [&](const ExprP& e) -> ExprP {
        Expr c = *e;
        for (auto& v : c.idx) v = rn(v);
        for (auto& a : c.args) a = rename(a);
        return make_expr(std::move(c));
      };
      Vars lhs;
      for (auto& v : s.expr.lhs_idx) lhs.push_back(rn(v));
      Terms pass = D.d(ren.empty() ? s.expr.rhs : rename(s.expr.rhs), lhs);
      for (auto& t : pass)
        if (t.coeff != 0) {
          terms.push_back(t);
          term_lhs.push_back(lhs);
        }
    }
    if (terms.empty()) {
      adj.zero = true;
      out.push_back(adj);
      continue;
    }
    // Names of the adjoint op's new tensors and arguments.
    std::string gy = fresh_name(s, "G" + Y.name), dt = fresh_name(s, "D" + T->name, {gy});
    adj.grad_arg = fresh_name(s, "grad");
    // reduce max/min: d max_j e(o,j) / d e(o,j) is 1 at the chosen position, so every term
    // routes dY through a select of the forward's positions over the reduced csr operand.
    std::string sel_decl, sel_name;
    if (s.selects()) {
      const TensorDecl* A = s.reduced_operand();
      std::string m = fresh_name(s, "M" + Y.name, {gy, dt});
      sel_name = m;
      adj.select_arg = fresh_name(s, "selected");
      Vars mv = {A->vars[0], A->vars[1]};
      for (auto& v : Y.vars)
        if (v != A->vars[0]) mv.push_back(v);
      sel_decl = "select  " + m + "(" + join(mv) + ") on " + A->name + " = " + adj.select_arg + "\n";
      for (auto& t : terms) t.factors.insert(t.factors.begin(), parse_assignment("X() = " + m + "(" + join(mv) + ")", Loc{}).rhs);
    }
    // dT(t) = sum of coeff * dY(o) * factors
    std::string rhs;
    for (size_t k = 0; k < terms.size(); ++k) {
      const Term& t = terms[k];
      double c = t.coeff;
      std::string body = gy + "(" + join(term_lhs[k]) + ")";
      for (auto& f : t.factors) body += " * " + factor_text(f);
      if (k == 0) rhs += c < 0 ? "-" : "";
      else rhs += c < 0 ? " - " : " + ";
      if (std::fabs(c) != 1) body = fmt(std::fabs(c)) + " * " + body;
      rhs += body;
    }
    Vars tv = T->vars;
    std::string out_pattern = T->role == Role::SparseInput ? T->name : (T->role == Role::EdgeInput ? T->pattern : "");
    ExprP parsed = parse_assignment(dt + "(" + join(tv) + ") = " + rhs, Loc{"<adjoint>", 1, 1}).rhs;

    // The spec text of a derived op reading the forward's tensors, the incoming gradient, the
    // positions of a max/min and hoisted statistics (`extra`: declaration line, schema argument).
    // `order` empty: the adjoint's rule (below); else used as given.
    auto write = [&](const std::string& name, const std::string& doc, const std::string& out_name, const Vars& out_vars,
                     const std::string& out_pat, const ExprP& e, Vars order, int grad_order,
                     const std::vector<std::pair<std::string, std::string>>& extra, bool acc_out) {
      std::set<std::string> used;
      collect_accesses(e, &used);
      // The sparse operands it needs: read, carrying a read edge operand's or the incoming
      // gradient's pattern, or the output's pattern.
      std::set<std::string> structures;
      for (auto& t : s.tensors) {
        if (t.role == Role::SparseInput && used.count(t.name)) structures.insert(t.name);
        if ((t.role == Role::EdgeInput || t.role == Role::CountInput || t.role == Role::SelectInput) && used.count(t.name))
          structures.insert(t.pattern);
      }
      bool reads_sel = !sel_decl.empty() && used.count(sel_name);
      if (reads_sel) structures.insert(s.reduced_operand()->name);
      if (!Y.pattern.empty() && used.count(gy)) structures.insert(Y.pattern);
      if (!out_pat.empty()) structures.insert(out_pat);

      // Loop order: the output's first index outermost (its rows are the parallel loop, so no
      // two threads write one output row), then the sparse operand it belongs to, walked by
      // columns when that index is the operand's column; then the forward's order.
      Vars all = unite(all_vars_of(e), out_vars);
      auto push = [&](const std::string& v) {
        if (!has(order, v) && has(all, v)) order.push_back(v);
      };
      if (!order.empty()) {
        Vars given;
        given.swap(order);
        for (auto& v : given) push(v);
      } else {
        // An output indexed by neither side of any sparse operand it reads (a weight's gradient,
        // W(k,o)) is a sum over the graph: walk the graph by rows in the parallel loop, each
        // thread summing into a private copy (schedule_cpu), instead of walking it once per k.
        bool weight = !out_vars.empty();
        for (auto& t : s.tensors)
          if (t.role == Role::SparseInput && structures.count(t.name) && (has(out_vars, t.vars[0]) || has(out_vars, t.vars[1])))
            weight = false;
        for (auto& t : s.tensors)
          if (weight && t.role == Role::SparseInput && structures.count(t.name) && order.empty()) {
            push(t.vars[0]);
            push(t.vars[1]);
          }
        push(out_vars[0]);
        for (auto& t : s.tensors)
          if (t.role == Role::SparseInput && structures.count(t.name)) {
            if (t.vars[0] == out_vars[0]) push(t.vars[1]);
            if (t.vars[1] == out_vars[0]) push(t.vars[0]);
          }
        for (auto& v : s.order) {
          push(v);
          for (auto& [fresh, orig] : D.renamed_from())
            if (orig == v) push(fresh);
        }
      }
      for (auto& v : all) push(v);
      auto before = [&](const std::string& a, const std::string& b) {
        return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
      };

      std::vector<std::string> args, tail;
      std::ostringstream decls;
      std::set<std::string> csc_names;
      for (auto& t : s.tensors) {
        if (t.role != Role::SparseInput || !structures.count(t.name)) continue;
        bool by_columns = before(t.vars[1], t.vars[0]);
        bool reads_values = used.count(t.name) && !t.values.empty();
        args.push_back("Tensor " + t.rowptr);
        args.push_back("Tensor " + t.col);
        if (reads_values) args.push_back(std::string(t.values_optional ? "Tensor? " : "Tensor ") + t.values);
        std::string colptr = t.colptr, row = t.row, perm = t.perm;
        if (!t.has_csc()) {
          colptr = fresh_name(s, t.name == "A" ? "colptr" : t.rowptr + "_colptr", csc_names);
          row = fresh_name(s, t.name == "A" ? "row" : t.rowptr + "_row", csc_names);
          perm = fresh_name(s, t.name == "A" ? "perm" : t.rowptr + "_perm", csc_names);
        }
        csc_names.insert(colptr);
        csc_names.insert(row);
        csc_names.insert(perm);
        if (by_columns) {
          args.push_back("Tensor " + colptr);
          args.push_back("Tensor " + row);
          args.push_back("Tensor " + perm);
        } else {
          tail.push_back("Tensor? " + colptr + "=None");
          tail.push_back("Tensor? " + row + "=None");
          tail.push_back("Tensor? " + perm + "=None");
        }
        decls << "sparse  " << t.name << "(" << join(t.vars) << ") = csr(" << t.rowptr << ", " << t.col
              << (reads_values ? ", " + t.values : "") << ") csc(" << colptr << ", " << row << ", " << perm << ")"
              << (t.single ? " single" : "") << "\n";
      }
      for (auto& a : s.schema.args)
        for (auto& t : s.tensors) {
          if (!used.count(t.name)) continue;
          if (t.role == Role::DenseInput && t.arg == a.name) {
            args.push_back("Tensor " + t.arg);
            decls << "dense   " << t.name << "(" << join(t.vars) << ") = " << t.arg << (t.acc ? " acc" : "") << "\n";
          }
          if (t.role == Role::EdgeInput && t.arg == a.name) {
            args.push_back("Tensor " + t.arg);
            decls << "edge    " << t.name << "(" << join(t.vars) << ") on " << t.pattern << " = " << t.arg << "\n";
          }
          if (t.role == Role::SelectInput && t.arg == a.name) {
            args.push_back("Tensor " + t.arg);
            decls << "select  " << t.name << "(" << join(t.vars) << ") on " << t.pattern << " = " << t.arg << "\n";
          }
        }
      std::function<void(const ExprP&)> float_params = [&](const ExprP& x) {
        if (x->kind == Expr::Kind::Call && !x->param_arg.empty() && !has(args, "float " + x->param_arg)) args.push_back("float " + x->param_arg);
        for (auto& a : x->args) float_params(a);
      };
      float_params(e);
      // Extents given by int arguments travel with the indices that use them.
      for (auto& [v, a] : s.extents)
        if (has(all, v)) {
          args.push_back("int " + a);
          decls << "extent  " << v << " = " << a << "\n";
        }
      for (auto& t : s.tensors)
        if (t.role == Role::CountInput && used.count(t.name)) decls << "count   " << t.name << "(" << join(t.vars) << ") of " << t.pattern << "\n";
      if (reads_sel) {
        args.push_back("Tensor " + adj.select_arg);
        decls << sel_decl;
      }
      for (auto& [decl, arg] : extra) {
        args.push_back("Tensor " + arg);
        decls << decl << "\n";
      }
      if (used.count(gy)) {
        args.push_back("Tensor " + adj.grad_arg);
        // The gradient of an `acc` result (a row statistic) comes in that dtype.
        if (Y.pattern.empty()) decls << "dense   " << gy << "(" << join(Y.vars) << ") = " << adj.grad_arg << (Y.acc ? " acc" : "") << "\n";
        else decls << "edge    " << gy << "(" << join(Y.vars) << ") on " << Y.pattern << " = " << adj.grad_arg << "\n";
      }
      decls << "output  " << out_name << "(" << join(out_vars) << ")" << (out_pat.empty() ? "" : " on " + out_pat) << (acc_out ? " acc" : "")
            << "\n";
      args.insert(args.end(), tail.begin(), tail.end());

      std::ostringstream sp;
      sp << "op      " << name << "\n";
      sp << "doc     " << doc << "\n";
      sp << "schema  " << name << "(" << join(args, ", ") << ") -> Tensor\n";
      sp << decls.str();
      sp << "expr    " << out_name << "(" << join(out_vars) << ") = " << to_string(e) << "\n";
      sp << "reduce  sum\n";
      sp << "order   " << join(order, " ") << "\n";
      sp << "dtypes  " << dtypes_line(s.dtypes) << "\n";
      sp << "index   " << dtypes_line(s.index_dtypes) << "\n";
      sp << "grad_order " << grad_order << "\n";
      if (s.variants) sp << "variants auto\n";
      return sp.str();
    };

    // Row statistics out of walks by columns (see Adjoint::stats).
    std::vector<std::pair<std::string, std::string>> extra;
    // Also in adjoints that walk A by rows when some adjoint of the op walks A by columns (and
    // so needs the statistics anyway): sibling walks there would recompute what the backward
    // computes once. An op whose adjoints all walk by rows (edge_softmax) keeps its sibling
    // walks: one kernel instead of several.
    for (auto& A : s.tensors) {
      if (A.role != Role::SparseInput || (A.vars[1] != tv[0] && A.vars[0] != tv[0])) continue;
      if (A.vars[0] == tv[0] && !column_adjoint(A)) continue;
      std::set<std::string> reserved_here = reserved;
      reserved_here.insert(gy);
      reserved_here.insert(dt);
      parsed = hoist_row_stats(s, A, gy, Y.pattern, tv, parsed, [&](const ExprP& stat, const Vars& free, const Vars& private_cols) {
        // The statistic's op: canonical private column names (A's column, then j2, j3, ...),
        // shared by every adjoint of this op that needs the same one.
        Vars targets;
        std::map<std::string, std::string> ren;
        Vars avoid = all_vars_of(stat);
        for (auto& c : private_cols) {
          std::string t = A.vars[1];
          for (int n = 2; has(targets, t) || has(free, t) || (has(avoid, t) && !has(private_cols, t)); ++n) t = A.vars[1] + std::to_string(n);
          targets.push_back(t);
          ren[c] = t;
        }
        ExprP body = rename_vars(stat, ren);
        // Shared by name up to the names of the indices it sums privately.
        std::map<std::string, std::string> canon;
        for (auto& v : all_vars_of(body))
          if (!has(free, v)) canon[v] = "_" + std::to_string(canon.size());
        std::string key = to_string(rename_vars(body, canon)) + " | " + join(free);
        auto hit = stat_ops.find(key);
        std::string op_name;
        if (hit == stat_ops.end()) {
          op_name = s.name + "_stat" + std::to_string(stat_ops.size());
          Vars order = {free[0]};
          for (auto& t : targets) order.push_back(t);
          for (auto& v : s.order) order.push_back(v);
          // Held in the accumulation precision: the adjoints combine statistics (a row max and
          // the sum of exponentials taken relative to it) that must agree to the last bit.
          std::string text = write(op_name, "a row statistic of " + s.name + " read by its adjoints", "R", free, "", body, order, s.grad_order - 1, {}, true);
          stat_ops[key] = {op_name, text};
        } else {
          op_name = hit->second.first;
        }
        // Its name and argument in this adjoint.
        std::string arg = op_name.substr(s.name.size() + 1);
        std::string rname = fresh_name(s, "R" + arg.substr(4), reserved_here);
        reserved_here.insert(rname);
        bool seen = false;
        for (auto& st : adj.stats) seen = seen || st.arg == arg;
        if (!seen) {
          Adjoint::Stat st;
          st.arg = arg;
          st.text = stat_ops[key].second;
          st.spec = parse_spec(st.text, "<" + op_name + ", derived from " + s.name + ">");
          st.spec.family = s.family;
          adj.stats.push_back(std::move(st));
          extra.push_back({"dense   " + rname + "(" + join(free) + ") = " + arg + " acc", arg});
        } else {
          for (auto& [decl, a] : extra)
            if (a == arg) rname = decl.substr(8, decl.find('(') - 8);
        }
        return parse_assignment("X() = " + rname + "(" + join(free) + ")", Loc{}).rhs;
      });
    }

    std::string name = s.name + "_grad_" + arg.name;
    adj.text = write(name, "gradient of " + s.name + " with respect to " + arg.name, dt, tv, out_pattern, parsed, {},
                     s.grad_order - 1, extra, T->acc);
    adj.spec = parse_spec(adj.text, "<" + name + ", derived from " + s.name + ">");
    adj.spec.family = s.family;
    out.push_back(std::move(adj));
  }
  return out;
}

}  // namespace gnnfuse::codegen
