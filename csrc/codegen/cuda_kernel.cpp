// The CUDA kernel printer (cuda_kernel.h): the variant's steps, locals, values, statements,
// loops and walks, and the row-split and lanes kernels. The nonzero-balanced kernels and the
// host side: cuda_kernel_pos.cpp.
#include <algorithm>
#include <functional>

#include "codegen/builtins.h"
#include "codegen/cuda_kernel.h"

namespace gnnfuse::codegen::emit {

namespace {

bool is_loop(const imp::Stmt& s) {
  return s.kind == imp::Stmt::Kind::For || s.kind == imp::Stmt::Kind::Walk || s.kind == imp::Stmt::Kind::Parallel;
}

// Every statement under s (s included), in order.
void each(const imp::Stmt& s, const std::function<void(const imp::Stmt&)>& f) {
  f(s);
  for (auto& k : s.body) each(*k, f);
}

void each_value(const imp::Value& v, const std::function<void(const imp::Value&)>& f) {
  f(v);
  for (auto& a : v.args) each_value(*a, f);
}

// The statements of an assembling or pattern kernel, by name (imperative.h).
std::string pattern_stmt(imp::Stmt::Kind k) {
  switch (k) {
    case imp::Stmt::Kind::BuildRows: return "BuildRows";
    case imp::Stmt::Kind::BeginOutputRow: return "BeginOutputRow";
    case imp::Stmt::Kind::CountRow: return "CountRow";
    case imp::Stmt::Kind::Insert: return "Insert";
    case imp::Stmt::Kind::OutputWalk: return "OutputWalk";
    case imp::Stmt::Kind::EndOutputRow: return "EndOutputRow";
    default: return "?";
  }
}

std::string access_text(const Access& a) {
  std::string s = a.tensor + "(";
  for (size_t k = 0; k < a.idx.size(); ++k) s += (k ? "," : "") + a.idx[k];
  return s + ")";
}

}  // namespace

CudaPrinter::CudaPrinter(const Compiled& c, const ScheduleVariant& v, std::string fn)
    : c_(c), p_(c.program), s_(c.spec), variant_(v.name), fn_(std::move(fn)), k_(*v.kernel) {
  plan();
}

void CudaPrinter::add_call_temp(const std::string& name, const std::vector<std::string>& dims, Reduce init, bool fill, const std::string& by) {
  if (!call_names_.insert(name).second) return;
  call_.push_back(CallTemp{name, dims, init, fill, by});
}

const CudaPrinter::CallTemp* CudaPrinter::positional(const std::string& name) const {
  for (auto& t : call_)
    if (t.name == name && !t.by.empty()) return &t;
  return nullptr;
}

// The steps: per top-level loop its phases (kernels) and dense product blocks (hooks).
void CudaPrinter::plan() {
  int kernels = 0;
  // Temporaries stored by the positions of a csr operand's entries (the row workspace of a
  // computed pattern, seed 002): a buffer of the call over that operand's stored entries, each
  // row's slots reset in the kernel (no fill of the whole buffer).
  each(*k_.body, [&](const imp::Stmt& x) {
    if (x.kind != imp::Stmt::Kind::Alloc) return;
    const TensorInfo& t = p_.tensor(x.tensor);
    if (!t.compressed_by.empty()) add_call_temp(x.tensor, {}, x.init, false, t.compressed_by);
  });
  for (auto& sp : k_.body->body) {
    const imp::Stmt& top = *sp;
    if (top.kind == imp::Stmt::Kind::Alloc) {
      add_call_temp(top.tensor, top.dims, top.init, true);
      continue;
    }
    if (!is_loop(top) || top.kind == imp::Stmt::Kind::Walk)
      fail(s_.loc, s_.name + ": the cuda target lowers top-level dense loops only");
    // The loop's statements in order. A row-blocked loop's passes over the rows of a block, before
    // and after its dense product block, are opened: the kernels are cut at the block anyway; the
    // row header each pass starts with is taken once.
    std::vector<const imp::Stmt*> items;
    bool header = false;
    for (auto& k : top.body) {
      if (k->kind != imp::Stmt::Kind::RowPass) {
        items.push_back(k.get());
        continue;
      }
      for (auto& x : k->body)
        if (!header || (x->kind != imp::Stmt::Kind::RowBounds && x->kind != imp::Stmt::Kind::Alloc)) items.push_back(x.get());
      header = true;
    }
    std::vector<const imp::Stmt*> pre;
    for (auto* k : items)
      if (k->kind == imp::Stmt::Kind::RowBounds || k->kind == imp::Stmt::Kind::Alloc) pre.push_back(k);
    std::vector<Step> mine;
    Step cur;
    cur.top = &top;
    cur.body = pre;
    auto flush = [&] {
      bool work = false;
      for (auto* s : cur.body)
        each(*s, [&](const imp::Stmt& x) {
          work = work || x.kind == imp::Stmt::Kind::Assign || x.kind == imp::Stmt::Kind::Accumulate;
        });
      if (work) mine.push_back(cur);
      cur = Step{};
      cur.top = &top;
      cur.body = pre;
    };
    for (auto* k : items) {
      if (k->kind == imp::Stmt::Kind::RowBounds || k->kind == imp::Stmt::Kind::Alloc) continue;
      if (k->kind != imp::Stmt::Kind::Matmul) {
        cur.body.push_back(k);
        continue;
      }
      const MatmulBlock& m = *k->matmul;
      if (m.r.temp) cur.spill.insert(m.r.tensor);
      if (m.form == MatmulBlock::Form::Outer && m.r2.temp) cur.spill.insert(m.r2.tensor);
      // The block's result rows: reset on the host (not in the phase before), read after.
      if (m.form == MatmulBlock::Form::Product && !m.matrix_target) cur.rows.insert(m.target);
      flush();
      Step h;
      h.top = &top;
      h.matmul = &m;
      mine.push_back(h);
      if (m.r.temp) add_call_temp("rows_" + m.r.tensor, {top.var, m.r.var}, Reduce::Sum, false);
      if (m.form == MatmulBlock::Form::Outer && m.r2.temp) add_call_temp("rows_" + m.r2.tensor, {top.var, m.r2.var}, Reduce::Sum, false);
      if (m.form == MatmulBlock::Form::Product && !m.matrix_target) {
        add_call_temp("rows_" + m.target, {top.var, m.c}, Reduce::Sum, !m.overwrite);
        cur.rows.insert(m.target);
      }
    }
    flush();
    for (auto& st : mine) {
      if (st.matmul) {
        steps_.push_back(st);
        continue;
      }
      bool split = false;
      std::string tile, lane;
      std::set<std::string> kept;  // the row buffers' variables
      for (auto* s : st.body)
        each(*s, [&](const imp::Stmt& x) {
          if (x.kind == imp::Stmt::Kind::Walk && x.sched.unit == ParallelUnit::LaneGroup) split = true;
          if (x.kind == imp::Stmt::Kind::For && x.sched.feature_tile > 0) {
            split = true;
            tile = x.var;
          }
          if (x.kind == imp::Stmt::Kind::Alloc && x.dims.size() == 1) kept.insert(x.dims[0]);
          if (x.kind == imp::Stmt::Kind::For && x.sched.unit == ParallelUnit::Lane && (lane.empty() || !kept.count(lane))) lane = x.var;
        });
      const bool pos = !top.sched.balance_by.empty() &&
                       (top.sched.reduction == ReductionStrategy::Segmented || top.sched.reduction == ReductionStrategy::Atomic);
      st.form = pos ? Form::PosSplit : split ? Form::RowSplit : top.sched.unit == ParallelUnit::None ? Form::Serial : Form::Lanes;
      st.tile = st.form == Form::RowSplit || st.form == Form::PosSplit ? tile : lane;
      if (st.form == Form::PosSplit && tile.empty()) st.tile = lane;  // a lanes tree balanced by nonzeros (pos_lanes)
      const bool regs = variant_ == "reg_lanes" || variant_ == "pos_lanes" || variant_ == "pos_lanes_atomic";
      if (regs && st.form == Form::PosSplit) st.form = Form::PosLanes;
      if (variant_ == "pos_lanes" && st.form == Form::Lanes && reg_ok(st) && entrywise(st)) {
        st.form = Form::PosLanes;
        st.entrywise = true;
      }
      if (regs && st.form == Form::Lanes && reg_ok(st)) st.form = Form::RegLanes;
      find_split(st);
      st.kernel = kernels++;
      for (auto* s : st.body)
        each(*s, [&](const imp::Stmt& x) {
          if (x.kind == imp::Stmt::Kind::Walk && x.sched.stage_shared) {
            const TensorDecl* d = s_.find(x.level);
            st.staged = true;
            st.staged_values = st.staged_values || (d && !d->values.empty());
            st.staged_edges = st.staged_edges || x.csc;
          }
          if (x.kind == imp::Stmt::Kind::For &&
              (x.sched.feature_tile > 0 || ((st.form == Form::RegLanes || st.entrywise) && x.sched.unit == ParallelUnit::Lane)))
            for (auto& b : x.body)
              each(*b, [&](const imp::Stmt& y) {
                if (!y.rhs) return;
                each_value(*y.rhs, [&](const imp::Value& v) {
                  if (v.kind == imp::Value::Kind::Read && v.role == Role::DenseInput &&
                      !std::count(st.vec_reads.begin(), st.vec_reads.end(), v.access.tensor))
                    st.vec_reads.push_back(v.access.tensor);
                });
              });
        });
      steps_.push_back(st);
    }
  }
  // After every call temporary is known (tile_rows reads them): which kernels load rows by VW_
  // (the tile loops of the row and pos splits; the lane loops of the register forms, printed as
  // tile loops of C_ = VW_ elements).
  for (auto& st : steps_) {
    if (st.matmul) continue;
    const bool tiled = st.form == Form::RowSplit || st.form == Form::PosSplit;
    const bool regs = st.form == Form::RegLanes || st.form == Form::PosLanes;
    if (!tiled && !regs) continue;
    for (auto* s : st.body)
      each(*s, [&](const imp::Stmt& x) {
        const bool tile = x.kind == imp::Stmt::Kind::For &&
                          (x.sched.feature_tile > 0 || (regs && x.sched.unit == ParallelUnit::Lane));
        if (tile && !tile_rows(x).empty()) st.tile_loads = true;
      });
  }
}

const imp::Stmt* CudaPrinter::find_accumulate(const imp::Stmt& s, const std::string& temp) const {
  const imp::Stmt* out = nullptr;
  each(s, [&](const imp::Stmt& x) {
    if (!out && x.kind == imp::Stmt::Kind::Accumulate && x.lhs.tensor == temp) out = &x;
  });
  return out;
}

// ---------------------------------------------------------------- locals
void CudaPrinter::locals() {
  for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";");
  for (auto& v : s_.order) line("(void)n_" + v + ";");
  for (auto& a : s_.schema.args)
    if (a.type == "float") {
      line("const acc_t arg_" + a.name + " = static_cast<acc_t>(prm." + a.name + ");");
      line("(void)arg_" + a.name + ";");
    }
  auto ptr_line = [&](const std::string& type, const std::string& name, const std::string& field, bool constant) {
    line((constant ? "const " : "") + type + "* __restrict__ " + name + " = static_cast<" + (constant ? "const " : "") + type + "*>(prm." +
         field + ");");
    line("(void)" + name + ";");
  };
  for (auto& t : s_.tensors) {
    switch (t.role) {
      case Role::SparseInput:
        ptr_line("index_t", t.name + "_rowptr", t.name + "_rowptr", true);
        ptr_line("index_t", t.name + "_col", t.name + "_col", true);
        if (!t.values.empty()) ptr_line("scalar_t", t.name + "_val", t.name + "_val", true);
        if (p_.walks_csc(t.name)) {
          ptr_line("index_t", t.name + "_colptr", t.name + "_colptr", true);
          ptr_line("index_t", t.name + "_row", t.name + "_row", true);
          ptr_line("int64_t", t.name + "_perm", t.name + "_perm", true);
        }
        break;
      case Role::DenseInput:
      case Role::EdgeInput: ptr_line(t.acc ? "acc_t" : "scalar_t", t.name, t.name, true); break;
      case Role::SelectInput: ptr_line("int64_t", t.name, t.name, true); break;
      case Role::Output:
        ptr_line(t.acc ? "acc_t" : "scalar_t", t.name, t.name, false);
        if (s_.selects()) ptr_line("int64_t", t.name + "_arg", t.name + "_arg", false);
        break;
      case Role::CountInput:
      case Role::Temp: break;
    }
  }
}

// The temporaries of the whole call, each at a 256-byte aligned offset of the workspace:
// pointers into ws_, or (host, sizes only) their total in at_.
void CudaPrinter::call_pointers(bool sizes_only) {
  line("int64_t at_ = 0;");
  for (auto& t : call_) {
    std::string n = "int64_t(1)";
    for (auto& d : t.dims) n += " * n_" + d;
    if (!t.by.empty()) n = "prm." + t.by + "_nnz";
    if (!sizes_only) {
      line("acc_t* " + t.name + " = reinterpret_cast<acc_t*>(ws_ + at_);");
      line("(void)" + t.name + ";");
    }
    line("at_ += (static_cast<int64_t>(sizeof(acc_t)) * " + n + " + 255) / 256 * 256;");
  }
  line("(void)at_;");
}

// ---------------------------------------------------------------- values
std::string CudaPrinter::offset(const std::vector<std::string>& idx) const {
  if (idx.empty()) return "0";
  std::string o = idx[0];
  for (size_t d = 1; d < idx.size(); ++d) o = "(" + o + ") * n_" + idx[d] + " + " + idx[d];
  return o;
}

std::string CudaPrinter::ptr(const std::string& level) const { return level + (p_.walks_csc(level) ? "_colptr" : "_rowptr"); }

std::string CudaPrinter::init(Reduce r) const {
  switch (r) {
    case Reduce::Sum: return "acc_t(0)";
    case Reduce::Max: return "-cu::infinity<acc_t>()";
    case Reduce::Min: return "cu::infinity<acc_t>()";
  }
  return "";
}

// A temporary of the row (or of an entry): a register, a column of a register tile, an element
// of a row buffer, of the call's workspace, or of a dense product block's result rows.
std::string CudaPrinter::temp_ref(const Access& a) const {
  const std::string& n = a.tensor;
  if (step_ && step_->rows.count(n)) return "rows_" + n + "[" + offset([&] {
                                             std::vector<std::string> i{row_};
                                             i.insert(i.end(), a.idx.begin(), a.idx.end());
                                             return i;
                                           }()) + "]";
  if (const CallTemp* t = positional(n)) return n + "[p_" + t->by + "]";
  if (regs_.count(n)) {
    if (!in_tile_) fail(s_.loc, "internal error: register tile " + n + " read outside its tile loop");
    return n + "[" + kidx_ + "]";
  }
  if (a.idx.empty()) return n;
  return n + "[" + offset(a.idx) + "]";
}

std::string CudaPrinter::read(const imp::Value& v) const {
  const Access& a = v.access;
  const TensorDecl* d = s_.find(a.tensor);
  switch (v.role) {
    case Role::SparseInput: {
      if (d->values.empty()) return "acc_t(1)";
      if (a.tensor == staged_) return staged_value_;
      const std::string e = "e_" + a.tensor;
      if (d->values_optional) return "(" + a.tensor + "_val != nullptr ? cu::load(" + a.tensor + "_val + " + e + ") : acc_t(1))";
      return "cu::load(" + a.tensor + "_val + " + e + ")";
    }
    case Role::DenseInput: {
      auto it = tiles_.find(access_text(a));
      if (in_tile_ && it != tiles_.end()) return it->second + "[k_]";
      if (d->acc) return a.tensor + "[" + offset(a.idx) + "]";
      return "cu::load(" + a.tensor + " + (" + offset(a.idx) + "))";
    }
    case Role::EdgeInput: {
      std::string o = "e_" + d->pattern;
      for (size_t k = 2; k < a.idx.size(); ++k) o = "(" + o + ") * n_" + a.idx[k] + " + " + a.idx[k];
      return d->acc ? a.tensor + "[" + o + "]" : "cu::load(" + a.tensor + " + (" + o + "))";
    }
    case Role::CountInput: {
      const std::string& A = d->pattern;
      const std::string& i = a.idx[0];
      return "static_cast<acc_t>(cu::max_of<int64_t>(1, static_cast<int64_t>(" + A + "_rowptr[" + i + " + 1] - " + A + "_rowptr[" + i + "])))";
    }
    case Role::SelectInput: {
      std::vector<std::string> rest = a.idx;
      rest.erase(rest.begin() + 1);
      return "(" + a.tensor + "[" + offset(rest) + "] == e_" + d->pattern + " ? acc_t(1) : acc_t(0))";
    }
    case Role::Temp: {
      auto it = tiles_.find(access_text(a));
      if (in_tile_ && it != tiles_.end()) return it->second + "[k_]";
      return temp_ref(a);
    }
    case Role::Output: break;
  }
  fail(s_.loc, "internal error: the output is read");
}

std::string CudaPrinter::value(const imp::Value& v) const {
  switch (v.kind) {
    case imp::Value::Kind::Const: return fmt_const(v.value);
    case imp::Value::Kind::Read: return read(v);
    case imp::Value::Kind::Neg: return "(-" + value(*v.args[0]) + ")";
    case imp::Value::Kind::Binary: return "(" + value(*v.args[0]) + " " + v.op + " " + value(*v.args[1]) + ")";
    case imp::Value::Kind::Call: {
      std::string p;
      if (!v.param.empty()) p = v.param_arg.empty() ? fmt_const(v.value) : "arg_" + v.param_arg;
      return spell_function(v.fn, Target::Cuda, value(*v.args[0]), p);
    }
    case imp::Value::Kind::Guard: {
      const std::string& L = v.guard_level;
      const std::string cond = v.row_open ? "(" + L + "_re > " + L + "_rb)"
                                          : "(" + L + "_rowptr[" + v.guard_row + " + 1] != " + L + "_rowptr[" + v.guard_row + "])";
      return "(" + cond + " ? " + value(*v.args[0]) + " : " + value(*v.args[1]) + ")";
    }
  }
  return "";
}

// ---------------------------------------------------------------- statements
// Whether every lane of the group runs the statement with the same values (then one lane writes
// what the group shares).
bool CudaPrinter::uniform_writer() const { return !divergent_; }

void CudaPrinter::assign(const imp::Stmt& s) {
  const TensorInfo& t = p_.tensor(s.lhs.tensor);
  const std::string v = value(*s.rhs);
  const bool acc = s.kind == imp::Stmt::Kind::Accumulate;
  std::vector<std::string> guards;
  if (uniform_writer()) guards.push_back("lane_ == 0");
  if (step_->form == Form::RowSplit && !step_->tile.empty() && !in_tile_) guards.push_back("f0_ == 0");
  if (step_->form == Form::RegLanes && !in_tile_) guards.push_back("c0_ == 0");  // once per row, not per pass
  auto guarded = [&](const std::string& l) {
    std::string cond;
    for (auto& g : guards) cond += (cond.empty() ? "" : " && ") + g;
    line(cond.empty() ? l : "if (" + cond + ") " + l);
  };
  if (t.role == Role::Output) {
    if (acc) fail(s_.loc, "internal error: the output accumulates directly");
    std::string at = offset(s.lhs.idx);
    if (!t.pattern.empty()) {
      at = "e_" + t.pattern;
      for (size_t k = 2; k < s.lhs.idx.size(); ++k) at = "(" + at + ") * n_" + s.lhs.idx[k] + " + " + s.lhs.idx[k];
    }
    if (s_.find(s.lhs.tensor)->acc) guarded(s.lhs.tensor + "[" + at + "] = " + v + ";");
    else guarded("cu::store(" + s.lhs.tensor + " + (" + at + "), " + v + ");");
    return;
  }
  if (split_body_ && s.lhs.tensor == step_->split_temp) {  // the lane's term of its entry (find_split)
    const std::string at = "p_" + positional(s.lhs.tensor)->by;
    if (step_->split_free) {
      line(temp_ref(s.lhs) + " += " + v + ";");
    } else {
      line("pos_ = " + at + ";");
      line("add_ = " + v + ";");
    }
    return;
  }
  if (call_names_.count(s.lhs.tensor)) {
    if (positional(s.lhs.tensor) && (divergent_ || (step_->form != Form::Lanes && step_->form != Form::Serial)))
      fail(s_.loc, s_.name + ": temporary " + s.lhs.tensor +
                       " (stored by positions) is written by lanes that split a walk; the cuda target writes it from one lane of the row's group");
    if (positional(s.lhs.tensor) && s.kind == imp::Stmt::Kind::Accumulate && s.reduce != Reduce::Sum)
      fail(s_.loc, s_.name + ": temporary " + s.lhs.tensor + " (stored by positions): only sums are lowered for cuda");
    const std::string ref = positional(s.lhs.tensor) ? temp_ref(s.lhs) : s.lhs.tensor + "[" + offset(s.lhs.idx) + "]";
    const auto& red = step_->top->sched.reduced;
    if (acc && step_->top->sched.reduction == ReductionStrategy::Atomic && std::count(red.begin(), red.end(), s.lhs.tensor)) {
      if (s.reduce != Reduce::Sum) fail(s_.loc, s_.name + ": a max / min over the rows of the grid is not lowered for cuda");
      guarded("cu::atomic_add(&" + ref + ", " + v + ");");
    } else {
      guarded(ref + (acc ? " += " : " = ") + v + ";");
    }
    return;
  }
  const std::string ref = temp_ref(s.lhs);
  if (!acc) {
    line(ref + " = " + v + ";");
    return;
  }
  if (s.reduce == Reduce::Sum) {
    line(ref + " += " + v + ";");
    return;
  }
  const bool max = s.reduce == Reduce::Max;
  if (s.arg_out.empty()) {
    line(ref + " = cu::" + (max ? "max_nan(" : "min_nan(") + ref + ", " + v + ");");
    return;
  }
  const std::string pos = "e_" + s_.reduced_operand()->name;
  if (args_.count(s.lhs.tensor)) {  // a position shadow, combined with the value and stored after the walk
    const std::string at = regs_.count(s.lhs.tensor) ? s.lhs.tensor + "_at[k_]" : s.lhs.tensor + "_at";
    line(std::string("cu::arg_step<") + (max ? "true" : "false") + ">(" + ref + ", " + at + ", " + v + ", " + pos + ");");
    return;
  }
  // The lane owns the element: the position goes to the output as the CPU kernel writes it.
  open("{");
  line("const acc_t v_ = " + v + ";");
  line(std::string("const bool take_ = (v_ ") + (max ? ">" : "<") + " " + ref + ") || (v_ != v_ && " + ref + " == " + ref + ");");
  line("if (take_) " + ref + " = v_;");
  std::vector<std::string> out = s_.output().vars;
  guards.push_back("take_");
  guarded(s.arg_out + "[" + offset(out) + "] = " + pos + ";");
  close();
}

void CudaPrinter::fill(const imp::Stmt& s) {
  const std::string& n = s.tensor;
  if (step_->rows.count(n)) return;  // a dense product block's result: its rows are reset on the host
  const std::string v = init(s.init);
  if (const CallTemp* t = positional(n)) {  // the row's slots, by the lane that writes them
    if (divergent_) fail(s_.loc, "internal error: temporary " + n + " (stored by positions) reset by split lanes");
    const std::string& S = t->by;
    if (step_->split) {  // the group's lanes split the slots; the walk's lanes read them after the barrier
      line("for (int64_t x_ = static_cast<int64_t>(" + S + "_rb) + lane_; x_ < static_cast<int64_t>(" + S + "_re); x_ += G_) " + n + "[x_] = " + v + ";");
      line("__syncwarp(mask_);");
      return;
    }
    line("if (lane_ == 0)");
    line("  for (int64_t x_ = static_cast<int64_t>(" + S + "_rb); x_ < static_cast<int64_t>(" + S + "_re); ++x_) " + n + "[x_] = " + v + ";");
    return;
  }
  if (regs_.count(n)) {
    line("GNNFUSE_UNROLL");
    line("for (int k_ = 0; k_ < " + regs_len_ + "; ++k_) " + n + "[k_] = " + v + ";");
    if (args_.count(n)) {
      line("GNNFUSE_UNROLL");
      line("for (int k_ = 0; k_ < C_; ++k_) " + n + "_at[k_] = -1;");
    }
    return;
  }
  const TensorInfo& t = p_.tensor(n);
  if (t.kept_dims.empty()) {
    line(n + " = " + v + ";");
    if (args_.count(n)) line(n + "_at = -1;");
    return;
  }
  if (thread_bufs_.count(n)) {
    std::string size = "int64_t(1)";
    for (auto& d : t.kept_dims) size += " * n_" + d;
    line("for (int64_t x_ = 0; x_ < " + size + "; ++x_) " + n + "[x_] = " + v + ";");
    return;
  }
  // A row buffer of the group: each lane fills the elements it owns (its columns of the lane
  // variable), so no lane waits for another.
  open("{");
  std::vector<std::string> idx;
  for (size_t d = 0; d < t.kept_dims.size(); ++d) {
    const std::string& dim = t.kept_dims[d];
    const std::string x = "d" + std::to_string(d) + "_";
    if (dim == step_->tile) open("for (int64_t " + x + " = lane_; " + x + " < n_" + dim + "; " + x + " += G_) {");
    else open("for (int64_t " + x + " = 0; " + x + " < n_" + dim + "; ++" + x + ") {");
    idx.push_back(x);
  }
  std::string o = idx[0];
  for (size_t d = 1; d < idx.size(); ++d) o = "(" + o + ") * n_" + t.kept_dims[d] + " + " + idx[d];
  line(n + "[" + o + "] = " + v + ";");
  for (size_t d = 0; d < idx.size(); ++d) close();
  close();
}

void CudaPrinter::statement(const imp::Stmt& s) {
  switch (s.kind) {
    case imp::Stmt::Kind::Block:
      for (auto& k : s.body) statement(*k);
      return;
    case imp::Stmt::Kind::RowBounds: {
      const TensorDecl* d = s_.find(s.level);
      const auto [rb, re] = row_bounds(p_, *d, s.var);
      line("const index_t " + s.level + "_rb = " + rb + ";");
      line("const index_t " + s.level + "_re = " + re + ";");
      line("(void)" + s.level + "_rb;");
      line("(void)" + s.level + "_re;");
      return;
    }
    case imp::Stmt::Kind::Alloc: {
      const std::string& n = s.tensor;
      if (regs_.count(n)) {  // set by its fill (an accumulator) or its assignments
        line("acc_t " + n + "[" + regs_len_ + "];");
        if (args_.count(n)) line("long long " + n + "_at[C_];");
      } else if (s.dims.empty()) {
        line("acc_t " + n + " = " + init(s.init) + ";");
        line("(void)" + n + ";");
        if (args_.count(n)) line("long long " + n + "_at = -1;");
      }
      return;  // row buffers: the kernel's (lanes_buffers)
    }
    case imp::Stmt::Kind::Fill: fill(s); return;
    case imp::Stmt::Kind::Assign:
    case imp::Stmt::Kind::Accumulate: assign(s); return;
    case imp::Stmt::Kind::Locate: {
      const std::string& L = s.level;
      line("const int64_t p_" + L + " = cu::find_sorted(" + L + (s.csc ? "_row" : "_col") + ", static_cast<int64_t>(" + L +
           "_rb), static_cast<int64_t>(" + L + "_re), " + s.var + ");");
      line("if (p_" + L + " < 0) continue;");
      line("const int64_t e_" + L + " = " + (s.csc ? L + "_perm[p_" + L + "]" : "p_" + L) + ";");
      line("(void)e_" + L + ";");
      return;
    }
    case imp::Stmt::Kind::For:
    case imp::Stmt::Kind::Parallel: loop(s); return;
    case imp::Stmt::Kind::Walk: walk(s); return;
    case imp::Stmt::Kind::Matmul: fail(s_.loc, "internal error: a dense product block inside a kernel");
    case imp::Stmt::Kind::RowPass: fail(s_.loc, "internal error: a pass over the rows of a block inside a kernel");
    // Storage once per worker: a kernel's row buffers are placed at their Alloc (registers,
    // lanes_buffers: shared memory or the launch workspace), per group or per lane.
    case imp::Stmt::Kind::Workspace: return;
    // Row maps: a Locate searches the row on CUDA (the schedule asks for no map; none is kept).
    case imp::Stmt::Kind::MapWorkspace:
    case imp::Stmt::Kind::FillMap:
    case imp::Stmt::Kind::ClearMap: return;
    // The assembling and pattern kernels of a `symbolic S` op (refused by the schedule first).
    case imp::Stmt::Kind::BuildRows:
    case imp::Stmt::Kind::BeginOutputRow:
    case imp::Stmt::Kind::CountRow:
    case imp::Stmt::Kind::Insert:
    case imp::Stmt::Kind::OutputWalk:
    case imp::Stmt::Kind::EndOutputRow:
      fail(s_.loc, s_.name + ": the cuda target does not lower the statement building an output pattern (" + pattern_stmt(s.kind) +
                       ") (issue 26: symbolic and assembling kernels on CUDA)");
  }
}

void CudaPrinter::loop(const imp::Stmt& s) {
  if (reg_form() && (s.sched.unit == ParallelUnit::Lane || s.sched.feature_tile > 0)) {
    reg_lane_loop(s);
    return;
  }
  if (s.sched.feature_tile > 0 && (step_->form == Form::RowSplit || step_->form == Form::PosSplit)) {
    tile_loop(s);
    return;
  }
  const std::string& v = s.var;
  if (s.sched.unit == ParallelUnit::Lane) {
    const bool was = divergent_;
    open("for (int64_t " + v + " = lane_; " + v + " < n_" + v + "; " + v + " += G_) {");
    divergent_ = true;
    for (auto& k : s.body) statement(*k);
    divergent_ = was;
    close();
    combine(s, s.sched.reduced);
    return;
  }
  open("for (int64_t " + v + " = 0; " + v + " < n_" + v + "; ++" + v + ") {");
  for (auto& k : s.body) statement(*k);
  close();
}

// A tile loop: the C_ columns of the row's tile, the rows it reads loaded a tile at a time
// (VW_ elements per load).
std::vector<std::pair<Access, bool>> CudaPrinter::tile_rows(const imp::Stmt& s) const {
  const std::string& v = s.var;
  std::vector<std::pair<Access, bool>> rows;  // (access, accumulation type)
  for (auto& b : s.body)
    each(*b, [&](const imp::Stmt& x) {
      if (!x.rhs) return;
      each_value(*x.rhs, [&](const imp::Value& r) {
        if (r.kind != imp::Value::Kind::Read || r.access.idx.empty() || r.access.idx.back() != v ||
            std::count(r.access.idx.begin(), r.access.idx.end(), v) != 1)
          return;
        const bool dense = r.role == Role::DenseInput;
        const bool call = r.role == Role::Temp && call_names_.count(r.access.tensor);
        if (!dense && !call) return;
        for (auto& [a, _] : rows)
          if (a == r.access) return;
        rows.push_back({r.access, call || s_.find(r.access.tensor)->acc});
      });
    });
  return rows;
}

void CudaPrinter::tile_loop(const imp::Stmt& s) {
  const std::string& v = s.var;
  const std::vector<std::pair<Access, bool>> rows = tile_rows(s);
  std::map<std::string, std::string> saved = tiles_;
  for (size_t k = 0; k < rows.size(); ++k) {
    const Access& a = rows[k].first;
    const std::string name = a.tensor + "_t" + std::to_string(k) + "_";
    std::vector<std::string> base = a.idx;
    base.back() = "0";
    std::string o = base[0];
    for (size_t d = 1; d < base.size(); ++d) o = "(" + o + ") * n_" + a.idx[d] + " + " + base[d];
    line("acc_t " + name + "[C_];");
    if (rows[k].second) line("cu::load_tile<acc_t, C_, VWA_>(" + name + ", " + a.tensor + " + (" + o + "), f0_, n_" + v + ");");
    else line("cu::load_tile<scalar_t, C_, VW_>(" + name + ", " + a.tensor + " + (" + o + "), f0_, n_" + v + ");");
    tiles_[access_text(a)] = name;
  }
  line("GNNFUSE_UNROLL");
  open("for (int k_ = 0; k_ < C_; ++k_) {");
  line("const int64_t " + v + " = f0_ + k_;");
  open("if (" + v + " < n_" + v + ") {");
  const bool was = in_tile_;
  in_tile_ = true;
  for (auto& k : s.body) statement(*k);
  in_tile_ = was;
  close();
  close();
  tiles_ = saved;
}

// The lanes' partial values of `temps` (summed, or max / min, over the loop's iterations each
// lane took) combined over the group; every lane then holds the result.
void CudaPrinter::combine(const imp::Stmt& loop, const std::vector<std::string>& temps) {
  for (auto& t : temps) {
    const imp::Stmt* a = find_accumulate(loop, t);
    if (!a) continue;
    const std::string op = a->reduce == Reduce::Sum ? "group_sum" : a->reduce == Reduce::Max ? "group_max" : "group_min";
    const bool arg = args_.count(t) > 0;
    const std::string kmax = a->reduce == Reduce::Max ? "true" : "false";
    if (regs_.count(t)) {
      line("GNNFUSE_UNROLL");
      if (arg) line("for (int k_ = 0; k_ < C_; ++k_) cu::group_arg<" + kmax + ">(" + t + "[k_], " + t + "_at[k_], G_, mask_);");
      else line("for (int k_ = 0; k_ < C_; ++k_) " + t + "[k_] = cu::" + op + "(" + t + "[k_], G_, mask_);");
    } else if (arg) {
      line("cu::group_arg<" + kmax + ">(" + t + ", " + t + "_at, G_, mask_);");
    } else {
      const std::string ref = temp_ref(a->lhs);
      line(ref + " = cu::" + op + "(" + ref + ", G_, mask_);");
    }
    if (!arg) continue;
    // The positions of the combined max / min go to the output (one lane writes).
    const std::vector<std::string>& out = s_.output().vars;
    std::vector<std::string> idx;
    for (auto& o : out) {
      if (o != row_ && o != step_->tile) fail(s_.loc, "internal error: the position of " + t + " over " + o);
      idx.push_back(o);
    }
    if (regs_.count(t)) {
      open("if (lane_ == 0) {");
      line("GNNFUSE_UNROLL");
      open("for (int k_ = 0; k_ < C_; ++k_) {");
      line("const int64_t " + step_->tile + " = f0_ + k_;");
      line("if (" + step_->tile + " < n_" + step_->tile + ") " + a->arg_out + "[" + offset(idx) + "] = " + t + "_at[k_];");
      close();
      close();
    } else {
      line("if (lane_ == 0) " + a->arg_out + "[" + offset(idx) + "] = " + t + "_at;");
    }
  }
}

void CudaPrinter::walk_entry(const imp::Stmt& s, const std::string& p) {
  const std::string& L = s.level;
  line("const int64_t " + s.var + " = static_cast<int64_t>(" + L + (s.csc ? "_row[" : "_col[") + p + "]);");
  line("(void)" + s.var + ";");
  line("const int64_t e_" + L + " = " + (s.csc ? L + "_perm[" + p + "]" : "static_cast<int64_t>(" + p + ")") + ";");
  line("(void)e_" + L + ";");
  for (auto& k : s.body) statement(*k);
}

// A walk over a `single` operand by rows: one entry (by columns a single operand has any number).
bool CudaPrinter::row_single(const imp::Stmt& w) const { return s_.find(w.level)->single && !w.csc; }

// Lanes, a row workspace by positions (Step::split): the walk whose entries go to the row group's
// lanes one each, around the kernel's one sum into the temporary (by S: stored at S's positions).
//   free     the innermost walk around the sum that defines the position, when it is a walk over
//            S itself: each lane owns the positions of its entries and adds there directly, in
//            its entry's own order (walks of any kind may nest: the coarsening adjoint's S walk
//            around A's row);
//   ordered  else the innermost walk around the sum not over a `single` operand by rows, when it
//            contains the Locate of the position and only such single walks nest in it: one term
//            per lane and entry, added by cu::ordered_add (B's row in SpGEMM, A's in coarsening).
// Its body may write only the sum and scalar temporaries of its own, and not read the workspace.
// The mean row of the walked operand sizes the group (KernelShape::split_mean).
void CudaPrinter::find_split(Step& st) const {
  if (st.form != Form::Lanes || !st.tile.empty()) return;
  struct Frame {
    const imp::Stmt* walk;
    bool defines;  // the position of the sum's temporary is this walk's, or located in its body
  };
  const imp::Stmt* acc = nullptr;
  int sums = 0;
  for (auto* s : st.body)
    each(*s, [&](const imp::Stmt& x) {
      if (x.kind == imp::Stmt::Kind::Accumulate && positional(x.lhs.tensor)) {
        ++sums;
        acc = &x;
      }
    });
  if (sums != 1 || acc->reduce != Reduce::Sum) return;
  const std::string by = positional(acc->lhs.tensor)->by;
  // The walks around the sum, outermost first, and which define the position: a walk over S (by
  // rows), or a walk whose body locates in S.
  std::vector<Frame> frames;
  {
    std::vector<Frame> stack;
    std::function<bool(const imp::Stmt&)> find = [&](const imp::Stmt& x) {
      if (&x == acc) {
        frames = stack;
        return true;
      }
      if (x.kind == imp::Stmt::Kind::Locate && x.level == by && !stack.empty()) stack.back().defines = true;
      const bool walk = x.kind == imp::Stmt::Kind::Walk;
      if (walk) stack.push_back({&x, x.level == by && !x.csc});
      for (auto& k : x.body)
        if (find(*k)) return true;
      if (walk) stack.pop_back();
      return false;
    };
    for (auto* s : st.body)
      if (find(*s)) break;
  }
  int def = -1;  // the innermost frame defining the position
  for (int k = static_cast<int>(frames.size()) - 1; k >= 0 && def < 0; --k)
    if (frames[k].defines) def = k;
  if (def < 0) return;
  const imp::Stmt* walk = nullptr;
  bool free = false;
  if (frames[def].walk->level == by && !frames[def].walk->csc) {
    walk = frames[def].walk;
    free = true;
  } else {
    int w = -1;
    for (int k = static_cast<int>(frames.size()) - 1; k >= 0 && w < 0; --k)
      if (!row_single(*frames[k].walk)) w = k;
    if (w < 0 || w > def) return;  // (the position must vary over the split walk's entries)
    walk = frames[w].walk;
  }
  std::set<std::string> local;
  each(*walk, [&](const imp::Stmt& x) {
    if (x.kind == imp::Stmt::Kind::Alloc && x.dims.empty() && !call_names_.count(x.tensor)) local.insert(x.tensor);
  });
  bool ok = true;
  for (auto& k : walk->body)
    each(*k, [&](const imp::Stmt& x) {
      if (x.rhs)
        each_value(*x.rhs, [&](const imp::Value& v) { ok = ok && !(v.kind == imp::Value::Kind::Read && v.access.tensor == acc->lhs.tensor); });
      switch (x.kind) {
        case imp::Stmt::Kind::Walk: ok = ok && (free || row_single(x)); break;
        case imp::Stmt::Kind::Locate: ok = ok && !x.by_map && !(free && x.level == by); break;
        case imp::Stmt::Kind::RowBounds: break;
        case imp::Stmt::Kind::Alloc:
        case imp::Stmt::Kind::Fill: ok = ok && local.count(x.tensor); break;
        case imp::Stmt::Kind::Assign:
        case imp::Stmt::Kind::Accumulate: ok = ok && (&x == acc || local.count(x.lhs.tensor)); break;
        default: ok = false;
      }
    });
  if (!ok) return;
  st.split = walk;
  st.split_temp = acc->lhs.tensor;
  st.split_free = free;
}

// The Step::split walk: lane q takes the entries q, q + G, ... of the row. Where the lanes write
// their own entries' positions (split_free) each adds directly; else each chunk of G entries
// computes its terms (a lane's position pos_, -1 for none) and cu::ordered_add adds them, lanes
// meeting at a position one after another in entry order: every position gets its terms in the
// order of the serial walk (chunks in order, then lanes), whatever the group: deterministic,
// and the CPU kernel's order (equal to its results where neither compiler contracts the
// multiply and add into an FMA, as in the emulator; nvcc may). Barriers before and after.
void CudaPrinter::split_walk(const imp::Stmt& s) {
  const std::string& L = s.level;
  const std::string p = "p_" + L;
  const bool was = divergent_;
  divergent_ = true;
  split_body_ = true;
  line("__syncwarp(mask_);  // (what the group wrote before, visible to every lane)");
  if (step_->split_free) {
    strided_walk(s);
    line("__syncwarp(mask_);");
  } else {
    const std::string b = "b_" + L;
    open("for (int64_t " + b + " = " + L + "_rb; " + b + " < " + L + "_re; " + b + " += G_) {  // (int64: no index_t overflow past the end)");
    line("const int64_t " + p + " = " + b + " + lane_;");
    line("int64_t pos_ = -1;");
    line("acc_t add_ = acc_t(0);");
    open("if (" + p + " < " + L + "_re) do {  // (a locate's `continue` leaves the entry)");
    walk_entry(s, p);
    close("} while (false);");
    line("cu::ordered_add(" + step_->split_temp + ", pos_, add_, mask_);");
    close();
  }
  split_body_ = false;
  divergent_ = was;
}

// The group's lanes split the walk: lane l takes its entries l, l + G, l + 2G, ...
void CudaPrinter::strided_walk(const imp::Stmt& s) {
  const std::string& L = s.level;
  const std::string p = "p_" + L;
  const bool was = divergent_;
  open("for (index_t " + p + " = " + L + "_rb + static_cast<index_t>(lane_); " + p + " < " + L + "_re; " + p + " += static_cast<index_t>(G_)) {");
  divergent_ = true;
  walk_entry(s, p);
  divergent_ = was;
  close();
}

// Whether every entry of walk s is written apart: its body only reads and assigns the output at
// the entry's own position (the output stored on the walked operand), through walks over
// `single` operands at most. Then its entries may go to the lanes one each.
bool CudaPrinter::entry_writes(const imp::Stmt& s) const {
  bool ok = true, writes = false;
  for (auto& k : s.body)
    each(*k, [&](const imp::Stmt& x) {
      switch (x.kind) {
        case imp::Stmt::Kind::Walk: ok = ok && row_single(x); break;
        case imp::Stmt::Kind::RowBounds: break;
        case imp::Stmt::Kind::Assign: {
          const TensorInfo& t = p_.tensor(x.lhs.tensor);
          ok = ok && t.role == Role::Output && t.pattern == s.level;
          writes = true;
          break;
        }
        default: ok = false;
      }
    });
  return ok && writes;
}

void CudaPrinter::walk(const imp::Stmt& s) {
  const std::string& L = s.level;
  const std::string p = "p_" + L;
  if (&s == step_->split && !divergent_) {
    split_walk(s);
    return;
  }
  if (step_->split && !divergent_ && step_->form == Form::Lanes && entry_writes(s)) {
    // After the split walk: the lanes store the row's entries one each, once every lane's adds are done.
    line("__syncwarp(mask_);");
    strided_walk(s);
    return;
  }
  if (s.sched.unit == ParallelUnit::LaneGroup && step_->form == Form::RowSplit) {
    strided_walk(s);
    combine(s, s.sched.reduced);
    return;
  }
  if (s.sched.stage_shared && !divergent_ && step_->form == Form::RegLanes) {
    broadcast_walk(s);
    return;
  }
  if (s.sched.stage_shared && !divergent_ && (step_->form == Form::Lanes || step_->form == Form::Serial)) {
    staged_walk(s);
    return;
  }
  open("for (index_t " + p + " = " + L + "_rb; " + p + " < " + L + "_re; ++" + p + ") {");
  walk_entry(s, p);
  close();
}

// The blocks of G_ entries of a walk the group takes together: b_<L> the first, n_q_ their count.
void CudaPrinter::entry_blocks(const imp::Stmt& s) {
  const std::string& L = s.level;
  const std::string b = "b_" + L;
  open("for (index_t " + b + " = " + L + "_rb; " + b + " < " + L + "_re; " + b + " += static_cast<index_t>(G_)) {");
  line("const int n_q_ = static_cast<int>(" + L + "_re - " + b + " < static_cast<index_t>(G_) ? " + L + "_re - " + b + " : static_cast<index_t>(G_));");
}

// The value of a walk's stored entry `e` (its edge id), as the accumulation type.
std::string CudaPrinter::entry_value(const imp::Stmt& s, const std::string& e) const {
  const std::string& L = s.level;
  if (s_.find(L)->values_optional) return L + "_val != nullptr ? cu::load(" + L + "_val + " + e + ") : acc_t(1)";
  return "cu::load(" + L + "_val + " + e + ")";
}

// A walk the whole group takes together, its entries staged in shared memory G at a time (one
// coalesced load per lane), then read by every lane from there.
void CudaPrinter::staged_walk(const imp::Stmt& s) {
  const std::string& L = s.level;
  const std::string p = "p_" + L;
  const std::string b = "b_" + L;
  const TensorDecl* d = s_.find(L);
  const bool values = d && !d->values.empty();
  entry_blocks(s);
  line("__syncwarp(mask_);");
  open("if (lane_ < n_q_) {");
  line("sj_[lane_] = " + L + (s.csc ? "_row[" : "_col[") + b + " + lane_];");
  const std::string e = s.csc ? L + "_perm[" + b + " + lane_]" : "static_cast<int64_t>(" + b + " + lane_)";
  if (s.csc) line("se_[lane_] = " + e + ";");
  if (values) line("sv_[lane_] = " + entry_value(s, s.csc ? "se_[lane_]" : e) + ";");
  close();
  line("__syncwarp(mask_);");
  open("for (int q_ = 0; q_ < n_q_; ++q_) {");
  line("const index_t " + p + " = " + b + " + static_cast<index_t>(q_);");
  line("(void)" + p + ";");
  line("const int64_t " + s.var + " = static_cast<int64_t>(sj_[q_]);");
  line("(void)" + s.var + ";");
  line("const int64_t e_" + L + " = " + (s.csc ? "se_[q_]" : "static_cast<int64_t>(" + p + ")") + ";");
  line("(void)e_" + L + ";");
  const std::string was = staged_;
  staged_ = values ? L : "";
  for (auto& k : s.body) statement(*k);
  staged_ = was;
  close();
  close();
}

// The rows of a dense product block's operands, stored whole for the hook at the end of a row.
void CudaPrinter::spill() {
  for (auto& t : step_->spill) {
    const TensorInfo& ti = p_.tensor(t);
    const std::string& x = ti.kept_dims.at(0);
    const std::string dst = "rows_" + t + "[(" + row_ + ") * n_" + x + " + ";
    if (regs_.count(t)) {
      open("if (lane_ == 0) {");
      line("GNNFUSE_UNROLL");
      line("for (int k_ = 0; k_ < C_; ++k_) if (f0_ + k_ < n_" + x + ") " + dst + "f0_ + k_] = " + t + "[k_];");
      close();
    } else if (group_bufs_.count(t)) {
      line("for (int64_t x_ = lane_; x_ < n_" + x + "; x_ += G_) " + dst + "x_] = " + t + "[x_];");
    } else {
      line("if (lane_ == 0) for (int64_t x_ = 0; x_ < n_" + x + "; ++x_) " + dst + "x_] = " + t + "[x_];");
    }
  }
}

// ---------------------------------------------------------------- kernels
std::string CudaPrinter::kernel_name(const Step& st, const std::string& suffix) const {
  return fn_ + "_k" + std::to_string(st.kernel) + suffix;
}

void CudaPrinter::kernel_head(const Step& st, bool vec, bool regs) {
  line(std::string("template <typename scalar_t, typename index_t") + (vec ? ", int VW_" : "") + (regs ? ", int R_" : "") + ">");
  open("GNNFUSE_GLOBAL void " + kernel_name(st) + "(const " + s_.name + "_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {");
  line("using acc_t = cu::acc_t<scalar_t>;");
  line("(void)ws_;");
  if (regs) {
    line("constexpr int C_ = VW_;  // elements per lane of a register chunk (R_ chunks)");
    line("(void)C_;  // unused by a pos lanes kernel of an entrywise walk");
    line("constexpr int VWA_ = VW_ > 1 ? cu::kVec128<acc_t> : 1;");
    line("(void)VWA_;");
  } else if (vec) {
    line("constexpr int C_ = " + std::to_string(8) + ";  // the feature tile: columns per thread");
    line("constexpr int VWA_ = VW_ > 1 ? cu::kVec128<acc_t> : 1;");
    line("(void)VWA_;");
  }
  locals();
  call_pointers(false);
  line("const int G_ = kl_.group;");
  line("const int lane_ = cu::group_lane(G_);");
  line("const unsigned mask_ = cu::group_mask(G_);");
  line("(void)mask_;");
}

// The context of a kernel's statements: its row variable, what lives in registers, which
// temporaries carry a position.
void CudaPrinter::setup_row_context(const Step& st) {
  step_ = &st;
  row_ = st.top->var;
  regs_.clear();
  group_bufs_.clear();
  thread_bufs_.clear();
  args_.clear();
  tiles_.clear();
  divergent_ = false;
  in_tile_ = false;
  const bool reg = st.form == Form::RegLanes || st.form == Form::PosLanes;
  kidx_ = reg ? "r_ * C_ + k_" : "k_";
  regs_len_ = reg ? "R_ * C_" : "C_";
  std::set<std::string> used;
  for (auto* s : st.body)
    each(*s, [&](const imp::Stmt& x) {
      if (x.kind == imp::Stmt::Kind::Fill) used.insert(x.tensor);
      if (x.kind == imp::Stmt::Kind::Assign || x.kind == imp::Stmt::Kind::Accumulate) {
        used.insert(x.lhs.tensor);
        each_value(*x.rhs, [&](const imp::Value& v) {
          if (v.kind == imp::Value::Kind::Read) used.insert(v.access.tensor);
        });
        if (x.kind == imp::Stmt::Kind::Accumulate && !x.arg_out.empty() && st.form != Form::Lanes && st.form != Form::Serial && !reg)
          args_.insert(x.lhs.tensor);
      }
    });
  for (auto* s : st.body)
    each(*s, [&](const imp::Stmt& x) {
      if (x.kind != imp::Stmt::Kind::Alloc || x.dims.empty() || !used.count(x.tensor) || st.rows.count(x.tensor) || positional(x.tensor))
        return;
      if (st.form == Form::RowSplit || st.form == Form::PosSplit || reg) {
        if (x.dims != std::vector<std::string>{st.tile}) fail(s_.loc, "internal error: row buffer " + x.tensor + " is not over the tile");
        regs_.insert(x.tensor);
      } else if (std::count(x.dims.begin(), x.dims.end(), st.tile)) {
        group_bufs_.emplace(x.tensor, static_cast<int>(group_bufs_.size()));
      } else {
        thread_bufs_.emplace(x.tensor, static_cast<int>(thread_bufs_.size()));
      }
    });
}

void CudaPrinter::row_kernel(const Step& st) {
  setup_row_context(st);
  const bool tiled = !st.tile.empty();
  line("// " + std::string(tiled ? "row split: groups of G_ lanes per (row " + row_ + ", tile of C_ columns of " + st.tile + ")"
                                 : "row split: groups of G_ lanes per row " + row_));
  kernel_head(st, true);
  line("const int64_t per_block_ = static_cast<int64_t>(blockDim.x) / G_;");
  line("const int64_t tiles_ = " + (tiled ? "(n_" + st.tile + " + C_ - 1) / C_" : std::string("1")) + ";");
  open("for (int64_t t_ = static_cast<int64_t>(blockIdx.x) * per_block_ + static_cast<int64_t>(threadIdx.x) / G_; t_ < n_" + row_ +
       " * tiles_; t_ += static_cast<int64_t>(gridDim.x) * per_block_) {");
  line("const int64_t " + row_ + " = t_ / tiles_;");
  line("const int64_t f0_ = (t_ % tiles_) * C_;");
  line("(void)f0_;");
  for (auto* s : st.body) statement(*s);
  spill();
  close();
  close();
  line("");
}

// Row buffers of a lanes kernel: per group (kept over the lane variable; each lane owns its
// columns) and per lane (the others), in shared memory or the workspace (KernelLaunch::
// buffers_shared), after the staged entries.
void CudaPrinter::lanes_buffers(const Step& st) {
  auto elems = [&](const std::map<std::string, int>& bufs) {
    std::string n = "int64_t(0)";
    std::vector<std::pair<int, std::string>> order;
    for (auto& [t, k] : bufs) order.push_back({k, t});
    std::sort(order.begin(), order.end());
    for (auto& [k, t] : order) {
      std::string e = "int64_t(1)";
      for (auto& d : p_.tensor(t).kept_dims) e += " * n_" + d;
      line("const int64_t at_" + t + "_ = " + n + ";");
      n += " + " + e;
    }
    return n;
  };
  line("const int64_t gib_ = static_cast<int64_t>(threadIdx.x) / G_;");
  line("const int64_t per_block_ = static_cast<int64_t>(blockDim.x) / G_;");
  line("const int64_t group_ = static_cast<int64_t>(blockIdx.x) * per_block_ + gib_;");
  line("GNNFUSE_DYNAMIC_SHARED(unsigned char, smem_);");
  line("(void)smem_;");
  // Staged entries: [edge ids (CSC)][values][indices], blockDim.x of each.
  std::string at = "int64_t(0)";
  line("const int64_t lane0_ = static_cast<int64_t>(threadIdx.x) - lane_;");
  line("(void)lane0_;");
  if (st.staged_edges) {
    line("int64_t* se_ = reinterpret_cast<int64_t*>(smem_ + " + at + ") + lane0_;");
    at += " + 8 * static_cast<int64_t>(blockDim.x)";
  }
  if (st.staged_values) {
    line("acc_t* sv_ = reinterpret_cast<acc_t*>(smem_ + " + at + ") + lane0_;");
    at += " + static_cast<int64_t>(sizeof(acc_t)) * blockDim.x";
  }
  if (st.staged) {
    line("index_t* sj_ = reinterpret_cast<index_t*>(smem_ + " + at + ") + lane0_;");
    line("(void)sj_;");
    at += " + static_cast<int64_t>(sizeof(index_t)) * blockDim.x";
  }
  line("const int64_t stage_ = (" + at + " + 15) / 16 * 16;");
  const std::string g = elems(group_bufs_);
  line("const int64_t gelems_ = " + g + ";");
  const std::string t = elems(thread_bufs_);
  line("const int64_t telems_ = " + t + ";");
  line("const int64_t region_ = (gelems_ + G_ * telems_) * static_cast<int64_t>(sizeof(acc_t));");
  line("unsigned char* bufs_ = kl_.buffers_shared ? smem_ + stage_ + gib_ * region_ : ws_ + kl_.workspace_offset + group_ * region_;");
  line("(void)bufs_;");
  for (auto& [n, k] : group_bufs_) line("acc_t* " + n + " = reinterpret_cast<acc_t*>(bufs_) + at_" + n + "_;");
  for (auto& [n, k] : thread_bufs_) line("acc_t* " + n + " = reinterpret_cast<acc_t*>(bufs_) + gelems_ + lane_ * telems_ + at_" + n + "_;");
}

void CudaPrinter::lanes_kernel(const Step& st) {
  setup_row_context(st);
  const bool serial = st.form == Form::Serial;
  line("// " + std::string(serial ? "serial: one group of G_ lanes runs the loop over " + row_
                                  : "lanes: groups of G_ lanes per row " + row_) +
       (st.tile.empty() ? "" : ", the lanes over " + st.tile));
  kernel_head(st, false);
  lanes_buffers(st);
  if (serial) {
    line("if (group_ != 0) return;");
    open("for (int64_t " + row_ + " = 0; " + row_ + " < n_" + row_ + "; ++" + row_ + ") {");
  } else {
    open("for (int64_t " + row_ + " = group_; " + row_ + " < n_" + row_ + "; " + row_ + " += static_cast<int64_t>(gridDim.x) * per_block_) {");
  }
  for (auto* s : st.body) statement(*s);
  spill();
  close();
  close();
  line("");
}

std::string CudaPrinter::kernels() {
  os_.str("");
  depth_ = 0;
  for (auto& st : steps_) {
    if (st.matmul) continue;
    switch (st.form) {
      case Form::RowSplit: row_kernel(st); break;
      case Form::PosSplit:
        pos_kernel(st);
        if (st.top->sched.reduction == ReductionStrategy::Segmented) pos_fixup(st);
        break;
      case Form::Lanes:
      case Form::Serial: lanes_kernel(st); break;
      case Form::RegLanes: reg_lanes_kernel(st); break;
      case Form::PosLanes:
        pos_lanes_kernel(st);
        if (st.top->sched.reduction == ReductionStrategy::Segmented) pos_fixup(st);
        break;
    }
  }
  step_ = nullptr;
  return os_.str();
}

}  // namespace gnnfuse::codegen::emit
