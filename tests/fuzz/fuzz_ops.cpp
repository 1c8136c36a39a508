// Fuzz target: every op registered in the gnnfuse namespace, called through c10::Dispatcher.
//
// The ops are enumerated from the dispatcher (a new spec's ops, derived adjoints and the
// symbolic/assembling forms included, without editing this file). Arguments are built from each
// op's schema: where a spec names the op (ops/*.spec and tests/codegen/specs, compiled with the
// generator's own front end, adjoints included) the arguments follow its roles: index extents
// chosen at random (0 to a few hundred), valid CSRs over them (sorted, duplicates sometimes,
// `single` ones with one entry per row, CSC views that match), dense, per-edge and position
// tensors of the shapes the extents give, the extent ints. Ops without a spec (the graph-format
// and control ops) get arguments from their names and types. Most calls then change one thing
// (an index one past its extent, negative or huge; a dtype among float32/64, bfloat16, float16,
// int32/64 and bool; a size; the device to meta; an optional tensor dropped or added; an int
// negative or huge; an undefined tensor), so the fuzzer gets past the first check into the
// kernels; some stay valid, some run on meta tensors (the Meta kernels), some record gradients
// and run the backward (and sometimes the double backward) through the generated autograd.
//
// What may come out: success, or a c10::Error naming the op ("gnnfuse::<op>: ..."; where it
// says "argument '<name>'", <name> must be an argument of the op's schema). A success on CPU is
// repeated on meta copies of the arguments (ops with a Meta kernel): the Meta kernel must accept
// them and give the same shapes and dtypes. A backward after a successful forward may only
// refuse an order of derivative the spec does not generate. Anything else (another exception,
// an error naming nothing or another op, a crash, a sanitizer report) is a finding: the harness
// prints it, writes a Python reproducer to fuzz-ops-repro.py and aborts (the driver then writes
// the input to fuzz-crash-input; `fuzz_ops 0 fuzz-crash-input` replays it, and with
// GNNFUSE_FUZZ_REPRO=1 writes the reproducer before every call, for crashes).
//
//   fuzz_ops <seconds> [inputs...]        (the built-in driver: driver.h)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include "codegen/ir.h"
#include "driver.h"

namespace {

using gnnfuse::codegen::OpSpec;
using gnnfuse::codegen::Role;
using gnnfuse::codegen::TensorDecl;

// ---------------------------------------------------------------- choices
// Every choice reads one input byte while they last (so libFuzzer's mutations steer them), then
// a PRNG seeded by the input: an input is one call, replayed exactly.
class Rng {
 public:
  Rng(const uint8_t* data, size_t size) : data_(data), size_(size), prng_(seed(data, size)) {}
  uint64_t below(uint64_t k) {
    if (k <= 1) return 0;
    if (pos_ < size_ && k <= 256) return data_[pos_++] % k;
    return prng_() % k;
  }
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1)); }
  bool chance(int percent) { return below(100) < static_cast<uint64_t>(percent); }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(prng_); }

 private:
  static uint64_t seed(const uint8_t* d, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < n; ++k) h = (h ^ d[k]) * 1099511628211ull;
    return h;
  }
  const uint8_t* data_;
  size_t size_, pos_ = 0;
  std::mt19937_64 prng_;
};

// ---------------------------------------------------------------- the ops
struct OpInfo {
  std::string name;  // without the namespace
  c10::OperatorHandle handle;
  const OpSpec* spec;  // the spec whose roles its arguments have (its own, or its family's for _symbolic / _assemble)
  bool meta;           // has a Meta kernel
};

std::map<std::string, OpSpec>& specs() {
  static std::map<std::string, OpSpec> s;
  return s;
}

void load_specs() {
  for (const char* dir : {GNNFUSE_OPS_DIR, GNNFUSE_TEST_SPECS_DIR})
    for (auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() != ".spec") continue;
      try {
        gnnfuse::codegen::Family f = gnnfuse::codegen::compile_family(gnnfuse::codegen::load_spec(e.path().string()));
        for (auto& c : f.ops) specs()[c->spec.name] = c->spec;
        const OpSpec& user = f.ops[0]->spec;
        if (!user.symbolic.empty()) {
          specs()[user.name + "_symbolic"] = user;
          specs()[user.name + "_assemble"] = user;
        }
      } catch (const gnnfuse::codegen::SpecError& err) {
        std::fprintf(stderr, "fuzz_ops: %s is not a spec the generator compiles (%s): its ops get schema-only arguments\n",
                     e.path().c_str(), err.what());
      }
    }
}

std::vector<OpInfo>& ops() {
  static std::vector<OpInfo> all = [] {
    load_specs();
    std::vector<OpInfo> out;
    for (const c10::OperatorName& n : c10::Dispatcher::singleton().getAllOpNames()) {
      if (n.name.rfind("gnnfuse::", 0) != 0) continue;
      auto h = c10::Dispatcher::singleton().findSchema(n);
      if (!h) continue;
      const std::string name = n.name.substr(9);
      auto it = specs().find(name);
      out.push_back(OpInfo{name, *h, it == specs().end() ? nullptr : &it->second, h->hasKernelForDispatchKey(c10::DispatchKey::Meta)});
    }
    std::sort(out.begin(), out.end(), [](const OpInfo& a, const OpInfo& b) { return a.name < b.name; });
    return out;
  }();
  return all;
}

// ---------------------------------------------------------------- arguments
// What an argument is, for the mutations.
struct Arg {
  enum Kind { Index, Floating, Int, Float, Bool, Str, Other } kind = Other;
  int64_t bound = 0;  // Index: one past the largest valid value; Int: the valid value
  // Index: every value outside [low, bound) must be refused (columns whose extent something
  // binds, CSC rows and positions, max/min positions (low -1), edge_index, an order).
  bool strict = false;
  int64_t low = 0;
};

struct Call {
  std::vector<c10::IValue> args;
  std::vector<Arg> info;
  bool autograd = false, double_backward = false, all_meta = false;
  std::vector<std::string> changes;  // what was mutated (for the report)
  // (argument, position) of strict index values set outside their range
  std::set<std::pair<size_t, int64_t>> out_of_range;
  bool ranges_changed = false;  // a size or an extent changed: the ranges above may not hold
  void forget(size_t k) {  // argument k replaced whole
    for (auto it = out_of_range.begin(); it != out_of_range.end();) it = it->first == k ? out_of_range.erase(it) : std::next(it);
  }
};

at::ScalarType dtype_named(const std::string& d) {
  if (d == "float64") return at::kDouble;
  if (d == "bfloat16") return at::kBFloat16;
  if (d == "float16") return at::kHalf;
  if (d == "int32") return at::kInt;
  if (d == "int64") return at::kLong;
  return at::kFloat;
}

at::Tensor index_tensor(const std::vector<int64_t>& v, at::ScalarType itype) {
  return at::tensor(v, at::kLong).to(itype);
}

at::Tensor floating(Rng& r, at::IntArrayRef shape, at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::kDouble);
  double* p = t.data_ptr<double>();
  for (int64_t k = 0; k < t.numel(); ++k) {
    const uint64_t special = r.below(200);
    p[k] = special == 0 ? std::numeric_limits<double>::quiet_NaN() : special == 1 ? std::numeric_limits<double>::infinity() : r.normal();
  }
  return t.to(dtype);
}

// A CSR over rows x cols: sorted columns per row, distinct unless `duplicates`; `single`: one per row.
struct Pattern {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> rowptr{0}, col;
  std::vector<int64_t> colptr, row, perm;  // the CSC view
  int64_t nnz() const { return static_cast<int64_t>(col.size()); }
};

Pattern random_pattern(Rng& r, int64_t rows, int64_t cols, bool single, bool duplicates) {
  Pattern p;
  p.rows = rows;
  p.cols = cols;
  const int64_t max_len = cols == 0 ? 0 : r.chance(20) ? cols : std::min<int64_t>(cols, 4);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<int64_t> c;
    if (single) {
      c.push_back(r.range(0, cols - 1));
    } else {
      const int64_t len = r.range(0, max_len);
      for (int64_t k = 0; k < len; ++k) c.push_back(r.range(0, cols - 1));
      std::sort(c.begin(), c.end());
      if (!duplicates) c.erase(std::unique(c.begin(), c.end()), c.end());
    }
    p.col.insert(p.col.end(), c.begin(), c.end());
    p.rowptr.push_back(p.nnz());
  }
  // The CSC view as gnnfuse::csr_transpose makes it: positions stably sorted by column.
  p.colptr.assign(static_cast<size_t>(cols) + 1, 0);
  for (int64_t c : p.col) ++p.colptr[static_cast<size_t>(c) + 1];
  for (int64_t j = 0; j < cols; ++j) p.colptr[j + 1] += p.colptr[j];
  std::vector<int64_t> next(p.colptr.begin(), p.colptr.end() - 1);
  p.row.resize(p.col.size());
  p.perm.resize(p.col.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t q = p.rowptr[i]; q < p.rowptr[i + 1]; ++q) {
      const int64_t d = next[static_cast<size_t>(p.col[q])]++;
      p.row[d] = i;
      p.perm[d] = q;
    }
  return p;
}

// Union-find over the index names of a spec: names a dense operand is read with, renamed
// columns and the output's indices share their declared index's extent.
struct Classes {
  std::map<std::string, std::string> parent;
  std::string find(const std::string& v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return parent[v] = v;
    return it->second = find(it->second);
  }
  void unite(const std::string& a, const std::string& b) { parent[find(a)] = find(b); }
};

void unite_accesses(const gnnfuse::codegen::ExprP& e, const OpSpec& s, Classes& cl) {
  if (e->kind == gnnfuse::codegen::Expr::Kind::Access)
    if (const TensorDecl* t = s.find(e->name))
      for (size_t d = 0; d < e->idx.size() && d < t->vars.size(); ++d) cl.unite(e->idx[d], t->vars[d]);
  for (auto& a : e->args) unite_accesses(a, s, cl);
}

// Valid arguments of an op whose spec is known.
void build_from_spec(const OpInfo& op, Rng& r, Call& call) {
  const OpSpec& s = *op.spec;
  Classes cl;
  for (auto& v : s.order) cl.find(v);
  for (auto& t : s.tensors)
    for (auto& v : t.vars) cl.find(v);
  unite_accesses(s.expr.rhs, s, cl);
  if (const TensorDecl* out = s.find(s.expr.lhs))
    for (size_t d = 0; d < s.expr.lhs_idx.size() && d < out->vars.size(); ++d) cl.unite(s.expr.lhs_idx[d], out->vars[d]);
  // The index classes whose extent something binds (`extent` lines, dense operands, edge
  // operands' extra dimensions, csr rows, required CSC views): columns over them must be in range.
  std::set<std::string> bound;
  for (auto& [v, a] : s.extents) bound.insert(cl.find(v));
  for (auto& t : s.tensors) {
    if (t.role == Role::DenseInput)
      for (auto& v : t.vars) bound.insert(cl.find(v));
    if (t.role == Role::EdgeInput)
      for (size_t d = 2; d < t.vars.size(); ++d) bound.insert(cl.find(t.vars[d]));
    if (t.role == Role::SparseInput) bound.insert(cl.find(t.vars[0]));
    if (t.role == Role::SparseInput && t.has_csc() && !t.csc_optional) bound.insert(cl.find(t.vars[1]));
  }
  // Extents: small, one class sometimes large (parallel row loops, several tasks).
  std::map<std::string, int64_t> size;
  std::vector<std::string> roots;
  for (auto& [v, p] : cl.parent)
    if (cl.find(v) == v) roots.push_back(v);
  for (auto& v : roots) size[v] = r.chance(8) ? 0 : r.range(1, 6);
  if (!roots.empty() && r.chance(15)) size[roots[r.below(roots.size())]] = r.range(32, 300);
  auto n = [&](const std::string& v) -> int64_t& { return size[cl.find(v)]; };
  for (auto& t : s.tensors)  // one entry per row needs a column to hold it
    if (t.role == Role::SparseInput && t.single && n(t.vars[0]) > 0 && n(t.vars[1]) == 0) n(t.vars[1]) = 1;
  const at::ScalarType dtype = dtype_named(to_string(s.dtypes[r.below(s.dtypes.size())]));
  const at::ScalarType acc = dtype == at::kBFloat16 || dtype == at::kHalf ? at::kFloat : dtype;
  const at::ScalarType itype = dtype_named(to_string(s.index_dtypes[r.below(s.index_dtypes.size())]));
  std::map<std::string, Pattern> pat;
  const bool duplicates = r.chance(15);
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput)
      pat[t.name] = random_pattern(r, n(t.vars[0]), n(t.vars[1]), t.single, duplicates && t.name != s.symbolic);
  for (auto& a : op.handle.schema().arguments()) {
    const std::string& name = a.name();
    c10::IValue v;
    Arg info;
    bool found = false;
    for (auto& t : s.tensors) {
      if (t.role == Role::SparseInput) {
        const Pattern& p = pat[t.name];
        found = true;
        if (name == t.rowptr) v = index_tensor(p.rowptr, itype), info = {Arg::Index, p.nnz() + 1};
        else if (name == t.col) v = index_tensor(p.col, itype), info = {Arg::Index, p.cols, bound.count(cl.find(t.vars[1])) > 0};
        else if (name == t.values) v = floating(r, {p.nnz()}, dtype), info = {Arg::Floating, 0};
        else if (name == t.colptr) v = index_tensor(p.colptr, itype), info = {Arg::Index, p.nnz() + 1};
        else if (name == t.row) v = index_tensor(p.row, itype), info = {Arg::Index, p.rows, true};
        else if (name == t.perm) v = index_tensor(p.perm, at::kLong), info = {Arg::Index, p.nnz(), true};
        else found = false;
      } else if ((t.role == Role::DenseInput || t.role == Role::EdgeInput || t.role == Role::SelectInput) && name == t.arg) {
        found = true;
        std::vector<int64_t> shape;
        if (t.role == Role::EdgeInput) shape.push_back(pat[t.pattern].nnz());
        for (size_t d = t.role == Role::EdgeInput ? 2 : 0; d < t.vars.size(); ++d)
          if (!(t.role == Role::SelectInput && d == 1)) shape.push_back(n(t.vars[d]));
        if (t.role == Role::SelectInput) {
          // Per (row, rest): a position in the row of the pattern, or -1.
          const Pattern& p = pat[t.pattern];
          at::Tensor sel = at::empty(shape, at::kLong);
          int64_t* q = sel.data_ptr<int64_t>();
          const int64_t inner = shape.empty() || shape[0] == 0 ? 0 : sel.numel() / shape[0];
          for (int64_t k = 0; k < sel.numel(); ++k) {
            const int64_t i = k / std::max<int64_t>(inner, 1);
            const int64_t len = p.rowptr[i + 1] - p.rowptr[i];
            q[k] = len == 0 || r.chance(10) ? -1 : p.rowptr[i] + r.range(0, len - 1);
          }
          v = sel, info = {Arg::Index, p.nnz(), true, -1};
        } else {
          v = floating(r, shape, t.acc ? acc : dtype), info = {Arg::Floating, 0};
        }
      }
      if (found) break;
    }
    if (!found)
      for (auto& [var, arg] : s.extents)
        if (arg == name) v = n(var), info = {Arg::Int, n(var)}, found = true;
    if (!found) {
      const c10::TypePtr& ty = a.type();
      if (ty->kind() == c10::TypeKind::FloatType) v = r.chance(80) ? 0.2 : r.normal(), info.kind = Arg::Float;
      else if (ty->kind() == c10::TypeKind::BoolType) v = r.chance(50), info.kind = Arg::Bool;
      else if (ty->kind() == c10::TypeKind::IntType) v = r.range(0, 4), info = {Arg::Int, 0};
      else v = c10::IValue();  // an argument the spec does not describe: None
    }
    // An optional argument (a CSC cache, edge weights) is given most of the time.
    if (a.type()->kind() == c10::TypeKind::OptionalType && !v.isNone() && r.chance(30)) v = c10::IValue();
    call.args.push_back(v);
    call.info.push_back(info);
  }
}

// Arguments of an op without a spec (the graph-format and control ops), from their names and types.
void build_from_schema(const OpInfo& op, Rng& r, Call& call) {
  const auto& args = op.handle.schema().arguments();
  const at::ScalarType itype = r.chance(50) ? at::kInt : at::kLong;
  const int64_t nodes = r.chance(10) ? 0 : r.chance(15) ? r.range(32, 300) : r.range(1, 8);
  const int64_t cols = r.chance(50) ? nodes : r.range(0, 8);
  bool square = false;
  for (auto& a : args) square = square || a.name() == "order";
  const Pattern p = random_pattern(r, nodes, square ? nodes : cols, false, r.chance(20));
  for (auto& a : args) {
    const std::string& name = a.name();
    // An optional argument takes a value of its element type (or None below).
    const bool optional = a.type()->kind() == c10::TypeKind::OptionalType;
    const c10::TypeKind kind =
        optional ? a.type()->castRaw<c10::OptionalType>()->getElementType()->kind() : a.type()->kind();
    c10::IValue v;
    Arg info;
    if (name == "edge_index") {
      const int64_t e = r.range(0, 3 * nodes);
      std::vector<int64_t> ei(static_cast<size_t>(2 * e));
      for (auto& x : ei) x = r.range(0, std::max<int64_t>(nodes - 1, 0));
      if (nodes == 0) ei.clear();
      v = index_tensor(ei, itype).view({2, nodes == 0 ? 0 : e}), info = {Arg::Index, nodes, true};
    } else if (name == "num_nodes") {
      v = nodes, info = {Arg::Int, nodes};
    } else if (name == "num_dst_nodes") {
      // (The index range the mutations test is one per tensor: the targets' bound is num_nodes too.
      // Bipartite bounds per row: tests/python/test_review_findings.py.)
      v = nodes, info = {Arg::Int, nodes};
    } else if (name == "num_cols") {
      v = p.cols, info = {Arg::Int, p.cols};
    } else if (name == "rowptr") {
      v = index_tensor(p.rowptr, itype), info = {Arg::Index, p.nnz() + 1};
    } else if (name == "col") {
      v = index_tensor(p.col, itype), info = {Arg::Index, p.cols, true};
    } else if (name == "edge_weight") {
      v = floating(r, {p.nnz()}, r.chance(50) ? at::kFloat : at::kDouble), info.kind = Arg::Floating;
    } else if (name == "order") {
      std::vector<int64_t> o(static_cast<size_t>(nodes));
      std::iota(o.begin(), o.end(), 0);
      for (size_t k = o.size(); k > 1; --k) std::swap(o[k - 1], o[r.below(k)]);
      v = index_tensor(o, at::kLong), info = {Arg::Index, nodes, true};
    } else if (kind == c10::TypeKind::StringType) {
      // An op name: one that exists (maybe with lowerings), or not.
      v = r.chance(80) ? ops()[r.below(ops().size())].name : std::string("no_such_op"), info.kind = Arg::Str;
    } else if (kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType) {
      v = r.range(-1, 3), info = {Arg::Int, 0};
    } else if (kind == c10::TypeKind::FloatType) {
      v = r.normal(), info.kind = Arg::Float;
    } else if (kind == c10::TypeKind::BoolType) {
      v = r.chance(50), info.kind = Arg::Bool;
    } else if (kind == c10::TypeKind::TensorType) {
      v = floating(r, {r.range(0, 4)}, at::kFloat), info.kind = Arg::Floating;
    }
    if (optional && r.chance(30)) v = c10::IValue();
    call.args.push_back(v);
    call.info.push_back(info);
  }
}

// ---------------------------------------------------------------- mutations
// A valid but huge extent: allocations sized by it fail, which the op must report by name. Under
// AddressSanitizer a failed operator new aborts the process instead of throwing, so there the
// extent is large but allocatable.
#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kHugeExtent = int64_t{1} << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int64_t kHugeExtent = int64_t{1} << 20;
#else
constexpr int64_t kHugeExtent = int64_t{1} << 40;
#endif
#else
constexpr int64_t kHugeExtent = int64_t{1} << 40;
#endif

at::Tensor noncontiguous(const at::Tensor& t) {
  if (t.dim() == 0) return t;
  std::vector<int64_t> wide(t.sizes().begin(), t.sizes().end());
  wide.back() *= 2;
  at::Tensor w = at::empty(wide, t.options());
  at::Tensor v = w.slice(t.dim() - 1, 0, wide.back(), 2);
  v.copy_(t);
  return v;
}

// A tensor of `shape` like `t`: index values below `bound`, or floating values.
at::Tensor refill(Rng& r, const at::Tensor& t, at::IntArrayRef shape, const Arg& info) {
  if (info.kind == Arg::Index) {
    std::vector<int64_t> v(static_cast<size_t>(c10::multiply_integers(shape)));
    for (auto& x : v) x = r.range(0, std::max<int64_t>(info.bound, 1) - 1);
    return at::tensor(v, at::kLong).to(t.scalar_type()).view(shape);
  }
  return floating(r, shape, t.scalar_type());
}

const at::ScalarType kDtypes[] = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong, at::kBool};
const char* kDtypeNames[] = {"float32", "float64", "bfloat16", "float16", "int32", "int64", "bool"};

void mutate(Rng& r, Call& c, const OpInfo& op) {
  std::vector<size_t> tensors, indices, ints;
  for (size_t k = 0; k < c.args.size(); ++k) {
    if (c.args[k].isTensor() && c.args[k].toTensor().defined()) {
      tensors.push_back(k);
      const at::Tensor& t = c.args[k].toTensor();
      if (c.info[k].kind == Arg::Index && t.numel() > 0 && !t.is_meta() && (t.scalar_type() == at::kInt || t.scalar_type() == at::kLong))
        indices.push_back(k);
    }
    if (c.args[k].isInt()) ints.push_back(k);
  }
  auto pick = [&](const std::vector<size_t>& v) { return v[r.below(v.size())]; };
  switch (r.below(10)) {
    case 0:
    case 1:
    case 2: {  // an index value: one past the end, negative, huge, off by one
      if (indices.empty()) break;
      const size_t k = pick(indices);
      at::Tensor t = c.args[k].toTensor().clone();
      const int64_t at_ = r.range(0, t.numel() - 1);
      const bool i32 = t.scalar_type() == at::kInt;
      const int64_t cur = t.view({-1})[at_].item<int64_t>();
      const int64_t choices[] = {c.info[k].bound,
                                 -1,
                                 i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max(),
                                 i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min(),
                                 cur == std::numeric_limits<int64_t>::max() ? cur : cur + 1,
                                 cur == std::numeric_limits<int64_t>::min() ? cur : cur - 1,
                                 c.info[k].bound + 1};
      const int64_t value = i32 ? std::clamp<int64_t>(choices[r.below(7)], std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max())
                                : choices[r.below(7)];
      t.view({-1})[at_].fill_(value);
      c.args[k] = t;
      if (c.info[k].strict && (value < c.info[k].low || value >= c.info[k].bound)) c.out_of_range.insert({k, at_});
      else c.out_of_range.erase({k, at_});
      c.changes.push_back("argument " + std::to_string(k) + "[" + std::to_string(at_) + "] = " + std::to_string(value));
      break;
    }
    case 3: {  // a dtype
      if (tensors.empty()) break;
      const size_t k = pick(tensors);
      const size_t d = r.below(7);
      c.args[k] = c.args[k].toTensor().to(kDtypes[d]);
      c.forget(k);
      c.changes.push_back("argument " + std::to_string(k) + " as " + kDtypeNames[d]);
      break;
    }
    case 4: {  // a size: one dimension one more or less, a dimension more or less
      if (tensors.empty()) break;
      const size_t k = pick(tensors);
      const at::Tensor t = c.args[k].toTensor();
      std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
      const uint64_t how = r.below(4);
      if (how == 0 && !shape.empty()) shape.pop_back();
      else if (how == 1) shape.push_back(r.range(1, 2));
      else if (!shape.empty()) {
        int64_t& s = shape[r.below(shape.size())];
        s = std::max<int64_t>(0, s + (r.chance(50) ? 1 : -1));
      }
      c.args[k] = refill(r, t, shape, c.info[k]);
      c.ranges_changed = true;  // a size may widen another argument's range
      c.changes.push_back("argument " + std::to_string(k) + " resized");
      break;
    }
    case 5: {  // a device
      if (tensors.empty()) break;
      const size_t k = pick(tensors);
      c.args[k] = c.args[k].toTensor().to(at::kMeta);
      c.forget(k);
      c.changes.push_back("argument " + std::to_string(k) + " on meta");
      break;
    }
    case 6: {  // an optional tensor dropped or given
      const auto& sa = op.handle.schema().arguments();
      std::vector<size_t> opt;
      for (size_t k = 0; k < sa.size(); ++k)
        if (sa[k].type()->kind() == c10::TypeKind::OptionalType &&
            sa[k].type()->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType)
          opt.push_back(k);
      if (opt.empty()) break;
      const size_t k = pick(opt);
      c.forget(k);
      if (c.args[k].isNone()) {
        c.args[k] = refill(r, at::empty({0}, at::kLong), {r.range(0, 6)}, Arg{Arg::Index, 4});
        c.changes.push_back("argument " + std::to_string(k) + " given");
      } else {
        c.args[k] = c10::IValue();
        c.changes.push_back("argument " + std::to_string(k) + " None");
      }
      break;
    }
    case 7: {  // an int: negative, huge, off by one
      if (ints.empty()) break;
      const size_t k = pick(ints);
      const int64_t v = c.args[k].toInt();
      const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
      const int64_t choices[] = {-1, v == big ? v : v + 1, v == small ? v : v - 1, kHugeExtent, big, small, 0};
      c.args[k] = choices[r.below(7)];
      c.ranges_changed = true;  // an extent may widen an index's range
      c.changes.push_back("argument " + std::to_string(k) + " = " + std::to_string(c.args[k].toInt()));
      break;
    }
    case 8: {  // a layout (valid): non-contiguous
      if (tensors.empty()) break;
      const size_t k = pick(tensors);
      c.args[k] = noncontiguous(c.args[k].toTensor());
      c.changes.push_back("argument " + std::to_string(k) + " non-contiguous");
      break;
    }
    default: {  // an undefined tensor (C++ callers can pass one)
      if (tensors.empty()) break;
      const size_t k = pick(tensors);
      c.args[k] = at::Tensor();
      c.forget(k);
      c.changes.push_back("argument " + std::to_string(k) + " undefined");
    }
  }
}

// ---------------------------------------------------------------- the reproducer
std::string py_dtype(at::ScalarType s) {
  for (size_t k = 0; k < 7; ++k)
    if (kDtypes[k] == s) return std::string("torch.") + kDtypeNames[k];
  return std::string("torch.") + c10::toString(s);
}

std::string py_shape(at::IntArrayRef s) {
  std::string out = "(";
  for (size_t k = 0; k < s.size(); ++k) out += std::to_string(s[k]) + (s.size() == 1 ? "," : k + 1 < s.size() ? ", " : "");
  return out + ")";
}

std::string py_double(double v) {
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string py_tensor(const at::Tensor& t) {
  if (!t.defined()) return "None  # C++ passed an undefined tensor here";
  if (t.is_meta()) return "torch.empty(" + py_shape(t.sizes()) + ", dtype=" + py_dtype(t.scalar_type()) + ", device='meta')";
  const bool integral = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  const at::Tensor flat = t.detach().contiguous().view({-1}).to(integral ? at::kLong : at::kDouble);
  std::string vals = "[";
  for (int64_t k = 0; k < flat.numel(); ++k)
    vals += (k ? ", " : "") + (integral ? std::to_string(flat[k].item<int64_t>()) : py_double(flat[k].item<double>()));
  vals += "]";
  std::string e = "torch.tensor(" + vals + ", dtype=" + (integral ? "torch.int64" : "torch.float64") + ").to(" + py_dtype(t.scalar_type()) +
                  ").reshape(" + py_shape(t.sizes()) + ")";
  if (!t.is_contiguous()) e = "nc(" + e + ")";
  if (t.requires_grad()) e += ".requires_grad_()";
  return e;
}

std::string py_value(const c10::IValue& v) {
  if (v.isNone()) return "None";
  if (v.isTensor()) return py_tensor(v.toTensor());
  if (v.isInt()) return std::to_string(v.toInt());
  if (v.isDouble()) return py_double(v.toDouble());
  if (v.isBool()) return v.toBool() ? "True" : "False";
  if (v.isString()) return "'" + v.toStringRef() + "'";
  return "None  # " + v.tagKind();
}

std::string reproducer(const OpInfo& op, const Call& c, const std::string& what) {
  std::ostringstream py;
  py << "# fuzz_ops finding: " << what << "\n# changes:";
  for (auto& ch : c.changes) py << " " << ch << ";";
  py << "\nimport os\nimport torch\n\ntorch.ops.load_library(os.environ.get('GNNFUSE_LIBRARY', 'build/libgnnfuse.so'))\n\n";
  py << "def nc(t):  # the same values, non-contiguous (every other element of a wider last dimension)\n";
  py << "    w = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)\n    v = w[..., ::2]\n    v.copy_(t)\n    return v\n\n";
  py << "args = [\n";
  const auto& sa = op.handle.schema().arguments();
  for (size_t k = 0; k < c.args.size(); ++k) py << "    " << py_value(c.args[k]) << ",  # " << sa[k].name() << "\n";
  py << "]\nout = torch.ops.gnnfuse." << op.name << "(*args)\n";
  if (c.autograd) {
    py << "outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if o.requires_grad]\n";
    py << "torch.manual_seed(0)\n";
    if (c.double_backward) {
      py << "ins = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]\n";
      py << "gs = torch.autograd.grad(outs, ins, [torch.randn_like(o) for o in outs], create_graph=True, allow_unused=True)\n";
      py << "sum(g.sum() for g in gs if g is not None and g.requires_grad).backward()\n";
    } else {
      py << "torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])\n";
    }
  }
  return py.str();
}

// ---------------------------------------------------------------- outcomes
struct Stats {
  long calls = 0, ok = 0, refused = 0, missing_kernel = 0, meta_checked = 0, backward = 0, double_backward = 0;
  std::map<std::string, long> per_op_calls, per_op_ok;
} stats;

const OpInfo* current_op = nullptr;
const Call* current_call = nullptr;

// GNNFUSE_FUZZ_KEEP_GOING=1 (triage): a finding is reported, its reproducer written to
// fuzz-ops-repro-<n>.py, and the run goes on (it fails at the end); crashes still end it.
struct KeepGoing {};
long findings = 0;

[[noreturn]] void finding(const std::string& what) {
  const bool keep_going = std::getenv("GNNFUSE_FUZZ_KEEP_GOING") != nullptr;
  const std::string file = keep_going ? "fuzz-ops-repro-" + std::to_string(findings) + ".py" : "fuzz-ops-repro.py";
  ++findings;
  std::fprintf(stderr, "fuzz_ops: FINDING in gnnfuse::%s: %s\n", current_op->name.c_str(), what.c_str());
  std::fprintf(stderr, "fuzz_ops: changes:");
  for (auto& ch : current_call->changes) std::fprintf(stderr, " %s;", ch.c_str());
  std::fprintf(stderr, "\n");
  std::ofstream(file) << reproducer(*current_op, *current_call, what);
  std::fprintf(stderr, "fuzz_ops: Python reproducer written to %s\n", file.c_str());
  std::fflush(stderr);
  if (keep_going) throw KeepGoing{};
  std::abort();
}

// Whether `msg` names gnnfuse::<op> (not merely an op whose name starts the same).
bool names_op(const std::string& msg, const std::string& op) {
  const std::string key = "gnnfuse::" + op;
  for (size_t at = msg.find(key); at != std::string::npos; at = msg.find(key, at + 1)) {
    const size_t end = at + key.size();
    if (end >= msg.size() || !(std::isalnum(static_cast<unsigned char>(msg[end])) || msg[end] == '_')) return true;
  }
  return false;
}

// The public op whose code a private test hook runs: _<op>_device runs <op>'s device
// implementation on CPU tensors (csrc/torch/graph_ops_device.cpp), whose errors name <op>.
std::string public_name(const std::string& name) {
  const std::string suffix = "_device";
  if (name.size() > suffix.size() + 1 && name[0] == '_' && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(1, name.size() - suffix.size() - 1);
  return name;
}

// An error of the op itself: it names the op (or the public op it implements), and the argument
// it blames is one of the op's.
void expect_named(const OpInfo& op, const c10::Error& e) {
  const std::string msg = e.what_without_backtrace();
  if (!names_op(msg, op.name) && !names_op(msg, public_name(op.name))) finding("an error that does not name the op: " + msg);
  const std::string head = "gnnfuse::" + op.name + ": argument '";
  if (msg.rfind(head, 0) == 0) {
    const size_t end = msg.find('\'', head.size());
    const std::string arg = msg.substr(head.size(), end == std::string::npos ? std::string::npos : end - head.size());
    bool known = false;
    for (auto& a : op.handle.schema().arguments()) known = known || a.name() == arg;
    if (!known) finding("the error names '" + arg + "', which is not an argument of the op: " + msg);
  }
}

std::vector<at::Tensor> tensors_of(const std::vector<c10::IValue>& stack) {
  std::vector<at::Tensor> out;
  for (auto& v : stack) {
    if (v.isTensor()) out.push_back(v.toTensor());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector()) out.push_back(t);
    if (v.isTuple())
      for (auto& e : v.toTupleRef().elements())
        if (e.isTensor()) out.push_back(e.toTensor());
  }
  return out;
}

// The CPU call again on meta copies of its arguments: the Meta kernel must accept what the CPU
// kernel accepted, with the same output shapes and dtypes.
void check_meta(const OpInfo& op, const Call& c, const std::vector<at::Tensor>& cpu_out) {
  std::vector<c10::IValue> stack;
  for (auto& v : c.args) stack.push_back(v.isTensor() && v.toTensor().defined() ? c10::IValue(v.toTensor().to(at::kMeta)) : v);
  try {
    op.handle.callBoxed(stack);
  } catch (const c10::Error& e) {
    finding(std::string("the Meta kernel refuses arguments the CPU kernel accepted: ") + e.what_without_backtrace());
  }
  const std::vector<at::Tensor> meta_out = tensors_of(stack);
  if (meta_out.size() != cpu_out.size()) finding("the Meta kernel returns another number of tensors");
  for (size_t k = 0; k < meta_out.size(); ++k)
    if (meta_out[k].sizes() != cpu_out[k].sizes() || meta_out[k].scalar_type() != cpu_out[k].scalar_type())
      finding("output " + std::to_string(k) + ": Meta kernel gives " + c10::str(meta_out[k].sizes()) + " " + c10::toString(meta_out[k].scalar_type()) +
              ", CPU kernel " + c10::str(cpu_out[k].sizes()) + " " + c10::toString(cpu_out[k].scalar_type()));
  ++stats.meta_checked;
}

void backward(const Call& c, const std::vector<at::Tensor>& outs) {
  std::vector<at::Tensor> diff, grads, inputs;
  for (auto& o : outs)
    if (o.defined() && o.requires_grad()) {
      diff.push_back(o);
      grads.push_back(at::randn(o.sizes(), o.options().requires_grad(false)));
    }
  for (auto& v : c.args)
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad()) inputs.push_back(v.toTensor());
  if (diff.empty()) return;
  try {
    if (c.double_backward && !inputs.empty()) {
      auto gs = torch::autograd::grad(diff, inputs, grads, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
      at::Tensor total;
      for (auto& g : gs)
        if (g.defined() && g.requires_grad()) total = total.defined() ? total + g.sum().to(at::kDouble) : g.sum().to(at::kDouble);
      if (total.defined()) total.backward();
      ++stats.double_backward;
    } else {
      torch::autograd::backward(diff, grads);
    }
    ++stats.backward;
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    // The only refusal after a forward that accepted its inputs: an order of derivative the spec
    // does not generate (grad_order), named by the op that refuses.
    if (msg.find("of the highest order generated") == std::string::npos || msg.rfind("gnnfuse::", 0) != 0)
      finding("the backward failed after the forward accepted its inputs: " + msg);
  }
}

void run_one(const uint8_t* data, size_t size) {
  Rng r(data, size);
  const OpInfo& op = ops()[r.below(ops().size())];
  Call c;
  current_op = &op;
  current_call = &c;
  if (op.spec) build_from_spec(op, r, c);
  else build_from_schema(op, r, c);
  // Mostly one change; some calls stay valid, a few get two.
  const uint64_t changes = r.below(20);
  if (changes >= 4) mutate(r, c, op);
  if (changes >= 18) mutate(r, c, op);
  c.all_meta = r.chance(10);
  if (c.all_meta)
    for (auto& v : c.args)
      if (v.isTensor() && v.toTensor().defined()) v = v.toTensor().to(at::kMeta);
  // Gradients: floating CPU inputs of ops with an autograd kernel record them sometimes.
  if (!c.all_meta && op.handle.hasKernelForDispatchKey(c10::DispatchKey::Autograd) && r.chance(25)) {
    for (auto& v : c.args)
      if (v.isTensor() && v.toTensor().defined() && at::isFloatingType(v.toTensor().scalar_type()) && !v.toTensor().is_meta() && r.chance(70)) {
        v = v.toTensor().detach().requires_grad_(true);
        c.autograd = true;
      }
    c.double_backward = c.autograd && r.chance(25);
  }
  if (r.chance(10)) at::set_num_threads(static_cast<int>(r.range(1, 2)));
  if (std::getenv("GNNFUSE_FUZZ_REPRO")) std::ofstream("fuzz-ops-repro.py") << reproducer(op, c, "replayed input");

  ++stats.calls;
  ++stats.per_op_calls[op.name];
  std::vector<c10::IValue> stack = c.args;
  try {
    op.handle.callBoxed(stack);
  } catch (const c10::NotImplementedError& e) {
    // No kernel for the arguments' backend (the symbolic and graph ops have no Meta kernel).
    const std::string msg = e.what_without_backtrace();
    if (msg.find("Could not run 'gnnfuse::" + op.name + "'") == std::string::npos) expect_named(op, e);
    ++stats.missing_kernel;
    return;
  } catch (const c10::Error& e) {
    expect_named(op, e);
    ++stats.refused;
    return;
  } catch (const std::exception& e) {
    finding(std::string("an exception other than c10::Error: ") + e.what());
  }
  ++stats.ok;
  ++stats.per_op_ok[op.name];
  const std::vector<at::Tensor> outs = tensors_of(stack);
  bool cpu = !c.all_meta;
  for (auto& v : c.args) cpu = cpu && !(v.isTensor() && v.toTensor().defined() && v.toTensor().is_meta());
  // An index outside its extent must not get through (on CPU, where values are read).
  if (cpu && !c.ranges_changed && !c.out_of_range.empty())
    finding("accepted an index outside its range in argument '" + op.handle.schema().arguments()[c.out_of_range.begin()->first].name() + "'");
  if (cpu && op.meta && !c.autograd) check_meta(op, c, outs);
  if (c.autograd) backward(c, outs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run_one(data, size);
  } catch (const KeepGoing&) {
  } catch (const std::exception& e) {  // thrown by the harness itself, outside the op's call
    std::fprintf(stderr, "fuzz_ops: harness error in gnnfuse::%s: %s\n", current_op ? current_op->name.c_str() : "?", e.what());
    std::abort();
  }
  current_op = nullptr;
  current_call = nullptr;
  return 0;
}

#ifndef GNNFUSE_LIBFUZZER
int main(int argc, char** argv) {
  // Seeds: random inputs (every choice past an input's bytes comes from a PRNG seeded by them).
  std::vector<std::string> corpus;
  std::mt19937_64 g(2026);
  for (int k = 0; k < 64; ++k) {
    std::string s(static_cast<size_t>(4 + g() % 28), '\0');
    for (auto& ch : s) ch = static_cast<char>(g() & 0xff);
    corpus.push_back(s);
  }
  const std::vector<std::string> dict = {std::string("\0", 1), "\x01", "\x02", "\x03", "\x04", "\xff", std::string("\0\0\0\0", 4), "\x7f", "\x63"};
  const int status = gnnfuse::fuzz::run(argc, argv, corpus, dict);
  std::set<std::string> reached;
  for (auto& [name, n] : stats.per_op_ok) reached.insert(name);
  std::printf("fuzz_ops: %ld calls over %zu of %zu registered gnnfuse ops; %ld ran (%zu ops reached their kernels), %ld refused with a named error, "
              "%ld had no kernel for the backend; %ld Meta-kernel comparisons, %ld backward passes (%ld double)\n",
              stats.calls, stats.per_op_calls.size(), ops().size(), stats.ok, reached.size(), stats.refused, stats.missing_kernel,
              stats.meta_checked, stats.backward, stats.double_backward);
  std::string never;
  for (auto& op : ops())
    if (!reached.count(op.name)) never += " " + op.name;
  if (!never.empty()) std::printf("fuzz_ops: ops that never ran to completion:%s\n", never.c_str());
  if (findings > 0) std::printf("fuzz_ops: %ld findings\n", findings);
  return findings > 0 ? 1 : status;
}
#endif
