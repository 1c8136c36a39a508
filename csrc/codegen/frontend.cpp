// Stage 1: the spec language (see ops/README.md): spec files, torch schemas and index notation.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "codegen/builtins.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- expressions
namespace {

class ExprParser {
 public:
  ExprParser(const std::string& text, const Loc& loc) : s_(text), base_(loc) {}

  Assignment assignment() {
    Assignment a;
    a.loc = here();
    ExprP lhs = primary();
    if (lhs->kind != Expr::Kind::Access) fail(lhs->loc, "the left side must be a tensor access such as Y(i,f)");
    a.lhs = lhs->name;
    a.lhs_idx = lhs->idx;
    skip();
    if (!eat('=')) fail(here(), "expected '=' after the left side");
    a.rhs = sum();
    skip();
    if (pos_ != s_.size()) fail(here(), "unexpected '" + std::string(1, s_[pos_]) + "'");
    return a;
  }

 private:
  const std::string& s_;
  Loc base_;
  size_t pos_ = 0;

  Loc here() const { return Loc{base_.file, base_.line, base_.col + static_cast<int>(pos_)}; }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string ident() {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    if (b == pos_ || std::isdigit(static_cast<unsigned char>(s_[b]))) fail(here(), "expected a name");
    return s_.substr(b, pos_ - b);
  }
  static ExprP make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

  ExprP sum() {
    ExprP l = product();
    for (;;) {
      skip();
      Loc at = here();
      if (eat('+')) l = binary('+', l, product(), at);
      else if (eat('-')) l = binary('-', l, product(), at);
      else return l;
    }
  }
  ExprP product() {
    ExprP l = unary();
    for (;;) {
      skip();
      Loc at = here();
      if (eat('*')) l = binary('*', l, unary(), at);
      else if (eat('/')) l = binary('/', l, unary(), at);
      else return l;
    }
  }
  static ExprP binary(char op, ExprP a, ExprP b, const Loc& at) {
    Expr e;
    e.kind = Expr::Kind::Binary;
    e.op = op;
    e.args = {std::move(a), std::move(b)};
    e.loc = at;
    return make(std::move(e));
  }
  ExprP unary() {
    skip();
    Loc at = here();
    if (eat('-')) {
      Expr e;
      e.kind = Expr::Kind::Neg;
      e.args = {unary()};
      e.loc = at;
      return make(std::move(e));
    }
    return primary();
  }
  ExprP primary() {
    skip();
    Loc at = here();
    if (pos_ >= s_.size()) fail(at, "unexpected end of expression");
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      ExprP e = sum();
      if (!eat(')')) fail(here(), "expected ')'");
      Expr g = *e;
      g.grouped = true;
      return make(std::move(g));
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t used = 0;
      double v = 0;
      try {  // "." alone, or out of double's range (found by tests/fuzz/fuzz_spec)
        v = std::stod(s_.substr(pos_), &used);
      } catch (const std::exception&) {
        fail(at, "expected a number");
      }
      pos_ += used;
      Expr e;
      e.kind = Expr::Kind::Const;
      e.value = v;
      e.loc = at;
      return make(std::move(e));
    }
    std::string name = ident();
    if ((name == "max" || name == "min") && eat('[')) {
      // max[j](e): an explicit reduction over one variable.
      Expr e;
      e.kind = Expr::Kind::Reduce;
      e.name = name;
      e.idx = {ident()};
      e.loc = at;
      if (!eat(']')) fail(here(), "expected ']' after the variable of " + name + "[");
      if (!eat('(')) fail(here(), "expected '(' after " + name + "[" + e.idx[0] + "]");
      e.args = {sum()};
      if (!eat(')')) fail(here(), "expected ')' closing " + name + "[" + e.idx[0] + "](");
      return make(std::move(e));
    }
    if (!eat('(')) fail(here(), "expected '(' after '" + name + "': tensors are written with their indices, e.g. X(j,f)");
    if (const Function* fn = find_function(name)) {
      Expr e;
      e.kind = Expr::Kind::Call;
      e.name = name;
      for (int k = 0; k < fn->arity; ++k) {
        if (k && !eat(',')) fail(here(), name + " takes " + std::to_string(fn->arity) + " arguments");
        e.args.push_back(sum());
      }
      e.loc = at;
      if (fn->takes_param) {
        if (!eat(',')) fail(here(), name + " takes a constant parameter: " + name + "(x, c)");
        skip();
        e.has_param = true;
        if (pos_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
          // A schema `float` argument (checked against the schema by parse_spec).
          e.param_arg = ident();
        } else {
          bool neg = eat('-');
          skip();
          size_t used = 0;
          try {
            e.value = std::stod(s_.substr(pos_), &used);
          } catch (const std::exception&) {
            fail(here(), "the parameter of " + name + " must be a number or a float argument of the schema");
          }
          pos_ += used;
          if (neg) e.value = -e.value;
        }
      }
      if (!eat(')')) fail(here(), "expected ')' closing " + name + "(");
      return make(std::move(e));
    }
    Expr e;
    e.kind = Expr::Kind::Access;
    e.name = name;
    e.loc = at;
    if (!eat(')')) {
      do {
        std::string v = ident();
        if (std::find(e.idx.begin(), e.idx.end(), v) != e.idx.end())
          fail(here(), "index variable '" + v + "' repeated in an access of " + name + " (diagonals are not supported)");
        e.idx.push_back(v);
      } while (eat(','));
      if (!eat(')')) fail(here(), "expected ')' or ',' in the indices of " + name);
    }
    return make(std::move(e));
  }
};

std::string fmt_number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  std::string w;
  while (is >> w) out.push_back(w);
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) out += (k ? sep : "") + v[k];
  return out;
}

}  // namespace

Assignment parse_assignment(const std::string& text, const Loc& loc) { return ExprParser(text, loc).assignment(); }

std::string to_string(const ExprP& e) {
  switch (e->kind) {
    case Expr::Kind::Access: return e->name + "(" + join(e->idx, ",") + ")";
    case Expr::Kind::Const: return fmt_number(e->value);
    case Expr::Kind::Neg: return "-" + to_string(e->args[0]);
    case Expr::Kind::Reduce: return e->name + "[" + e->idx[0] + "](" + to_string(e->args[0]) + ")";
    case Expr::Kind::Call:
      return e->name + "(" + to_string(e->args[0]) +
             (e->has_param ? ", " + (e->param_arg.empty() ? fmt_number(e->value) : e->param_arg) : "") + ")";
    case Expr::Kind::Binary: {
      auto side = [&](const ExprP& a, bool right) {
        std::string t = to_string(a);
        bool low = a->kind == Expr::Kind::Binary && (a->op == '+' || a->op == '-');
        // A product written in parentheses keeps them (the decomposition treats it whole).
        bool kept = a->grouped && a->kind == Expr::Kind::Binary && a->op == '*' && (e->op == '*' || e->op == '/');
        bool paren = kept || ((e->op == '*' || e->op == '/') && low) ||
                     (right && a->kind == Expr::Kind::Binary && (e->op == '-' || e->op == '/' || (e->op == '*' && !low)));
        return paren ? "(" + t + ")" : t;
      };
      return side(e->args[0], false) + " " + e->op + " " + side(e->args[1], true);
    }
  }
  return "";
}

std::vector<std::string> vars_of(const ExprP& e) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  if (e->kind == Expr::Kind::Access)
    for (auto& v : e->idx) add(v);
  for (auto& a : e->args)
    for (auto& v : vars_of(a))
      if (e->kind != Expr::Kind::Reduce || v != e->idx[0]) add(v);
  return out;
}

std::vector<std::string> all_vars_of(const ExprP& e) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  if (e->kind == Expr::Kind::Access || e->kind == Expr::Kind::Reduce)
    for (auto& v : e->idx) add(v);
  for (auto& a : e->args)
    for (auto& v : all_vars_of(a)) add(v);
  return out;
}

Schema parse_schema(const std::string& text, const Loc& loc) {
  Schema s;
  s.text = trim(text);
  size_t arrow = s.text.find("->");
  size_t lp = s.text.find('('), rp = arrow == std::string::npos ? s.text.rfind(')') : s.text.rfind(')', arrow);
  if (lp == std::string::npos || rp == std::string::npos || arrow == std::string::npos || rp > arrow)
    fail(loc, "a schema reads name(Type arg, ...) -> Ret");
  s.name = trim(s.text.substr(0, lp));
  std::string inner = s.text.substr(lp + 1, rp - lp - 1);
  std::stringstream is(inner);
  std::string piece;
  static const std::set<std::string> types{"Tensor", "int", "float", "bool", "str"};
  while (std::getline(is, piece, ',')) {
    std::string def;
    size_t eq = piece.find('=');
    if (eq != std::string::npos) {
      def = trim(piece.substr(eq + 1));
      piece = piece.substr(0, eq);
      if (def.empty()) fail(loc, "schema argument '" + trim(piece) + "': empty default");
    }
    auto w = split_ws(piece);
    if (w.empty()) continue;
    if (w.size() != 2) fail(loc, "schema argument '" + trim(piece) + "' must be 'Type name' or 'Type name=default'");
    SchemaArg a;
    a.default_value = def;
    a.type = w[0];
    if (!a.type.empty() && a.type.back() == '?') {
      a.optional = true;
      a.type.pop_back();
    }
    if (!types.count(a.type)) fail(loc, "unknown schema type '" + w[0] + "'");
    a.name = w[1];
    if (s.arg(a.name)) fail(loc, "schema argument '" + a.name + "' repeated");
    if (!def.empty() && def == "None" && !a.optional) fail(loc, "schema argument '" + a.name + "' defaults to None but is not optional");
    if (s.args.size() && !s.args.back().default_value.empty() && def.empty())
      fail(loc, "schema argument '" + a.name + "' has no default but follows one that has");
    s.args.push_back(a);
  }
  std::string ret = trim(s.text.substr(arrow + 2));
  if (!ret.empty() && ret.front() == '(') ret = ret.substr(1, ret.size() - 2);
  std::stringstream rs(ret);
  while (std::getline(rs, piece, ',')) {
    auto w = split_ws(piece);
    if (!w.empty()) s.returns.push_back(w[0]);
  }
  if (s.returns.empty()) fail(loc, "the schema returns nothing");
  return s;
}

namespace {

// "A(i,j)" -> name A, vars [i, j]
// A trailing " acc" word (held in the accumulation precision): removed, true when present.
bool strip_acc(std::string* value) {
  const std::string t = trim(*value);
  if (t.size() > 4 && t.compare(t.size() - 4, 4, " acc") == 0) {
    *value = trim(t.substr(0, t.size() - 4));
    return true;
  }
  return false;
}

void parse_decl_head(const std::string& head, const Loc& loc, TensorDecl* d) {
  Assignment probe = parse_assignment(head + " = 0", loc);
  d->name = probe.lhs;
  d->vars = probe.lhs_idx;
  d->loc = loc;
}

// The lines naming built-ins, as the spec spells them (check_spec parses them).
struct BuiltinLines {
  std::string reduce = "sum";
  std::vector<std::string> dtypes, index_dtypes;
};

void check_spec(OpSpec& s, const BuiltinLines& text) {
  if (s.name.empty()) fail(s.loc, "missing 'op' line");
  if (s.schema.name != s.name) fail(s.loc, "schema name '" + s.schema.name + "' differs from op name '" + s.name + "'");
  if (!s.expr.rhs) fail(s.loc, "missing 'expr' line");
  if (text.dtypes.empty()) fail(s.loc, "missing 'dtypes' line");
  if (text.index_dtypes.empty()) fail(s.loc, "missing 'index' line");
  for (auto& d : text.dtypes) {
    std::optional<DType> t = parse_dtype(d);
    if (!t) fail(s.loc, "dtype '" + d + "' is not supported (float32, float64, bfloat16, float16)");
    s.dtypes.push_back(*t);
  }
  for (auto& d : text.index_dtypes) {
    std::optional<IndexType> t = parse_index_type(d);
    if (!t) fail(s.loc, "index dtype '" + d + "' is not int32 or int64");
    s.index_dtypes.push_back(*t);
  }
  std::optional<Reduce> reduce = parse_reduce(text.reduce);
  if (!reduce) fail(s.loc, "reduce '" + text.reduce + "' is not known (sum, max, min; a mean is a sum divided by a count operand)");
  s.reduce = *reduce;

  int outputs = 0;
  std::set<std::string> used_args;
  auto use_arg = [&](const std::string& a, const Loc& loc, bool may_be_optional) {
    const SchemaArg* sa = s.schema.arg(a);
    if (!sa) fail(loc, "'" + a + "' is not an argument of the schema");
    if (sa->type != "Tensor") fail(loc, "argument '" + a + "' must be a Tensor");
    if (sa->optional && !may_be_optional) fail(loc, "argument '" + a + "' may not be optional here");
    if (!used_args.insert(a).second) fail(loc, "argument '" + a + "' bound twice");
  };
  for (auto& t : s.tensors) {
    if (std::count_if(s.tensors.begin(), s.tensors.end(), [&](const TensorDecl& o) { return o.name == t.name; }) > 1)
      fail(t.loc, "tensor '" + t.name + "' declared twice");
    switch (t.role) {
      case Role::SparseInput:
        if (t.vars.size() != 2) fail(t.loc, "a csr operand has two indices: row, column");
        if (t.vars[0] == t.vars[1]) fail(t.loc, "a csr operand's row and column indices must differ");
        use_arg(t.rowptr, t.loc, false);
        use_arg(t.col, t.loc, false);
        if (!t.values.empty()) {
          use_arg(t.values, t.loc, true);
          t.values_optional = s.schema.arg(t.values)->optional;
        }
        if (t.has_csc()) {
          use_arg(t.colptr, t.loc, true);
          use_arg(t.row, t.loc, true);
          use_arg(t.perm, t.loc, true);
          t.csc_optional = s.schema.arg(t.colptr)->optional;
          if (s.schema.arg(t.row)->optional != t.csc_optional || s.schema.arg(t.perm)->optional != t.csc_optional)
            fail(t.loc, "the csc arguments of " + t.name + " must be all optional or all required");
        }
        break;
      case Role::DenseInput:
        if (t.vars.empty()) fail(t.loc, "a dense operand needs at least one index");
        use_arg(t.arg, t.loc, false);
        break;
      case Role::EdgeInput: {
        const TensorDecl* p = s.find(t.pattern);
        if (!p || p->role != Role::SparseInput) fail(t.loc, "'" + t.pattern + "' is not a sparse operand (declare it before " + t.name + ")");
        if (t.vars.size() < 2 || t.vars[0] != p->vars[0] || t.vars[1] != p->vars[1])
          fail(t.loc, "an edge operand on " + t.pattern + " starts with its indices (" + p->vars[0] + "," + p->vars[1] + "), then any per-edge dimensions");
        use_arg(t.arg, t.loc, false);
        break;
      }
      case Role::CountInput:
      case Role::SelectInput: {
        const TensorDecl* p = s.find(t.pattern);
        if (!p || p->role != Role::SparseInput) fail(t.loc, "'" + t.pattern + "' is not a sparse operand (declare it before " + t.name + ")");
        if (t.role == Role::CountInput && (t.vars.size() != 1 || t.vars[0] != p->vars[0]))
          fail(t.loc, "a count of " + t.pattern + " is indexed by its row: " + t.name + "(" + p->vars[0] + ")");
        if (t.role == Role::SelectInput) {
          if (t.vars.size() < 2 || t.vars[0] != p->vars[0] || t.vars[1] != p->vars[1])
            fail(t.loc, "a select on " + t.pattern + " starts with its indices (" + p->vars[0] + "," + p->vars[1] + ")");
          use_arg(t.arg, t.loc, false);
        }
        break;
      }
      case Role::Output: {
        ++outputs;
        if (!t.pattern.empty()) {
          const TensorDecl* p = s.find(t.pattern);
          if (!p || p->role != Role::SparseInput) fail(t.loc, "'" + t.pattern + "' is not a sparse operand");
          if (t.vars.size() < 2 || t.vars[0] != p->vars[0] || t.vars[1] != p->vars[1])
            fail(t.loc, "an output on " + t.pattern + "'s pattern starts with its indices (" + p->vars[0] + "," + p->vars[1] + ")");
        }
        break;
      }
      case Role::Temp: break;
    }
  }
  if (outputs != 1) fail(s.loc, "a spec has exactly one output");
  if (s.selects()) {
    if (s.schema.returns.size() != 2 || s.schema.returns[0] != "Tensor" || s.schema.returns[1] != "Tensor")
      fail(s.loc, "reduce " + to_string(s.reduce) + " returns the values and the chosen positions: the schema must return (Tensor, Tensor)");
  } else if (s.schema.returns.size() != 1 || s.schema.returns[0] != "Tensor") {
    fail(s.loc, "the schema must return one Tensor");
  }
  // Function parameters may name schema `float` arguments: leaky_relu(x, negative_slope).
  std::function<void(const ExprP&)> param_args = [&](const ExprP& e) {
    if (e->kind == Expr::Kind::Call && !e->param_arg.empty()) {
      const SchemaArg* sa = s.schema.arg(e->param_arg);
      if (!sa || sa->type != "float" || sa->optional)
        fail(e->loc, "the parameter '" + e->param_arg + "' of " + e->name + " is not a (non-optional) float argument of the schema");
      used_args.insert(e->param_arg);
    }
    for (auto& a : e->args) param_args(a);
  };
  param_args(s.expr.rhs);
  for (auto& [v, a] : s.extents) {
    const SchemaArg* sa = s.schema.arg(a);
    if (!sa || sa->type != "int" || sa->optional) fail(s.loc, "the extent of '" + v + "' must be a (non-optional) int argument of the schema, not '" + a + "'");
    if (!used_args.insert(a).second) fail(s.loc, "argument '" + a + "' bound twice");
  }
  for (auto& a : s.schema.args)
    if (!used_args.count(a.name)) fail(s.loc, "schema argument '" + a.name + "' is not bound to a tensor of the spec");

  const TensorDecl& out = s.output();
  if (s.expr.lhs != out.name) fail(s.expr.loc, "the expression must assign the output '" + out.name + "'");
  if (s.expr.lhs_idx != out.vars) fail(s.expr.loc, "the left side must use the output's indices as declared");
  std::function<void(const ExprP&)> check_expr = [&](const ExprP& e) {
    if (e->kind == Expr::Kind::Access) {
      const TensorDecl* t = s.find(e->name);
      if (!t) fail(e->loc, "unknown tensor '" + e->name + "'");
      if (t->role == Role::Output) fail(e->loc, "the output may not be read");
      // A dense operand may be read with other index names (X(i,k) * X(j,k)); sparse, edge and
      // select operands keep their declared row index and may rename the column, each new
      // column name being another walk over the row (A(i,j2) in a row sum beside A(i,j)).
      bool ok = t->vars.size() == e->idx.size();
      if (ok && t->role != Role::DenseInput) {
        for (size_t d = 0; d < e->idx.size(); ++d)
          if (d != 1 && e->idx[d] != t->vars[d]) ok = false;
        if (t->role == Role::CountInput && e->idx != t->vars) ok = false;
      }
      if (!ok)
        fail(e->loc, "'" + e->name + "' is declared with indices (" + join(t->vars, ",") + ") and must be used with " +
                         (t->role == Role::DenseInput ? std::to_string(t->vars.size()) + " indices" : "them (its column index may be renamed)"));
    }
    if (e->kind == Expr::Kind::Reduce) {
      const std::string& v = e->idx[0];
      if (std::count(s.expr.lhs_idx.begin(), s.expr.lhs_idx.end(), v))
        fail(e->loc, "the variable of " + e->name + "[" + v + "] is an index of the output");
      std::vector<std::string> inner = vars_of(e->args[0]);
      if (!std::count(inner.begin(), inner.end(), v)) fail(e->loc, e->name + "[" + v + "](...) does not use " + v);
    }
    for (auto& a : e->args) check_expr(a);
  };
  check_expr(s.expr.rhs);

  std::vector<std::string> all = all_vars_of(s.expr.rhs);
  for (auto& v : s.expr.lhs_idx)
    if (std::find(all.begin(), all.end(), v) == all.end()) {
      // An output on a pattern gets its indices from the pattern.
      if (out.pattern.empty()) fail(s.expr.loc, "output index '" + v + "' does not appear on the right side");
      all.push_back(v);
    }
  if (s.order.empty()) {
    // Default: every sparse operand's row then column variable, then the rest as they appear.
    for (auto& t : s.tensors)
      if (t.role == Role::SparseInput)
        for (auto& v : t.vars)
          if (std::find(s.order.begin(), s.order.end(), v) == s.order.end()) s.order.push_back(v);
    for (auto& v : all)
      if (std::find(s.order.begin(), s.order.end(), v) == s.order.end()) s.order.push_back(v);
  }
  for (auto& v : all)
    if (std::find(s.order.begin(), s.order.end(), v) == s.order.end()) fail(s.loc, "index variable '" + v + "' is missing from 'order'");
  for (auto& v : s.order)
    if (std::find(all.begin(), all.end(), v) == all.end()) fail(s.loc, "'order' names '" + v + "', which the expression does not use");
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) {
      auto pos = [&](const std::string& v) { return std::find(s.order.begin(), s.order.end(), v) - s.order.begin(); };
      if (pos(t.vars[0]) > pos(t.vars[1]) && (!t.has_csc() || t.csc_optional))
        fail(t.loc, "csr operand " + t.name + ": 'order' walks it by columns (" + t.vars[1] + " before " + t.vars[0] +
                        "), which needs its csc(colptr, row, perm) view as required arguments");
    }
  if (s.grad_order < 0 || s.grad_order > 2) fail(s.loc, "grad_order is 0, 1 or 2");
  for (auto& [v, a] : s.extents)
    if (std::find(s.order.begin(), s.order.end(), v) == s.order.end()) fail(s.loc, "'extent' names '" + v + "', which the expression does not use");
  if (!s.symbolic.empty()) {
    const TensorDecl* S = s.find(s.symbolic);
    if (!S || S->role != Role::SparseInput || !S->values.empty())
      fail(s.loc, "symbolic " + s.symbolic + ": not a csr operand without values (the pattern the op computes)");
    if (out.pattern != s.symbolic) fail(s.loc, "symbolic " + s.symbolic + ": the output must live on it (output " + out.name + "(...) on " + s.symbolic + ")");
    for (auto& v : S->vars) {
      bool given = false;
      for (auto& t : s.tensors)
        if (t.role == Role::SparseInput && t.name != S->name && t.vars[0] == v) given = true;
      for (auto& [ev, a] : s.extents) given = given || ev == v;
      if (!given) fail(s.loc, "symbolic " + s.symbolic + ": the extent of '" + v + "' needs a csr operand's rows or an 'extent' line");
    }
    if (s.selects()) fail(s.loc, "symbolic " + s.symbolic + ": reduce " + to_string(s.reduce) + " is not lowered for a computed pattern");
    // The one-pass assembling kernel (<op>_assemble) reads csr and dense operands only.
    if (!s.derived())
      for (auto& t : s.tensors)
        if (t.role == Role::EdgeInput || t.role == Role::CountInput || t.role == Role::SelectInput)
          fail(t.loc, "symbolic " + s.symbolic + ": operand " + t.name +
                          " is neither a csr nor a dense operand; an op computing its output pattern takes those only (not lowered yet)");
  }
  if (s.selects()) {
    size_t reduced = 0;
    for (auto& v : vars_of(s.expr.rhs)) reduced += !std::count(s.expr.lhs_idx.begin(), s.expr.lhs_idx.end(), v);
    const TensorDecl* over = s.reduced_operand();
    if (!over || reduced != 1 || !out.pattern.empty() || !std::count(out.vars.begin(), out.vars.end(), over->vars[0]))
      fail(s.loc, "reduce " + to_string(s.reduce) + " reduces exactly one index, the column of a csr operand whose row is an output index");
    auto pos = [&](const std::string& v) { return std::find(s.order.begin(), s.order.end(), v) - s.order.begin(); };
    if (pos(over->vars[0]) > pos(over->vars[1])) fail(s.loc, "reduce " + to_string(s.reduce) + " walks " + over->name + " by rows");
  }
}

}  // namespace

OpSpec parse_spec(const std::string& text, const std::string& file) {
  OpSpec s;
  BuiltinLines builtins;
  s.loc = Loc{file, 1, 1};
  std::istringstream is(text);
  std::string raw;
  int line_no = 0;
  std::vector<TensorDecl> outputs;
  while (std::getline(is, raw)) {
    ++line_no;
    std::string line = raw;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    if (trim(line).empty()) continue;
    size_t kb = line.find_first_not_of(" \t");
    size_t ke = line.find_first_of(" \t", kb);
    std::string key = line.substr(kb, ke == std::string::npos ? std::string::npos : ke - kb);
    size_t vb = ke == std::string::npos ? line.size() : line.find_first_not_of(" \t", ke);
    if (vb == std::string::npos) vb = line.size();
    std::string value = trim(line.substr(vb));
    Loc loc{file, line_no, static_cast<int>(vb) + 1};
    Loc key_loc{file, line_no, static_cast<int>(kb) + 1};
    auto once = [&](bool already) {
      if (already) fail(key_loc, "'" + key + "' given twice");
    };
    // An operand line: "head" is X(i,j,...), then its sparse operand and schema argument.
    auto declare = [&](const std::string& head, Role role, const std::string& pattern, const std::string& arg) {
      TensorDecl d;
      parse_decl_head(head, loc, &d);
      d.role = role;
      d.pattern = pattern;
      d.arg = arg;
      s.tensors.push_back(d);
    };
    if (value.empty()) fail(key_loc, "'" + key + "' needs a value");
    if (key == "op") {
      once(!s.name.empty());
      s.name = value;
      s.loc = key_loc;
    } else if (key == "doc") {
      once(!s.doc.empty());
      s.doc = value;
    } else if (key == "schema") {
      once(!s.schema.text.empty());
      s.schema = parse_schema(value, loc);
    } else if (key == "sparse") {
      // A(i,j) = csr(rowptr, col[, values])
      size_t eq = value.find('=');
      if (eq == std::string::npos) fail(loc, "expected 'A(i,j) = csr(rowptr, col[, values])'");
      TensorDecl d;
      parse_decl_head(value.substr(0, eq), loc, &d);
      d.role = Role::SparseInput;
      std::string rhs = trim(value.substr(eq + 1));
      auto args_of = [&](const std::string& call, const std::string& fn) {
        if (call.rfind(fn + "(", 0) != 0 || call.back() != ')') fail(loc, "expected " + fn + "(...)");
        std::stringstream as(call.substr(fn.size() + 1, call.size() - fn.size() - 2));
        std::string piece;
        std::vector<std::string> parts;
        while (std::getline(as, piece, ',')) parts.push_back(trim(piece));
        return parts;
      };
      std::string csc;
      size_t close = rhs.find(')');
      if (rhs.rfind("csr(", 0) != 0 || close == std::string::npos)
        fail(loc, "a sparse operand is csr(rowptr, col[, values]) [csc(colptr, row, perm)]");
      csc = trim(rhs.substr(close + 1));
      rhs = rhs.substr(0, close + 1);
      // `single` (one entry per row) before or after the csc view.
      const std::string single = "single";
      if (csc.rfind(single, 0) == 0) {
        d.single = true;
        csc = trim(csc.substr(single.size()));
      } else if (csc.size() >= single.size() && csc.compare(csc.size() - single.size(), single.size(), single) == 0) {
        d.single = true;
        csc = trim(csc.substr(0, csc.size() - single.size()));
      }
      std::vector<std::string> parts = args_of(rhs, "csr");
      if (parts.size() < 2 || parts.size() > 3) fail(loc, "csr takes rowptr, col and optional values");
      d.rowptr = parts[0];
      d.col = parts[1];
      if (parts.size() == 3) d.values = parts[2];
      if (!csc.empty()) {
        std::vector<std::string> c = args_of(csc, "csc");
        if (c.size() != 3) fail(loc, "csc takes colptr, row and perm");
        d.colptr = c[0];
        d.row = c[1];
        d.perm = c[2];
      }
      s.tensors.push_back(d);
    } else if (key == "edge" || key == "select") {
      // S(i,j) on A = scale   |   M(i,j,f) on A = positions
      size_t eq = value.find('='), on = value.find(" on ");
      if (eq == std::string::npos || on == std::string::npos || on > eq) fail(loc, "expected '" + key + " S(i,j,...) on A = arg'");
      declare(value.substr(0, on), key == "edge" ? Role::EdgeInput : Role::SelectInput, trim(value.substr(on + 4, eq - on - 4)),
              trim(value.substr(eq + 1)));
    } else if (key == "count") {
      // N(i) of A
      size_t of = value.find(" of ");
      if (of == std::string::npos) fail(loc, "expected 'N(i) of A'");
      declare(value.substr(0, of), Role::CountInput, trim(value.substr(of + 4)), "");
    } else if (key == "grad_order") {
      try {
        s.grad_order = std::stoi(value);
      } catch (const std::exception&) {
        fail(loc, "grad_order is 0, 1 or 2");
      }
    } else if (key == "dense") {
      size_t eq = value.find('=');
      if (eq == std::string::npos) fail(loc, "expected 'X(j,f) = x [acc]'");
      std::string arg = trim(value.substr(eq + 1));
      const bool acc = strip_acc(&arg);
      declare(value.substr(0, eq), Role::DenseInput, "", arg);
      s.tensors.back().acc = acc;
    } else if (key == "output") {
      // Y(i,f) [acc]   or   E(i,j) on A
      TensorDecl d;
      d.acc = strip_acc(&value);
      std::string head = value, pattern;
      size_t on = value.find(" on ");
      if (on != std::string::npos) {
        head = value.substr(0, on);
        pattern = trim(value.substr(on + 4));
      }
      parse_decl_head(head, loc, &d);
      d.role = Role::Output;
      d.pattern = pattern;
      if (d.acc && !pattern.empty()) fail(loc, "an output on a sparse operand is stored in the op's dtype ('acc' is for dense outputs)");
      outputs.push_back(d);
    } else if (key == "extent") {
      // j = n_cols
      size_t eq = value.find('=');
      if (eq == std::string::npos) fail(loc, "expected 'extent j = int_argument'");
      std::string var = trim(value.substr(0, eq)), arg = trim(value.substr(eq + 1));
      if (var.empty() || arg.empty()) fail(loc, "expected 'extent j = int_argument'");
      for (auto& [v, a] : s.extents)
        if (v == var) fail(loc, "the extent of '" + var + "' is given twice");
      s.extents.push_back({var, arg});
    } else if (key == "symbolic") {
      once(!s.symbolic.empty());
      s.symbolic = value;
    } else if (key == "variants") {
      once(s.variants);
      if (value != "auto") fail(loc, "variants: expected 'auto' (every association the smallest-temporary rule ties on, chosen at run time)");
      s.variants = true;
    } else if (key == "autocast") {
      once(!s.autocast.empty());
      if (value != "lower_precision" && value != "fp32" && value != "promote")
        fail(loc, "autocast: expected 'lower_precision' (cast to the autocast dtype, like torch.mm), 'fp32' (to float32, like a softmax) or 'promote' (to the widest input dtype)");
      s.autocast = value;
    } else if (key == "expr") {
      once(s.expr.rhs != nullptr);
      s.expr = parse_assignment(value, loc);
    } else if (key == "reduce") {
      builtins.reduce = value;
    } else if (key == "order") {
      once(!s.order.empty());
      s.order = split_ws(value);
    } else if (key == "dtypes") {
      once(!builtins.dtypes.empty());
      builtins.dtypes = split_ws(value);
    } else if (key == "index") {
      once(!builtins.index_dtypes.empty());
      builtins.index_dtypes = split_ws(value);
    } else {
      fail(key_loc, "unknown key '" + key + "' (op, doc, schema, sparse, dense, edge, count, select, output, extent, symbolic, variants, autocast, expr, reduce, order, dtypes, index, grad_order)");
    }
  }
  for (auto& o : outputs) s.tensors.push_back(o);
  if (s.family.empty()) s.family = s.name;
  check_spec(s, builtins);
  return s;
}

OpSpec load_spec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError(path + ": error: cannot read the spec file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_spec(ss.str(), path);
}

std::string print_spec(const OpSpec& s) {
  std::ostringstream os;
  os << "op      " << s.name << "\n";
  if (!s.doc.empty()) os << "doc     " << s.doc << "\n";
  os << "schema  " << s.schema.text << "\n";
  for (auto& t : s.tensors) {
    std::string head = t.name + "(" + join(t.vars, ",") + ")";
    switch (t.role) {
      case Role::SparseInput:
        os << "sparse  " << head << " = csr(" << t.rowptr << ", " << t.col << (t.values.empty() ? "" : ", " + t.values) << ")";
        if (t.has_csc()) os << " csc(" << t.colptr << ", " << t.row << ", " << t.perm << ")";
        if (t.single) os << " single";
        os << "\n";
        break;
      case Role::EdgeInput: os << "edge    " << head << " on " << t.pattern << " = " << t.arg << "\n"; break;
      case Role::DenseInput: os << "dense   " << head << " = " << t.arg << (t.acc ? " acc" : "") << "\n"; break;
      case Role::CountInput: os << "count   " << head << " of " << t.pattern << "\n"; break;
      case Role::SelectInput: os << "select  " << head << " on " << t.pattern << " = " << t.arg << "\n"; break;
      case Role::Output: os << "output  " << head << (t.pattern.empty() ? "" : " on " + t.pattern) << (t.acc ? " acc" : "") << "\n"; break;
      case Role::Temp: break;
    }
  }
  os << "expr    " << s.expr.lhs << "(" << join(s.expr.lhs_idx, ",") << ") = " << to_string(s.expr.rhs) << "\n";
  os << "reduce  " << to_string(s.reduce) << "\n";
  os << "order   " << join(s.order, " ") << "\n";
  os << "dtypes  " << dtypes_line(s.dtypes) << "\n";
  os << "index   " << dtypes_line(s.index_dtypes) << "\n";
  if (s.grad_order != 2) os << "grad_order " << s.grad_order << "\n";
  for (auto& [v, a] : s.extents) os << "extent  " << v << " = " << a << "\n";
  if (!s.symbolic.empty()) os << "symbolic " << s.symbolic << "\n";
  if (s.variants) os << "variants auto\n";
  if (!s.autocast.empty()) os << "autocast " << s.autocast << "\n";
  return os.str();
}

}  // namespace gnnfuse::codegen
