// The CPU kernel printer (KernelEmitter): locals, statements, loops, walks, co-iteration, row
// maps, the top-level row loops (parallel or not) and the assembling kernel's output rows.
// Register tiles, prefetches and row-blocked dense products: cpu_kernel_dense.cpp.
#include <algorithm>
#include <functional>
#include <sstream>

#include "codegen/builtins.h"
#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

std::string KernelEmitter::body() {
  line("using acc_t = runtime::acc_t<scalar_t>;");
  locals();
  // Temporaries whose common loop is the root live for the whole call.
  for (auto& name : p_.temps)
    if (!home_of(p_, *c_.tree, name)) {
      line("std::vector<acc_t> ws_" + name + "(static_cast<size_t>(" + buffer_size(name) + "), " + init(name) + ");");
      line("acc_t* __restrict__ " + name + " = ws_" + name + ".data();  (void)" + name + ";");
    }
  for (auto& k : c_.tree->kids) {
    if (S_.empty()) top(*k);
    else assemble_top(*k);
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

bool KernelEmitter::root_matrix(const std::string& name) const { return codegen::root_matrix(p_, *c_.tree, name); }

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
std::string KernelEmitter::init(const std::string& temp) const {
  switch (p_.tensor(temp).init) {
    case Reduce::Sum: return "acc_t(0)";
    case Reduce::Max: return "-std::numeric_limits<acc_t>::infinity()";
    case Reduce::Min: return "std::numeric_limits<acc_t>::infinity()";
  }
  return "";
}

std::string KernelEmitter::read(const Operand& o) const {
  if (o.is_const) return fmt_const(o.value);
  const Access& a = o.access;
  const TensorInfo& t = p_.tensor(a.tensor);
  const TensorDecl* d = s_.find(a.tensor);
  switch (t.role) {
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
      if (vector_reads_ && root_matrix(a.tensor) && std::count(a.idx.begin(), a.idx.end(), tile_var_))
        return "runtime::vload<acc_t>(&" + temp_ref(a) + ")";
      return temp_ref(a);
    case Role::Output: fail(s_.loc, "internal error: the output is read");
  }
  return "";
}

std::string KernelEmitter::temp_ref(const Access& a) const {
  const TensorInfo& t = p_.tensor(a.tensor);
  if (!t.compressed_by.empty()) {
    const std::string& S = t.compressed_by;
    return a.tensor + "[" + (t.compressed_global ? pos(S) : pos(S) + " - " + S + "_rb") + "]";
  }
  if (t.kept_dims.empty()) return a.tensor == lane_sum_ ? a.tensor + "_lanes_[" + lane_var_ + "_l]" : a.tensor;
  std::vector<std::string> idx;
  for (size_t k = 0; k < t.dims.size(); ++k)
    if (std::count(t.kept_dims.begin(), t.kept_dims.end(), t.dims[k])) idx.push_back(a.idx[k]);
  return a.tensor + "[" + offset(idx, t.kept_dims) + "]";
}

std::string KernelEmitter::rhs(const Stmt& s) const {
  auto arg = [&](size_t k) { return read(s.rhs.at(k)); };
  switch (s.op) {
    case Stmt::Op::Copy: return arg(0);
    case Stmt::Op::Neg: return "-(" + arg(0) + ")";
    case Stmt::Op::Mul: return arg(0) + " * " + arg(1);
    case Stmt::Op::Div: {
      // Stored-entry semantics (entry_semantics): 0 for a row without entries.
      const std::string& walk = entries_[static_cast<size_t>(s.id)].div_nonempty;
      if (!walk.empty()) return "(" + walk + "_re > " + walk + "_rb ? " + arg(0) + " / " + arg(1) + " : acc_t(0))";
      return arg(0) + " / " + arg(1);
    }
    case Stmt::Op::Add: return arg(0) + " + " + arg(1);
    case Stmt::Op::Sub: return arg(0) + " - " + arg(1);
    case Stmt::Op::Call:
      return spell_function(s.fn, Target::Cpu, arg(0), s.param_arg.empty() ? fmt_const(s.param) : "arg_" + s.param_arg);
  }
  return "";
}

void KernelEmitter::compute(const Stmt& s) {
  const TensorInfo& t = p_.tensor(s.lhs.tensor);
  std::string value = rhs(s);
  if (t.role == Role::Output) {
    if (s.accumulate) fail(s_.loc, "internal error: the output accumulates directly");
    std::string at = t.pattern.empty() ? offset(s.lhs.idx, t.dims) : on_edge(t.pattern, s.lhs.idx, t.dims);
    // reduce max/min: a row without entries gives 0 (its position stays -1).
    const EntryRule& rule = entries_[static_cast<size_t>(s.id)];
    if (!rule.store_empty_zero.empty()) {
      const std::string& A = rule.store_empty_zero;
      value = "(" + A + "_rowptr[" + rule.row + " + 1] == " + A + "_rowptr[" + rule.row + "]) ? acc_t(0) : " + value;
    }
    if (s_.find(s.lhs.tensor)->acc) line(s.lhs.tensor + "[" + at + "] = " + value + ";");
    else line("runtime::store(&" + s.lhs.tensor + "[" + at + "], static_cast<acc_t>(" + value + "));");
    return;
  }
  if (!s.accumulate || s.reduce == Reduce::Sum) {
    line(temp_ref(s.lhs) + (s.accumulate ? " += " : " = ") + value + ";");
    return;
  }
  // max / min: NaN wins and stays; ties keep the first entry. Selects instead of branches
  // let the compiler vectorise the loop.
  std::string ref = temp_ref(s.lhs);
  open("{");
  line("const acc_t v_ = " + value + ";");
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
    std::string at = s.arg_out + "[" + offset(s.lhs.idx, s_.output().vars) + "]";
    line("const acc_t cur_ = " + ref + ";");
    line(std::string("const bool take_ = (v_ ") + (s.reduce == Reduce::Max ? ">" : "<") + " cur_) | ((v_ != v_) & (cur_ == cur_));");
    line(ref + " = take_ ? v_ : cur_;");
    line(at + " = take_ ? " + edge(s_.reduced_operand()->name) + " : " + at + ";");
  }
  close();
}

// Declarations at the top of a loop body: csr row bounds for operands whose rows this loop
// walks, then the temporaries whose common loop this is.
void KernelEmitter::enter(const Node& n) {
  for (auto& t : s_.tensors)
    if (t.role == Role::SparseInput && is_outer_var(t.name, n.var) && t.name != S_) {
      const auto [rb, re] = row_bounds(p_, t, n.var);
      line("const index_t " + t.name + "_rb = " + rb + ";");
      line("const index_t " + t.name + "_re = " + re + ";");
      line("(void)" + t.name + "_rb;");
      line("(void)" + t.name + "_re;");
    }
  if (!S_.empty() && is_outer_var(S_, n.var)) begin_output_row(n);
  for (auto& name : p_.temps) {
    if (home_of(p_, *c_.tree, name) != &n) continue;
    const TensorInfo& t = p_.tensor(name);
    if (t.kept_dims.empty()) {
      line("acc_t " + name + " = " + init(name) + ";");
    } else if (!t.compressed_by.empty()) {
      line("if (static_cast<int64_t>(ws_" + name + ".size()) < " + buffer_size(name) + ") ws_" + name +
           ".resize(static_cast<size_t>(" + buffer_size(name) + "));");
      line("acc_t* __restrict__ " + name + " = ws_" + name + ".data();");
    }
  }
}

// Per-thread workspaces of the temporaries homed inside a top-level tree. `blocked`: the top
// loop runs in row blocks, and the temporaries homed at it get one slot per row of a block.
void KernelEmitter::workspaces(const Node& top, bool blocked) {
  std::function<void(const Node&)> rec = [&](const Node& n) {
    for (auto& name : p_.temps)
      if (home_of(p_, *c_.tree, name) == &n) {
        const TensorInfo& t = p_.tensor(name);
        if (t.kept_dims.empty()) continue;
        if (!t.compressed_by.empty()) {
          line("std::vector<acc_t> ws_" + name + ";");
        } else if (blocked && &n == &top) {
          line("std::vector<acc_t> ws_" + name + "(static_cast<size_t>(runtime::kRowBlock * " + buffer_size(name) + "));");
        } else {
          line("std::vector<acc_t> ws_" + name + "(static_cast<size_t>(" + buffer_size(name) + "));");
          line("acc_t* __restrict__ " + name + " = ws_" + name + ".data();");
        }
      }
    for (auto& k : n.kids) rec(*k);
  };
  rec(top);
}

void KernelEmitter::node(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Root: break;
    case Node::Kind::Compute: compute(p_.stmts[n.stmt]); return;
    case Node::Kind::Reset: {
      const TensorInfo& t = p_.tensor(n.tensor);
      if (t.kept_dims.empty() || !home_of(p_, *c_.tree, n.tensor)) return;  // zeroed where declared
      if (!S_.empty() && t.compressed_by == S_) return;  // assembling: a slot starts when inserted
      line("std::fill_n(" + n.tensor + ", " + buffer_size(n.tensor) + ", " + init(n.tensor) + ");");
      return;
    }
    case Node::Kind::Loop: {
      std::string level;
      if (!n.walk.empty()) {
        level = n.walk;
      } else if (!n.space.single_level(&level)) {
        fail(s_.loc, "loop over '" + n.var + "' iterates " + n.space.str() + ": a union of sparse levels is not lowered yet");
      }
      for (auto& l : n.located)
        if (!enclosing_.count(p_.outer_var(l)) || walking_.count(l))
          fail(s_.loc, "the loop over '" + n.var + "' co-iterates " + l + ", whose row '" + p_.outer_var(l) + "' no enclosing loop binds");
      if (level.empty() && n.sched.simd() && !n.sched.simd_reduction().empty()) {
        simd_sum(n);
        return;
      }
      if (!level.empty() && level == S_) {
        output_rows(n);
        return;
      }
      if (!level.empty()) {
        if (walking_.count(level))
          fail(s_.loc, "the loop over '" + n.var + "' walks " + level + " inside another walk over " + level +
                           ": nested walks over one sparse operand are not lowered (write the inner sum so that it is hoisted)");
        const Node* fl = nullptr;
        for (auto& k : n.kids)
          if (k->sched.register_tile) fl = k.get();
        if (fl) {
          tiled_walk(n, level, *fl);
        } else {
          walk(n, level, WalkMode{});
        }
        return;
      }
      if (n.sched.simd()) line("#pragma omp simd");
      const bool from = n.var == tile_var_ && !tile_begin_.empty();
      open("for (int64_t " + n.var + " = " + (from ? tile_begin_ : "0") + "; " + n.var + " < n_" + n.var + "; ++" + n.var + ") {");
      enter(n);
      enclosing_.insert(n.var);
      for (auto& k : n.kids) node(*k);
      enclosing_.erase(n.var);
      close();
      return;
    }
  }
}

// One loop over the stored entries of the current row (column) of `level`.
void KernelEmitter::walk(const Node& n, const std::string& level, const WalkMode& mode) {
  walking_.insert(level);
  const bool prefetch_scope = prefetch_setup(level, n, mode);
  open("for (index_t " + pos(level) + " = " + level + "_rb; " + pos(level) + " < " + level + "_re; ++" + pos(level) + ") {");
  bool csc = p_.walks_csc(level);
  line("const int64_t " + n.var + " = static_cast<int64_t>(" + level + (csc ? "_row[" : "_col[") + pos(level) + "]);");
  line("(void)" + n.var + ";");
  line(std::string("const int64_t ") + edge(level) + " = " + (csc ? level + "_perm[" + pos(level) + "]" : "static_cast<int64_t>(" + pos(level) + ")") + ";");
  line("(void)" + edge(level) + ";");
  prefetch(level, n, mode);
  locate(n);
  enter(n);
  enclosing_.insert(n.var);
  for (auto& k : n.kids) {
    if (k.get() == mode.f_loop && mode.lanes > 0) {
      tile_body(*k, mode);
    } else {
      node(*k);
    }
  }
  enclosing_.erase(n.var);
  close();
  if (prefetch_scope) close();
  walking_.erase(level);
  for (auto& l : n.located) walking_.erase(l);
}

// The other levels of a co-iteration at the walked coordinate: their position (p_L, e_L) in
// the row the enclosing loops bind, or the next coordinate when one of them lacks it
// (a product over A&B exists only where both store an entry).
void KernelEmitter::locate(const Node& n) {
  for (size_t k = 0; k < n.located.size(); ++k) {
    const std::string& L = n.located[k];
    if (L == S_) {
      insert_output(n.var);
      continue;
    }
    bool csc = p_.walks_csc(L);
    if (n.located_by_map[k]) {
      line("const int64_t " + pos(L) + " = static_cast<int64_t>(loc_" + L + "[" + n.var + "]);");
    } else {
      line("const int64_t " + pos(L) + " = runtime::find_sorted(" + L + (csc ? "_row" : "_col") + ", static_cast<int64_t>(" + L +
           "_rb), static_cast<int64_t>(" + L + "_re), " + n.var + ");");
    }
    line("if (" + pos(L) + " < 0) continue;");
    line(std::string("const int64_t ") + edge(L) + " = " + (csc ? L + "_perm[" + pos(L) + "]" : pos(L)) + ";");
    line("(void)" + edge(L) + ";");
    walking_.insert(L);
  }
}

// The row map of L: loc_L[column] = CSR position in the current row, -1 elsewhere. Filled when
// the top loop enters a row, cleared when it leaves (O(row) each, never O(columns)).
void KernelEmitter::fill_maps(const Node& top, bool fill) {
  std::set<std::string> maps;
  mapped_levels(top, &maps);
  maps.erase(S_);
  for (auto& L : maps) {
    bool csc = p_.walks_csc(L);
    open("for (index_t q_ = " + L + "_rb; q_ < " + L + "_re; ++q_) {");
    line("loc_" + L + "[" + L + (csc ? "_row" : "_col") + "[q_]] = " + (fill ? "q_" : "index_t(-1)") + ";");
    close();
  }
}

void KernelEmitter::map_workspaces(const Node& top) {
  std::set<std::string> maps;
  mapped_levels(top, &maps);
  maps.erase(S_);
  for (auto& L : maps) {
    // Positions in the index dtype (they fit: the operand's own row pointers hold them).
    line("std::vector<index_t> locv_" + L + "(static_cast<size_t>(n_" + p_.inner_var(L) + "), index_t(-1));");
    line("index_t* __restrict__ loc_" + L + " = locv_" + L + ".data();");
  }
}

// A dense innermost loop summing into the scalar `r` (a dot product): GCC does not reliably
// vectorise `omp simd reduction` inside the kernels' nests, so the sum runs in 8 explicit
// lanes over blocks of 8 (a plain simd loop) and a scalar tail, then adds the lanes.
void KernelEmitter::simd_sum(const Node& n) {
  const std::string& v = n.var;
  const std::string r = n.sched.simd_reduction();
  auto body = [&] {
    enter(n);
    enclosing_.insert(v);
    for (auto& k : n.kids) node(*k);
    enclosing_.erase(v);
  };
  open("{");
  line("acc_t " + r + "_lanes_[8] = {};");
  line("int64_t " + v + "_ = 0;");
  open("for (; " + v + "_ + 8 <= n_" + v + "; " + v + "_ += 8) {");
  line("#pragma omp simd");
  open("for (int64_t " + v + "_l = 0; " + v + "_l < 8; ++" + v + "_l) {");
  line("const int64_t " + v + " = " + v + "_ + " + v + "_l;");
  lane_sum_ = r;  // the sum is spelled as its lane
  lane_var_ = v;
  body();
  lane_sum_.clear();
  close();
  close();
  open("for (int64_t " + v + " = " + v + "_; " + v + " < n_" + v + "; ++" + v + ") {");
  body();
  close();
  line(r + " += ((" + r + "_lanes_[0] + " + r + "_lanes_[1]) + (" + r + "_lanes_[2] + " + r + "_lanes_[3])) + ((" + r + "_lanes_[4] + " + r +
       "_lanes_[5]) + (" + r + "_lanes_[6] + " + r + "_lanes_[7]));");
  close();
}

// The body of a top-level row loop: row bounds and temporaries, row maps, the children.
void KernelEmitter::row_body(const Node& n) {
  enter(n);
  fill_maps(n, true);
  enclosing_.insert(n.var);
  for (auto& k : n.kids) node(*k);
  enclosing_.erase(n.var);
  fill_maps(n, false);
}

// ---- assembly: the output pattern S built with the values (`<op>_assemble`) ----
// The nest of the numeric kernel, with S's row taken from a per-thread sparse workspace
// (runtime::SymbolicWorkspace, policy per row from the product count as in the symbolic
// pass) instead of an input: where the numeric kernel locates S (and skips products outside
// it), the assembling kernel inserts the coordinate and gets its slot in the row's value
// arrays (temporaries stored by S positions); the walk over S that writes the output row runs
// over the workspace's columns in increasing order, into the task's own column and value
// buffers. Then row pointers, one exact allocation and one copy per task, as in the symbolic
// pass. Products are summed in the same order as in the numeric kernel.
void KernelEmitter::assemble_top(const Node& n) {
  if (n.kind != Node::Kind::Loop || n.var != p_.outer_var(S_) || !n.space.is_dense() || !n.sched.private_sums().empty())
    fail(s_.loc, "assemble " + S_ + ": the output must be computed under one dense loop over " + S_ + "'s rows");
  for (auto& name : p_.temps)
    if (p_.tensor(name).compressed_by == S_ && p_.tensor(name).compressed_global)
      fail(s_.loc, "assemble " + S_ + ": temporary " + name + " is stored by positions of all of " + S_);
  row_var_ = n.var;
  const std::string& i = n.var;
  open("{");
  line(std::string("const std::vector<int64_t> chunks = ") +
       (n.sched.balance_by.empty() ? "runtime::even_chunks(n_" + i + ")" : "runtime::balanced_chunks(" + ptr(n.sched.balance_by) + ", n_" + i + ")") + ";");
  line("const int64_t tasks_ = static_cast<int64_t>(chunks.size()) - 1;");
  line("std::vector<std::vector<index_t>> part_col_(static_cast<size_t>(std::max<int64_t>(tasks_, 0)));");
  line("std::vector<std::vector<scalar_t>> part_val_(static_cast<size_t>(std::max<int64_t>(tasks_, 0)));");
  open("runtime::parallel_for(0, tasks_, 1, [&](int64_t c_begin, int64_t c_end) {");
  locals();
  workspaces(n);
  map_workspaces(n);
  line("runtime::SymbolicWorkspace ws(n_" + p_.inner_var(S_) + ");");
  line("std::vector<index_t>& out_col_ = part_col_[static_cast<size_t>(c_begin)];");
  line("std::vector<scalar_t>& out_val_ = part_val_[static_cast<size_t>(c_begin)];");
  if (!n.sched.balance_by.empty()) {  // room for about one output entry per nonzero of the balancing operand
    const std::string room = "static_cast<size_t>(" + ptr(n.sched.balance_by) + "[chunks[c_end]] - " + ptr(n.sched.balance_by) + "[chunks[c_begin]])";
    line("out_col_.reserve(" + room + ");");
    line("out_val_.reserve(" + room + ");");
  }
  open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
  open("for (int64_t " + i + " = chunks[ch_]; " + i + " < chunks[ch_ + 1]; ++" + i + ") {");
  row_body(n);
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
// from them by enter()).
void KernelEmitter::begin_output_row(const Node& n) {
  os_ << symbolic_bound_walk(c_, n, depth_);
  line("ws.begin(ub_);");
  line("const index_t " + S_ + "_rb = 0;");
  line("const index_t " + S_ + "_re = static_cast<index_t>(ws.capacity());");
  line("(void)" + S_ + "_rb;");
  line("(void)" + S_ + "_re;");
}

// Where the numeric kernel locates S: insert the coordinate; a new slot starts at the
// temporaries' initial values.
void KernelEmitter::insert_output(const std::string& var) {
  line("bool fresh_ = false;");
  line("const int64_t " + pos(S_) + " = ws.insert_slot(" + var + ", &fresh_);");
  open("if (fresh_) {");
  for (auto& name : p_.temps)
    if (p_.tensor(name).compressed_by == S_) line(name + "[" + pos(S_) + " - " + S_ + "_rb] = " + init(name) + ";");
  close();
  line("const int64_t " + edge(S_) + " = " + pos(S_) + ";");
  line("(void)" + edge(S_) + ";");
  walking_.insert(S_);
}

// The walk over S's row: the workspace's columns in increasing order, the output row written
// to the task's buffers.
void KernelEmitter::output_rows(const Node& n) {
  const TensorDecl& out = s_.output();
  if (out.pattern != S_ || out.vars.size() != 2) fail(s_.loc, "assemble " + S_ + ": the output must be a matrix on " + S_);
  line("const int64_t len_ = ws.finish();");
  line("const size_t at_ = out_col_.size();");
  line("out_col_.resize(at_ + static_cast<size_t>(len_));");
  line("out_val_.resize(at_ + static_cast<size_t>(len_));");
  line("scalar_t* __restrict__ " + out.name + " = out_val_.data() + at_;");
  open("for (int64_t k_ = 0; k_ < len_; ++k_) {");
  line("const int64_t " + n.var + " = ws.column(k_);");
  line("const int64_t " + pos(S_) + " = ws.slot(k_);");
  line("const int64_t " + edge(S_) + " = k_;");
  line("(void)" + edge(S_) + ";");
  line("out_col_[at_ + static_cast<size_t>(k_)] = static_cast<index_t>(" + n.var + ");");
  walking_.insert(S_);
  enter(n);
  enclosing_.insert(n.var);
  for (auto& k : n.kids) node(*k);
  enclosing_.erase(n.var);
  walking_.erase(S_);
  close();
  line("prm.out_rowptr[" + row_var_ + " + 1] = len_;");
}

void KernelEmitter::top(const Node& n) {
  if (n.kind != Node::Kind::Loop) {
    node(n);
    return;
  }
  std::string level;
  if (!n.space.single_level(&level) || !level.empty())
    fail(s_.loc, "an outermost loop over '" + n.var + "' must be dense (a csr operand's columns need its row loop outside)");
  open("{");
  if (n.sched.chunks()) {
    const MatmulBlock* gemm = nullptr;
    size_t gemm_kid = 0;
    for (size_t k = 0; k < n.kids.size(); ++k)
      if (n.kids[k]->sched.matmul && !gemm) {
        gemm = n.kids[k]->sched.matmul.get();
        gemm_kid = k;
      }
    if (gemm) pack_dense(*gemm);
    line(std::string("const std::vector<int64_t> chunks = ") +
         (n.sched.balance_by.empty() ? "runtime::even_chunks(n_" + n.var + ")"
                               : "runtime::balanced_chunks(" + ptr(n.sched.balance_by) + ", n_" + n.var + ")") + ";");
    // Sums over the parallel variable: one private copy per call of the body (one per thread),
    // kept by its first chunk and added in chunk order after the loop (reproducible).
    for (auto& t : n.sched.private_sums())
      line("std::vector<std::vector<acc_t>> partial_" + t + "(chunks.size());");
    open("runtime::parallel_for(0, static_cast<int64_t>(chunks.size()) - 1, 1, [&](int64_t c_begin, int64_t c_end) {");
    locals();
    for (auto& name : p_.temps)
      if (!home_of(p_, *c_.tree, name) &&
          std::find(n.sched.private_sums().begin(), n.sched.private_sums().end(), name) == n.sched.private_sums().end())
        line("acc_t* __restrict__ " + name + " = ws_" + name + ".data();  (void)" + name + ";");
    for (auto& t : n.sched.private_sums()) {
      line("std::vector<acc_t> mine_" + t + "(static_cast<size_t>(" + buffer_size(t) + "), " + init(t) + ");");
      line("acc_t* __restrict__ " + t + " = mine_" + t + ".data();");
    }
    if (gemm) {
      workspaces(n, true);
      if (gemm->form == MatmulBlock::Form::Dot) line("std::vector<acc_t> ws_gemm_(static_cast<size_t>(runtime::kRowBlock * n_" + gemm->c + "));");
      open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
      open("for (int64_t ib_ = chunks[ch_]; ib_ < chunks[ch_ + 1]; ib_ += runtime::kRowBlock) {");
      line("const int64_t nb_ = std::min<int64_t>(runtime::kRowBlock, chunks[ch_ + 1] - ib_);");
      block_phase(n, 0, gemm_kid, gemm->overwrite ? gemm->target : "");
      block_product(*gemm);
      block_phase(n, gemm_kid + 1, n.kids.size());
      close();
      close();
    } else {
      workspaces(n);
      map_workspaces(n);
      open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
      open("for (int64_t " + n.var + " = chunks[ch_]; " + n.var + " < chunks[ch_ + 1]; ++" + n.var + ") {");
      row_body(n);
      close();
      close();
    }
    for (auto& t : n.sched.private_sums()) line("partial_" + t + "[static_cast<size_t>(c_begin)] = std::move(mine_" + t + ");");
    close("});");
    for (auto& t : n.sched.private_sums()) {
      open("for (const std::vector<acc_t>& part : partial_" + t + ") {");
      line("#pragma omp simd");
      line("for (size_t x = 0; x < part.size(); ++x) " + t + "[x] += part[x];");
      close();
    }
  } else {
    workspaces(n);
    map_workspaces(n);
    open("for (int64_t " + n.var + " = 0; " + n.var + " < n_" + n.var + "; ++" + n.var + ") {");
    row_body(n);
    close();
  }
  close();
}

}  // namespace gnnfuse::codegen::emit
