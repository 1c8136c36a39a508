// The spec language's built-ins, one table each, read by every stage that needs them:
//   functions  name, arity, parameter, derivative, spelling per target: the parser (frontend),
//              the decomposition (detach), autodiff (the derivative), autocast (float32 ops) and
//              the kernel printers (the spelling)
//   reduces    name, identity: the parser, the decomposition and the printers
//   dtypes     name, C++ type, runtime tag, checks:: flag: the parser and the emitters
// A spec names them by their text (print_spec round trip); the tables are the one place that
// says what each one is.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- element-wise functions
// f'(g) as a coefficient times factors (coeff 0: the derivative vanishes).
struct Derivative {
  double coeff = 1;
  std::vector<ExprP> factors;
};

struct Function {
  std::string name;
  int arity = 1;            // expression arguments
  bool takes_param = false;  // and a constant parameter: a number or a schema `float` argument
  // detach: the argument itself in the forward, with a zero derivative (autodiff does not
  // differentiate through it); no derivative or spelling of its own.
  bool detach = false;
  // Under torch.autocast an op applying it runs in float32, like a softmax (exp, log, pow).
  bool float32_under_autocast = false;
  // f'(g) for the call `f` (its parameter); `g()` returns a fresh copy of the argument for each
  // factor that reads it.
  std::function<Derivative(const Expr& f, const std::function<ExprP()>& g)> derivative;
  // Spelling per target: a C++ expression over `x` (the argument, of type acc_t) and `p` (the
  // parameter). The cuda spelling goes beside the cpu one (helpers of cuda/device_runtime.cuh).
  std::function<std::string(const std::string& x, const std::string& p)> cpu;
  std::function<std::string(const std::string& x, const std::string& p)> cuda;
};

const std::vector<Function>& functions();
// nullptr for a name that is not a function.
const Function* find_function(const std::string& name);
// The spelling of `fn` for `target` (SpecError where the target has none).
std::string spell_function(const std::string& fn, Target target, const std::string& x, const std::string& p);

// Expression builders (the derivative table and autodiff build expressions with them).
ExprP make_expr(Expr e);
ExprP constant(double v);
ExprP binary(char op, ExprP a, ExprP b);
ExprP call(const std::string& fn, ExprP arg, std::optional<double> param = std::nullopt, const std::string& param_arg = "");

// ---------------------------------------------------------------- dtypes
// The enums' spec text (to_string, parse_dtype, parse_index_type in ir.h) comes from here.
struct DTypeInfo {
  std::string name;     // in a spec: float32, float64, bfloat16, float16 (`dtypes`); int32, int64 (`index`)
  bool index = false;   // an index dtype
  std::string ctype;    // C++ type in the kernels
  std::string runtime;  // runtime::DType / runtime::IType tag
  std::string check;    // checks:: flag of the dtype masks (floating dtypes)
};
// In the order of DType, then of IndexType.
const std::vector<DTypeInfo>& dtypes();
const DTypeInfo& info(DType d);
const DTypeInfo& info(IndexType i);
// A spec's `dtypes` / `index` line: the names separated by spaces.
std::string dtypes_line(const std::vector<DType>& ds);
std::string dtypes_line(const std::vector<IndexType>& is);

}  // namespace gnnfuse::codegen
