// The tables of builtins.h.
#include "codegen/builtins.h"

#include <map>

namespace gnnfuse::codegen {

ExprP make_expr(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

ExprP constant(double v) {
  Expr e;
  e.kind = Expr::Kind::Const;
  e.value = v;
  return make_expr(std::move(e));
}

ExprP binary(char op, ExprP a, ExprP b) {
  Expr e;
  e.kind = Expr::Kind::Binary;
  e.op = op;
  e.args = {std::move(a), std::move(b)};
  return make_expr(std::move(e));
}

ExprP call(const std::string& fn, ExprP arg, std::optional<double> param, const std::string& param_arg) {
  Expr e;
  e.kind = Expr::Kind::Call;
  e.name = fn;
  e.args = {std::move(arg)};
  if (param) {
    e.has_param = true;
    e.value = *param;
    e.param_arg = param_arg;
  }
  return make_expr(std::move(e));
}

namespace {

using G = std::function<ExprP()>;

Function fn(const std::string& name, bool param, decltype(Function::derivative) d, decltype(Function::cpu) cpu, bool float32 = false) {
  Function f;
  f.name = name;
  f.takes_param = param;
  f.derivative = std::move(d);
  f.cpu = std::move(cpu);
  f.float32_under_autocast = float32;
  return f;
}

// The cuda column of the table (cuda/device_runtime.cuh; max_of / min_of spell std::max / std::min).
void cuda_spellings(std::vector<Function>& t) {
  using S = std::function<std::string(const std::string&, const std::string&)>;
  const std::string cu = "gnnfuse::cuda::";
  const std::map<std::string, S> cuda{
      {"exp", [=](const std::string& x, const std::string&) { return cu + "exp_acc(" + x + ")"; }},
      {"log", [=](const std::string& x, const std::string&) { return cu + "log_acc(" + x + ")"; }},
      {"relu", [=](const std::string& x, const std::string&) { return cu + "max_of(" + x + ", acc_t(0))"; }},
      {"sigmoid", [=](const std::string& x, const std::string&) { return "acc_t(1) / (acc_t(1) + " + cu + "exp_acc(-(" + x + ")))"; }},
      {"tanh", [=](const std::string& x, const std::string&) { return cu + "tanh_acc(" + x + ")"; }},
      {"step", [](const std::string& x, const std::string&) { return "static_cast<acc_t>(" + x + " > acc_t(0))"; }},
      {"leaky_relu",
       [=](const std::string& x, const std::string& p) { return "(" + cu + "max_of(" + x + ", acc_t(0)) + " + p + " * " + cu + "min_of(" + x + ", acc_t(0)))"; }},
      {"leaky_step", [](const std::string& x, const std::string& p) { return "(" + p + " + (acc_t(1) - " + p + ") * static_cast<acc_t>(" + x + " > acc_t(0)))"; }},
      {"pow", [=](const std::string& x, const std::string& p) { return cu + "pow_acc(" + x + ", " + p + ")"; }},
      {"dpow",
       [=](const std::string& x, const std::string& p) {
         return "(" + p + " == acc_t(0) ? acc_t(0) : " + p + " * " + cu + "pow_acc(" + x + ", " + p + " - acc_t(1)))";
       }},
      {"d2pow",
       [=](const std::string& x, const std::string& p) {
         return "(" + p + " == acc_t(0) || " + p + " == acc_t(1) ? acc_t(0) : " + p + " * (" + p + " - acc_t(1)) * " + cu + "pow_acc(" + x +
                ", " + p + " - acc_t(2)))";
       }},
  };
  for (auto& f : t) {
    auto it = cuda.find(f.name);
    if (it != cuda.end()) f.cuda = it->second;
  }
}

std::vector<Function> make_functions() {
  std::vector<Function> t;
  t.push_back(fn(
      "exp", false, [](const Expr&, const G& g) { return Derivative{1, {call("exp", g())}}; },
      [](const std::string& x, const std::string&) { return "runtime::exp_acc(" + x + ")"; }, true));
  t.push_back(fn(
      "log", false, [](const Expr&, const G& g) { return Derivative{1, {binary('/', constant(1), g())}}; },
      [](const std::string& x, const std::string&) { return "std::log(" + x + ")"; }, true));
  t.push_back(fn(
      "relu", false, [](const Expr&, const G& g) { return Derivative{1, {call("step", g())}}; },
      [](const std::string& x, const std::string&) { return "std::max(" + x + ", acc_t(0))"; }));
  t.push_back(fn(
      "sigmoid", false,
      [](const Expr&, const G& g) {
        ExprP s1 = call("sigmoid", g());
        return Derivative{1, {s1, binary('-', constant(1), call("sigmoid", g()))}};
      },
      [](const std::string& x, const std::string&) { return "acc_t(1) / (acc_t(1) + std::exp(-(" + x + ")))"; }));
  t.push_back(fn(
      "tanh", false,
      [](const Expr&, const G& g) {
        ExprP t1 = call("tanh", g());
        ExprP t2 = call("tanh", g());
        return Derivative{1, {binary('-', constant(1), binary('*', t1, t2))}};
      },
      [](const std::string& x, const std::string&) { return "std::tanh(" + x + ")"; }));
  // Branch-free forms: the signs of attention logits are data, a branch on them mispredicts.
  t.push_back(fn(
      "step", false, [](const Expr&, const G&) { return Derivative{0, {}}; },  // piecewise constant
      [](const std::string& x, const std::string&) { return "static_cast<acc_t>(" + x + " > acc_t(0))"; }));
  t.push_back(fn(
      "leaky_relu", true, [](const Expr& f, const G& g) { return Derivative{1, {call("leaky_step", g(), f.value, f.param_arg)}}; },
      [](const std::string& x, const std::string& p) { return "(std::max(" + x + ", acc_t(0)) + " + p + " * std::min(" + x + ", acc_t(0)))"; }));
  t.push_back(fn(
      "leaky_step", true, [](const Expr&, const G&) { return Derivative{0, {}}; },  // piecewise constant
      [](const std::string& x, const std::string& p) { return "(" + p + " + (acc_t(1) - " + p + ") * static_cast<acc_t>(" + x + " > acc_t(0)))"; }));
  t.push_back(fn(
      "pow", true,
      [](const Expr& f, const G& g) {
        // An argument exponent p is known at run time only: p * pow(x, p - 1) is dpow(x, p).
        if (!f.param_arg.empty()) return Derivative{1, {call("dpow", g(), f.value, f.param_arg)}};
        if (f.value == 0) return Derivative{0, {}};
        if (f.value == 1) return Derivative{1, {}};
        if (f.value == 2) return Derivative{2, {g()}};
        return Derivative{f.value, {call("pow", g(), f.value - 1)}};
      },
      [](const std::string& x, const std::string& p) { return "std::pow(" + x + ", " + p + ")"; }, true));
  // pow's first and second derivatives in x for an exponent p (a float argument): p * x^(p-1)
  // and p (p-1) x^(p-2), zero where their coefficient is (as torch.pow's backward: no 0 * inf at
  // x = 0). Differentiation ends at d2pow, which a grad_order of at most 2 never differentiates.
  t.push_back(fn(
      "dpow", true, [](const Expr& f, const G& g) { return Derivative{1, {call("d2pow", g(), f.value, f.param_arg)}}; },
      [](const std::string& x, const std::string& p) {
        return "(" + p + " == acc_t(0) ? acc_t(0) : " + p + " * std::pow(" + x + ", " + p + " - acc_t(1)))";
      },
      true));
  t.push_back(fn(
      "d2pow", true, nullptr,
      [](const std::string& x, const std::string& p) {
        return "(" + p + " == acc_t(0) || " + p + " == acc_t(1) ? acc_t(0) : " + p + " * (" + p + " - acc_t(1)) * std::pow(" + x + ", " + p +
               " - acc_t(2)))";
      },
      true));
  Function detach;
  detach.name = "detach";
  detach.detach = true;
  t.push_back(detach);
  cuda_spellings(t);
  return t;
}

}  // namespace

const std::vector<Function>& functions() {
  static const std::vector<Function> table = make_functions();
  return table;
}

const Function* find_function(const std::string& name) {
  for (auto& f : functions())
    if (f.name == name) return &f;
  return nullptr;
}

std::string spell_function(const std::string& name, Target target, const std::string& x, const std::string& p) {
  const Function* f = find_function(name);
  if (f && target == Target::Cpu && f->cpu) return f->cpu(x, p);
  if (f && target == Target::Cuda && f->cuda) return f->cuda(x, p);
  throw SpecError("internal error: no " + std::string(target_info(target).name) + " spelling of function " + name);
}

const std::vector<DTypeInfo>& dtypes() {
  static const std::vector<DTypeInfo> table{
      {"float32", false, "float", "runtime::DType::Float32", "kFloat32"},
      {"float64", false, "double", "runtime::DType::Float64", "kFloat64"},
      {"bfloat16", false, "runtime::bfloat16", "runtime::DType::BFloat16", "kBFloat16"},
      {"float16", false, "runtime::float16", "runtime::DType::Float16", "kFloat16"},
      {"int32", true, "int32_t", "runtime::IType::Int32", ""},
      {"int64", true, "int64_t", "runtime::IType::Int64", ""},
  };
  return table;
}

namespace {

constexpr size_t kFloating = 4;  // DType's values, before IndexType's in the table

// The entry of `text` among the table's floating (index false) or index dtypes, numbered from
// the first of its kind.
std::optional<size_t> find_dtype(const std::string& text, bool index) {
  const auto& t = dtypes();
  for (size_t k = 0; k < t.size(); ++k)
    if (t[k].name == text && t[k].index == index) return index ? k - kFloating : k;
  return std::nullopt;
}

template <typename T>
std::string join_names(const std::vector<T>& v) {
  std::string r;
  for (auto& x : v) r += (r.empty() ? "" : " ") + to_string(x);
  return r;
}

struct ReduceInfo {
  Reduce reduce;
  std::string name;      // in a spec (`reduce`, max[j](e))
  std::string identity;  // where an accumulator starts
};

// In the order of Reduce.
const std::vector<ReduceInfo>& reduces() {
  static const std::vector<ReduceInfo> table{
      {Reduce::Sum, "sum", "0"},
      {Reduce::Max, "max", "-inf"},
      {Reduce::Min, "min", "inf"},
  };
  return table;
}

}  // namespace

const DTypeInfo& info(DType d) { return dtypes().at(static_cast<size_t>(d)); }
const DTypeInfo& info(IndexType i) { return dtypes().at(kFloating + static_cast<size_t>(i)); }
std::string to_string(DType d) { return info(d).name; }
std::string to_string(IndexType i) { return info(i).name; }

std::optional<DType> parse_dtype(const std::string& text) {
  if (auto k = find_dtype(text, false)) return static_cast<DType>(*k);
  return std::nullopt;
}

std::optional<IndexType> parse_index_type(const std::string& text) {
  if (auto k = find_dtype(text, true)) return static_cast<IndexType>(*k);
  return std::nullopt;
}

std::string dtypes_line(const std::vector<DType>& ds) { return join_names(ds); }
std::string dtypes_line(const std::vector<IndexType>& is) { return join_names(is); }

std::string to_string(Reduce r) { return reduces().at(static_cast<size_t>(r)).name; }
std::string identity(Reduce r) { return reduces().at(static_cast<size_t>(r)).identity; }

std::optional<Reduce> parse_reduce(const std::string& text) {
  for (auto& r : reduces())
    if (r.name == text) return r.reduce;
  return std::nullopt;
}

}  // namespace gnnfuse::codegen
