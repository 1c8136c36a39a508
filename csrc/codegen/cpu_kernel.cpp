// The CPU kernel printer (KernelEmitter): it prints the imperative IR of an op (imperative.h)
// as C++: locals, statements, loops, walks, locates, row maps, the top-level row loops
// (parallel or not) and the assembling kernel's output rows. Register tiles, prefetches and
// row-blocked dense products: cpu_kernel_dense.cpp.
#include <algorithm>
#include <sstream>

#include "codegen/builtins.h"
#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

KernelEmitter::KernelEmitter(const Compiled& c, const imp::Kernel& k)
    : c_(c), p_(c.program), s_(c.spec), k_(k), S_(k.mode == imp::Mode::Assemble ? k.pattern : std::string()) {
  for (auto& s : k.body->body)
    if (s->kind == Kind::Alloc) root_temps_.push_back(s->tensor);
}

std::string KernelEmitter::body() {
  line("using acc_t = runtime::acc_t<scalar_t>;");
  locals();
  // Temporaries allocated at the root live for the whole call.
  for (auto& s : k_.body->body)
    if (s->kind == Kind::Alloc) {
      line("std::vector<acc_t> ws_" + s->tensor + "(static_cast<size_t>(" + buffer_size(s->tensor) + "), " + init(s->init) + ");");
      line("acc_t* __restrict__ " + s->tensor + " = ws_" + s->tensor + ".data();  (void)" + s->tensor + ";");
    }
  for (auto& s : k_.body->body) {
    switch (s->kind) {
      case Kind::Alloc: break;
      case Kind::For:
      case Kind::Parallel: top(*s); break;
      case Kind::BuildRows: build_rows(*s); break;
      default: stmt(*s);
    }
  }
  return os_.str();
}

// The kernel's locals read from prm: extents, scalar arguments, restrict pointers. Emitted
// again at the top of every parallel body: the body runs behind a function pointer, and
// values captured by reference would be reloaded after every store of a compatible type
// (an int64 position store may alias n_f), which keeps the feature loops scalar.
void KernelEmitter::locals() {
  for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";");
  for (auto& v : s_.order) line("(void)n_" + v + ";");
  for (auto& a : s_.schema.args)
    if (a.type == "float") {
      line("const acc_t arg_" + a.name + " = static_cast<acc_t>(prm." + a.name + ");");
      line("(void)arg_" + a.name + ";");
    }
  for (auto& t : s_.tensors) {
    switch (t.role) {
      case Role::SparseInput:
        line("const index_t* __restrict__ " + t.name + "_rowptr = static_cast<const index_t*>(prm." + t.name + "_rowptr);");
        line("const index_t* __restrict__ " + t.name + "_col = static_cast<const index_t*>(prm." + t.name + "_col);");
        if (!t.values.empty())
          line("const scalar_t* __restrict__ " + t.name + "_val = static_cast<const scalar_t*>(prm." + t.name + "_val);");
        if (!t.values.empty()) line("(void)" + t.name + "_val;");
        line("(void)" + t.name + "_rowptr;");
        line("(void)" + t.name + "_col;");
        if (p_.walks_csc(t.name)) {
          line("const index_t* __restrict__ " + t.name + "_colptr = static_cast<const index_t*>(prm." + t.name + "_colptr);");
          line("const index_t* __restrict__ " + t.name + "_row = static_cast<const index_t*>(prm." + t.name + "_row);");
          line("const int64_t* __restrict__ " + t.name + "_perm = static_cast<const int64_t*>(prm." + t.name + "_perm);");
          line("(void)" + t.name + "_colptr;");
          line("(void)" + t.name + "_row;");
          line("(void)" + t.name + "_perm;");
        }
        break;
      case Role::DenseInput:
      case Role::EdgeInput: {
        const std::string type = t.acc ? "acc_t" : "scalar_t";
        line("const " + type + "* __restrict__ " + t.name + " = static_cast<const " + type + "*>(prm." + t.name + ");");
        line("(void)" + t.name + ";");
        break;
      }
      case Role::SelectInput:
        line("const int64_t* __restrict__ " + t.name + " = static_cast<const int64_t*>(prm." + t.name + ");");
        line("(void)" + t.name + ";");
        break;
      case Role::CountInput: break;
      case Role::Output:
        line(std::string(t.acc ? "acc_t" : "scalar_t") + "* __restrict__ " + t.name + " = static_cast<" + (t.acc ? "acc_t" : "scalar_t") +
             "*>(prm." + t.name + ");");
        line("(void)" + t.name + ";");
        if (s_.selects()) {
          line("int64_t* __restrict__ " + t.name + "_arg = static_cast<int64_t*>(prm." + t.name + "_arg);");
          line("(void)" + t.name + "_arg;");
        }
        break;
      case Role::Temp: break;
    }
  }
}

std::string KernelEmitter::buffer_size(const std::string& temp) const {
  const TensorInfo& t = p_.tensor(temp);
  if (!t.compressed_by.empty() && t.compressed_global)
    return "static_cast<int64_t>(" + ptr(t.compressed_by) + "[n_" + p_.outer_var(t.compressed_by) + "])";
  if (!t.compressed_by.empty()) return t.compressed_by + "_re - " + t.compressed_by + "_rb";
  std::string size = "int64_t(1)";
  for (auto& d : t.kept_dims) size += " * n_" + d;
  return size;
}

// Row-major offset of `idx` over the extents of `dims`.
std::string KernelEmitter::offset(const std::vector<std::string>& idx, const std::vector<std::string>& dims) {
  if (idx.empty()) return "0";
  std::string o = idx[0];
  for (size_t d = 1; d < idx.size(); ++d) o = "(" + o + ") * n_" + dims[d] + " + " + idx[d];
  return o;
}

// Offset in a tensor "on" a pattern: [nnz, extra dims...], row-major, edge first.
std::string KernelEmitter::on_edge(const std::string& pattern, const std::vector<std::string>& idx, const std::vector<std::string>& dims) const {
  std::string o = edge(pattern);
  for (size_t d = 2; d < idx.size(); ++d) o = "(" + o + ") * n_" + dims[d] + " + " + idx[d];
  return o;
}

// Initial value of an accumulating temporary (0 for sums, -inf / inf for max / min).
std::string KernelEmitter::init(Reduce r) {
  switch (r) {
    case Reduce::Sum: return "acc_t(0)";
    case Reduce::Max: return "-std::numeric_limits<acc_t>::infinity()";
    case Reduce::Min: return "std::numeric_limits<acc_t>::infinity()";
  }
  return "";
}

// ---------------------------------------------------------------- values
std::string KernelEmitter::read(const imp::Value& v) const {
  const Access& a = v.access;
  const TensorInfo& t = p_.tensor(a.tensor);
  const TensorDecl* d = s_.find(a.tensor);
  switch (v.role) {
    case Role::SparseInput:
      if (d->values.empty()) return "acc_t(1)";
      if (d->values_optional)
        return "(kHas" + a.tensor + " ? static_cast<acc_t>(" + a.tensor + "_val[" + edge(a.tensor) + "]) : acc_t(1))";
      return "static_cast<acc_t>(" + a.tensor + "_val[" + edge(a.tensor) + "])";
    case Role::DenseInput:
      if (vector_reads_ && std::count(a.idx.begin(), a.idx.end(), tile_var_))
        return "runtime::vload<acc_t>(&" + a.tensor + "[" + offset(a.idx, a.idx) + "])";
      return "static_cast<acc_t>(" + a.tensor + "[" + offset(a.idx, a.idx) + "])";
    case Role::EdgeInput: return "static_cast<acc_t>(" + a.tensor + "[" + on_edge(t.pattern, a.idx, d->vars) + "])";
    case Role::CountInput: {
      const std::string& A = d->pattern;
      const std::string& i = a.idx[0];
      return "static_cast<acc_t>(std::max<int64_t>(1, static_cast<int64_t>(" + A + "_rowptr[" + i + " + 1] - " + A + "_rowptr[" + i + "])))";
    }
    case Role::SelectInput: {
      std::vector<std::string> rest = a.idx;
      rest.erase(rest.begin() + 1);
      return "(" + a.tensor + "[" + offset(rest, rest) + "] == " + edge(d->pattern) + " ? acc_t(1) : acc_t(0))";
    }
    case Role::Temp:
      if (vector_reads_ && v.root_matrix && std::count(a.idx.begin(), a.idx.end(), tile_var_))
        return "runtime::vload<acc_t>(&" + temp_ref(a) + ")";
      return temp_ref(a);
    case Role::Output: fail(s_.loc, "internal error: the output is read");
  }
  return "";
}

// A temporary at its kept indices (imp::Value::access, imp::Stmt::lhs).
std::string KernelEmitter::temp_ref(const Access& a) const {
  const TensorInfo& t = p_.tensor(a.tensor);
  if (!t.compressed_by.empty()) {
    const std::string& S = t.compressed_by;
    return a.tensor + "[" + (t.compressed_global ? pos(S) : pos(S) + " - " + S + "_rb") + "]";
  }
  if (t.kept_dims.empty()) return a.tensor == lane_sum_ ? a.tensor + "_lanes_[" + lane_var_ + "_l]" : a.tensor;
  return a.tensor + "[" + offset(a.idx, t.kept_dims) + "]";
}

std::string KernelEmitter::value(const imp::Value& v) const {
  using VK = imp::Value::Kind;
  switch (v.kind) {
    case VK::Const: return fmt_const(v.value);
    case VK::Read: return read(v);
    case VK::Neg: return "-(" + value(*v.args[0]) + ")";
    case VK::Binary: return value(*v.args[0]) + " " + v.op + " " + value(*v.args[1]);
    case VK::Call: return spell_function(v.fn, Target::Cpu, value(*v.args[0]), v.param_arg.empty() ? fmt_const(v.value) : "arg_" + v.param_arg);
    case VK::Guard: {
      // Stored-entry semantics (entry_semantics): a row without entries gives the other value.
      const imp::Value& other = *v.args[1];
      const std::string zero = other.kind == VK::Const && other.value == 0 ? "acc_t(0)" : value(other);
      const std::string& L = v.guard_level;
      if (v.row_open) return "(" + L + "_re > " + L + "_rb ? " + value(*v.args[0]) + " : " + zero + ")";
      return "(" + L + "_rowptr[" + v.guard_row + " + 1] == " + L + "_rowptr[" + v.guard_row + "]) ? " + zero + " : " + value(*v.args[0]);
    }
  }
  return "";
}

// ---------------------------------------------------------------- statements
void KernelEmitter::compute(const IStmt& s) {
  const TensorInfo& t = p_.tensor(s.lhs.tensor);
  const std::string v = value(*s.rhs);
  const bool accumulate = s.kind == Kind::Accumulate;
  if (t.role == Role::Output) {
    if (accumulate) fail(s_.loc, "internal error: the output accumulates directly");
    const std::string at = t.pattern.empty() ? offset(s.lhs.idx, t.dims) : on_edge(t.pattern, s.lhs.idx, t.dims);
    if (s_.find(s.lhs.tensor)->acc) line(s.lhs.tensor + "[" + at + "] = " + v + ";");
    else line("runtime::store(&" + s.lhs.tensor + "[" + at + "], static_cast<acc_t>(" + v + "));");
    return;
  }
  if (!accumulate || s.reduce == Reduce::Sum) {
    line(temp_ref(s.lhs) + (accumulate ? " += " : " = ") + v + ";");
    return;
  }
  // max / min: NaN wins and stays; ties keep the first entry. Selects instead of branches
  // let the compiler vectorise the loop.
  std::string ref = temp_ref(s.lhs);
  open("{");
  line("const acc_t v_ = " + v + ";");
  if (s.arg_out.empty()) {
    // std::max / std::min keep a NaN already held (maxss / minss, no branch); a NaN arriving
    // takes over through a select that is almost never taken (a predictable branch at worst).
    line(ref + " = " + (s.reduce == Reduce::Max ? "std::max(" : "std::min(") + ref + ", v_);");
    line(ref + " = __builtin_isunordered(v_, v_) ? v_ : " + ref + ";");
  } else {
    // The sparse operand whose column is reduced gives the position; the accumulator starts
    // at -inf / inf, so the first entry wins unless it is -inf / inf itself (the position of
    // such a row stays -1 and its value is right).
    // Plain comparisons combined with & and |: GCC turns the quiet builtins into branches on
    // the parity flag here, which mispredict and keep the loop scalar.
    std::string at = s.arg_out + "[" + offset(s.arg_at.idx, s_.output().vars) + "]";
    line("const acc_t cur_ = " + ref + ";");
    line(std::string("const bool take_ = (v_ ") + (s.reduce == Reduce::Max ? ">" : "<") + " cur_) | ((v_ != v_) & (cur_ == cur_));");
    line(ref + " = take_ ? v_ : cur_;");
    line(at + " = take_ ? " + edge(s.arg_of) + " : " + at + ";");
  }
  close();
}

// A temporary at its home: a scalar is a local; a row-length buffer is sized for the row (its
// workspace was declared per worker); anything else lives in its per-worker workspace.
void KernelEmitter::alloc(const IStmt& a) {
  if (a.dims.empty()) {
    line("acc_t " + a.tensor + " = " + init(a.init) + ";");
  } else if (!a.compressed_by.empty()) {
    line("if (static_cast<int64_t>(ws_" + a.tensor + ".size()) < " + buffer_size(a.tensor) + ") ws_" + a.tensor +
         ".resize(static_cast<size_t>(" + buffer_size(a.tensor) + "));");
    line("acc_t* __restrict__ " + a.tensor + " = ws_" + a.tensor + ".data();");
  }
}

void KernelEmitter::row_bounds(const IStmt& r) {
  const auto [rb, re] = emit::row_bounds(p_, *s_.find(r.level), r.var);
  line("const index_t " + r.level + "_rb = " + rb + ";");
  line("const index_t " + r.level + "_re = " + re + ";");
  line("(void)" + r.level + "_rb;");
  line("(void)" + r.level + "_re;");
}

// Another level of a co-iteration at the walked coordinate: its position (p_L, e_L) in the row
// the enclosing loops bind, or the next coordinate when it lacks it (a product over A&B exists
// only where both store an entry).
void KernelEmitter::locate(const IStmt& l) {
  const std::string& L = l.level;
  if (l.by_map) {  // the map where the worker keeps one (map_L), else a search
    line("const int64_t " + pos(L) + " = map_" + L + " ? static_cast<int64_t>(loc_" + L + "[" + l.var + "]) : runtime::find_sorted(" + L +
         (l.csc ? "_row" : "_col") + ", static_cast<int64_t>(" + L + "_rb), static_cast<int64_t>(" + L + "_re), " + l.var + ");");
  } else {
    line("const int64_t " + pos(L) + " = runtime::find_sorted(" + L + (l.csc ? "_row" : "_col") + ", static_cast<int64_t>(" + L +
         "_rb), static_cast<int64_t>(" + L + "_re), " + l.var + ");");
  }
  line("if (" + pos(L) + " < 0) continue;");
  line(std::string("const int64_t ") + edge(L) + " = " + (l.csc ? L + "_perm[" + pos(L) + "]" : pos(L)) + ";");
  line("(void)" + edge(L) + ";");
}

// The row map of L: loc_L[column] = CSR position in the current row (fill), -1 (clear).
void KernelEmitter::fill_map(const IStmt& m, bool fill) {
  const std::string& L = m.level;
  open("if (map_" + L + ") {");
  open("for (index_t q_ = " + L + "_rb; q_ < " + L + "_re; ++q_) {");
  line("loc_" + L + "[" + L + (m.csc ? "_row" : "_col") + "[q_]] = " + (fill ? "q_" : "index_t(-1)") + ";");
  close();
  close();
}

// The storage a worker of a top-level loop allocates once (imp::Stmt::per_worker).
void KernelEmitter::per_worker(const IStmt& top) {
  for (auto& w : top.per_worker) {
    const std::string& name = w->tensor;
    if (w->kind == Kind::MapWorkspace) {
      // Positions in the index dtype (they fit: the operand's own row pointers hold them); over
      // columns up to runtime::kRowMapColumns, past which the locates search the row.
      const std::string n = "n_" + p_.inner_var(w->level);
      line("const bool map_" + w->level + " = " + n + " <= runtime::kRowMapColumns;");
      line("std::vector<index_t> locv_" + w->level + "(static_cast<size_t>(map_" + w->level + " ? " + n + " : 0), index_t(-1));");
      line("index_t* __restrict__ loc_" + w->level + " = locv_" + w->level + ".data();");
    } else if (!w->compressed_by.empty()) {
      line("std::vector<acc_t> ws_" + name + ";");
    } else if (w->blocked) {
      line("std::vector<acc_t> ws_" + name + "(static_cast<size_t>(runtime::kRowBlock * " + buffer_size(name) + "));");
    } else {
      line("std::vector<acc_t> ws_" + name + "(static_cast<size_t>(" + buffer_size(name) + "));");
      line("acc_t* __restrict__ " + name + " = ws_" + name + ".data();");
    }
  }
}

void KernelEmitter::stmts(const std::vector<imp::StmtP>& body) {
  for (auto& s : body) stmt(*s);
}

void KernelEmitter::stmt(const IStmt& s) {
  switch (s.kind) {
    case Kind::Block: stmts(s.body); return;
    case Kind::Assign:
    case Kind::Accumulate: compute(s); return;
    case Kind::Alloc: alloc(s); return;
    case Kind::Fill: line("std::fill_n(" + s.tensor + ", " + buffer_size(s.tensor) + ", " + init(s.init) + ");"); return;
    case Kind::RowBounds: row_bounds(s); return;
    case Kind::Locate: locate(s); return;
    case Kind::FillMap: fill_map(s, true); return;
    case Kind::ClearMap: fill_map(s, false); return;
    case Kind::For:
    case Kind::Parallel: dense_loop(s); return;  // a Parallel below the top runs serially
    case Kind::Walk: {
      const IStmt* fl = nullptr;
      for (auto& k : s.body)
        if (k->kind == Kind::For && k->sched.register_tile) fl = k.get();
      if (fl) tiled_walk(s, *fl);
      else walk(s, WalkMode{});
      return;
    }
    case Kind::BeginOutputRow: begin_output_row(s); return;
    case Kind::Insert: insert_output(s); return;
    case Kind::OutputWalk: output_walk(s); return;
    case Kind::Matmul:
    case Kind::RowPass:
    case Kind::Workspace:
    case Kind::MapWorkspace:
    case Kind::BuildRows:
    case Kind::CountRow:
    case Kind::EndOutputRow: break;
  }
  fail(s_.loc, "internal error: the CPU printer met a statement out of place in " + k_.name);
}

// A dense loop below the top: a simd sum, or a plain (simd) loop; in the plain pass of a tiled
// walk the feature loop starts at the columns the tiles left.
void KernelEmitter::dense_loop(const IStmt& l) {
  if (l.sched.simd() && !l.sched.simd_reduction().empty()) {
    simd_sum(l);
    return;
  }
  if (l.sched.simd()) line("#pragma omp simd");
  const bool from = l.var == tile_var_ && !tile_begin_.empty();
  open("for (int64_t " + l.var + " = " + (from ? tile_begin_ : "0") + "; " + l.var + " < n_" + l.var + "; ++" + l.var + ") {");
  stmts(l.body);
  close();
}

// One loop over the stored entries of the current row (column) of `level`.
void KernelEmitter::walk(const IStmt& w, const WalkMode& mode) {
  const std::string& level = w.level;
  const bool prefetch_scope = prefetch_setup(w, mode);
  open("for (index_t " + pos(level) + " = " + level + "_rb; " + pos(level) + " < " + level + "_re; ++" + pos(level) + ") {");
  line("const int64_t " + w.var + " = static_cast<int64_t>(" + level + (w.csc ? "_row[" : "_col[") + pos(level) + "]);");
  line("(void)" + w.var + ";");
  line(std::string("const int64_t ") + edge(level) + " = " + (w.csc ? level + "_perm[" + pos(level) + "]" : "static_cast<int64_t>(" + pos(level) + ")") + ";");
  line("(void)" + edge(level) + ";");
  prefetch(w, mode);
  for (auto& k : w.body) {
    if (k.get() == mode.f_loop && mode.lanes > 0) {
      tile_body(*k, mode);
    } else {
      stmt(*k);
    }
  }
  close();
  if (prefetch_scope) close();
}

// A dense innermost loop summing into the scalar `r` (a dot product): GCC does not reliably
// vectorise `omp simd reduction` inside the kernels' nests, so the sum runs in 8 explicit
// lanes over blocks of 8 (a plain simd loop) and a scalar tail, then adds the lanes.
void KernelEmitter::simd_sum(const IStmt& l) {
  const std::string& v = l.var;
  const std::string r = l.sched.simd_reduction();
  open("{");
  line("acc_t " + r + "_lanes_[8] = {};");
  line("int64_t " + v + "_ = 0;");
  open("for (; " + v + "_ + 8 <= n_" + v + "; " + v + "_ += 8) {");
  line("#pragma omp simd");
  open("for (int64_t " + v + "_l = 0; " + v + "_l < 8; ++" + v + "_l) {");
  line("const int64_t " + v + " = " + v + "_ + " + v + "_l;");
  lane_sum_ = r;  // the sum is spelled as its lane
  lane_var_ = v;
  stmts(l.body);
  lane_sum_.clear();
  close();
  close();
  open("for (int64_t " + v + " = " + v + "_; " + v + " < n_" + v + "; ++" + v + ") {");
  stmts(l.body);
  close();
  line(r + " += ((" + r + "_lanes_[0] + " + r + "_lanes_[1]) + (" + r + "_lanes_[2] + " + r + "_lanes_[3])) + ((" + r + "_lanes_[4] + " + r +
       "_lanes_[5]) + (" + r + "_lanes_[6] + " + r + "_lanes_[7]));");
  close();
}

// ---------------------------------------------------------------- top-level loops
// A top-level row loop: serial (a plain loop, whatever simd mark the schedule left on it), or in
// chunks on threads (parallel).
void KernelEmitter::top(const IStmt& l) {
  open("{");
  if (l.kind == Kind::Parallel) {
    parallel(l);
  } else {
    per_worker(l);
    open("for (int64_t " + l.var + " = 0; " + l.var + " < n_" + l.var + "; ++" + l.var + ") {");
    stmts(l.body);
    close();
  }
  close();
}

void KernelEmitter::parallel(const IStmt& l) {
  const LoopSchedule& g = l.sched;
  const MatmulBlock* gemm = nullptr;
  for (auto& s : l.body)
    if (s->kind == Kind::Matmul && l.blocked && !gemm) gemm = s->matmul.get();
  if (gemm) pack_dense(*gemm);
  line(std::string("const std::vector<int64_t> chunks = ") +
       (g.balance_by.empty() ? "runtime::even_chunks(n_" + l.var + ")" : "runtime::balanced_chunks(" + ptr(g.balance_by) + ", n_" + l.var + ")") + ";");
  // Sums over the parallel variable: one private copy per call of the body (one per thread),
  // kept by its first chunk and added in chunk order after the loop (reproducible).
  const std::vector<std::string>& priv = g.private_sums();
  for (auto& t : priv) line("std::vector<std::vector<acc_t>> partial_" + t + "(chunks.size());");
  open("runtime::parallel_for(0, static_cast<int64_t>(chunks.size()) - 1, 1, [&](int64_t c_begin, int64_t c_end) {");
  locals();
  for (auto& name : root_temps_)
    if (std::find(priv.begin(), priv.end(), name) == priv.end()) line("acc_t* __restrict__ " + name + " = ws_" + name + ".data();  (void)" + name + ";");
  for (auto& t : priv) {
    line("std::vector<acc_t> mine_" + t + "(static_cast<size_t>(" + buffer_size(t) + "), " + init(p_.tensor(t).init) + ");");
    line("acc_t* __restrict__ " + t + " = mine_" + t + ".data();");
  }
  per_worker(l);
  if (gemm) {
    if (gemm->form == MatmulBlock::Form::Dot) line("std::vector<acc_t> ws_gemm_(static_cast<size_t>(runtime::kRowBlock * n_" + gemm->c + "));");
    open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
    open("for (int64_t ib_ = chunks[ch_]; ib_ < chunks[ch_ + 1]; ib_ += runtime::kRowBlock) {");
    line("const int64_t nb_ = std::min<int64_t>(runtime::kRowBlock, chunks[ch_ + 1] - ib_);");
    for (auto& s : l.body) {
      if (s->kind == Kind::RowPass) row_pass(*s);
      else if (s->kind == Kind::Matmul) block_product(*s->matmul);
      else stmt(*s);
    }
    close();
    close();
  } else {
    open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
    open("for (int64_t " + l.var + " = chunks[ch_]; " + l.var + " < chunks[ch_ + 1]; ++" + l.var + ") {");
    stmts(l.body);
    close();
    close();
  }
  for (auto& t : priv) line("partial_" + t + "[static_cast<size_t>(c_begin)] = std::move(mine_" + t + ");");
  close("});");
  for (auto& t : priv) {
    open("for (const std::vector<acc_t>& part : partial_" + t + ") {");
    line("#pragma omp simd");
    line("for (size_t x = 0; x < part.size(); ++x) " + t + "[x] += part[x];");
    close();
  }
}

// ---- assembly: the output pattern S built with the values (`<op>_assemble`) ----
// The nest of the values kernel, with S's row taken from a per-thread sparse workspace
// (runtime::SymbolicWorkspace, policy per row from the product count as in the symbolic
// pass) instead of an input: where the values kernel locates S (and skips products outside
// it), the assembling kernel inserts the coordinate and gets its slot in the row's value
// arrays (temporaries stored by S positions); the walk over S that writes the output row runs
// over the workspace's columns in increasing order, into the task's own column and value
// buffers. Then row pointers, one exact allocation and one copy per task, as in the symbolic
// pass. Products are summed in the same order as in the values kernel.
void KernelEmitter::build_rows(const IStmt& l) {
  const std::string& i = l.var;
  const std::string& balance = l.sched.balance_by;
  open("{");
  line(std::string("const std::vector<int64_t> chunks = ") +
       (balance.empty() ? "runtime::even_chunks(n_" + i + ")" : "runtime::balanced_chunks(" + ptr(balance) + ", n_" + i + ")") + ";");
  line("const int64_t tasks_ = static_cast<int64_t>(chunks.size()) - 1;");
  line("std::vector<std::vector<index_t>> part_col_(static_cast<size_t>(std::max<int64_t>(tasks_, 0)));");
  line("std::vector<std::vector<scalar_t>> part_val_(static_cast<size_t>(std::max<int64_t>(tasks_, 0)));");
  open("runtime::parallel_for(0, tasks_, 1, [&](int64_t c_begin, int64_t c_end) {");
  locals();
  per_worker(l);
  line("runtime::SymbolicWorkspace ws(n_" + p_.inner_var(S_) + ");");
  line("std::vector<index_t>& out_col_ = part_col_[static_cast<size_t>(c_begin)];");
  line("std::vector<scalar_t>& out_val_ = part_val_[static_cast<size_t>(c_begin)];");
  if (!balance.empty()) {  // room for about one output entry per nonzero of the balancing operand
    const std::string room = "static_cast<size_t>(" + ptr(balance) + "[chunks[c_end]] - " + ptr(balance) + "[chunks[c_begin]])";
    line("out_col_.reserve(" + room + ");");
    line("out_val_.reserve(" + room + ");");
  }
  open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
  open("for (int64_t " + i + " = chunks[ch_]; " + i + " < chunks[ch_ + 1]; ++" + i + ") {");
  stmts(l.body);
  close();
  close();
  close("});");
  line("prm.out_rowptr[0] = 0;");
  line("for (int64_t r_ = 0; r_ < n_" + i + "; ++r_) prm.out_rowptr[r_ + 1] += prm.out_rowptr[r_];");
  line("void* col_out_ = nullptr;");
  line("void* val_out_ = nullptr;");
  line("prm.alloc(prm.alloc_ctx, prm.out_rowptr[n_" + i + "], &col_out_, &val_out_);");
  open("runtime::parallel_for(0, tasks_, 1, [&](int64_t c_begin, int64_t c_end) {");
  open("for (int64_t t_ = c_begin; t_ < c_end; ++t_) {");
  line("const std::vector<index_t>& col_src_ = part_col_[static_cast<size_t>(t_)];");
  line("const std::vector<scalar_t>& val_src_ = part_val_[static_cast<size_t>(t_)];");
  line("const int64_t at_ = prm.out_rowptr[chunks[t_]];");
  line("std::copy(col_src_.begin(), col_src_.end(), static_cast<index_t*>(col_out_) + at_);");
  line("std::copy(val_src_.begin(), val_src_.end(), static_cast<scalar_t*>(val_out_) + at_);");
  close();
  close("});");
  close();
}

// At the row loop: the row's product count when the workspace wants it, the policy, and S's
// row bounds as the slots of the workspace (the temporaries stored by S positions are sized
// from them at their Alloc).
void KernelEmitter::begin_output_row(const IStmt& b) {
  os_ << SymbolicEmitter(c_, k_).product_count(b, depth_);
  line("ws.begin(ub_);");
  line("const index_t " + S_ + "_rb = 0;");
  line("const index_t " + S_ + "_re = static_cast<index_t>(ws.capacity());");
  line("(void)" + S_ + "_rb;");
  line("(void)" + S_ + "_re;");
}

// Where the values kernel locates S: insert the coordinate; a new slot starts at the
// temporaries' initial values.
void KernelEmitter::insert_output(const IStmt& ins) {
  line("bool fresh_ = false;");
  line("const int64_t " + pos(S_) + " = ws.insert_slot(" + ins.var + ", &fresh_);");
  open("if (fresh_) {");
  for (auto& f : ins.body) line(f->tensor + "[" + pos(S_) + " - " + S_ + "_rb] = " + init(f->init) + ";");
  close();
  line("const int64_t " + edge(S_) + " = " + pos(S_) + ";");
  line("(void)" + edge(S_) + ";");
}

// The walk over S's row: the workspace's columns in increasing order, the output row written
// to the task's buffers.
void KernelEmitter::output_walk(const IStmt& w) {
  line("const int64_t len_ = ws.finish();");
  line("const size_t at_ = out_col_.size();");
  line("out_col_.resize(at_ + static_cast<size_t>(len_));");
  line("out_val_.resize(at_ + static_cast<size_t>(len_));");
  line("scalar_t* __restrict__ " + w.tensor + " = out_val_.data() + at_;");
  open("for (int64_t k_ = 0; k_ < len_; ++k_) {");
  line("const int64_t " + w.var + " = ws.column(k_);");
  line("const int64_t " + pos(S_) + " = ws.slot(k_);");
  line("const int64_t " + edge(S_) + " = k_;");
  line("(void)" + edge(S_) + ";");
  line("out_col_[at_ + static_cast<size_t>(k_)] = static_cast<index_t>(" + w.var + ");");
  stmts(w.body);
  close();
  line("prm.out_rowptr[" + w.row + " + 1] = len_;");
}

}  // namespace gnnfuse::codegen::emit
