// The CUDA kernel printer, continued (cuda_kernel.h): the register forms of the lanes kernels
// (GE-SpMM / cuSPARSE CSR_ALG2-like). The lanes split the dense (feature) loops: lane l of a
// group of G_ owns the C_ = VW_ consecutive elements (r_ G_ + l) C_ .. + C_ - 1 of the lane
// variable for r_ < R_ (VW_ and R_ template parameters chosen at launch), so the group's loads
// of a feature row are 16-byte vectors, coalesced across the group, and the row's accumulators
// stay in registers. The group walks the row's entries together: G_ of them loaded at once
// (one index and value per lane) and broadcast by shuffles, one store per row.
//   RegLanes  a group per row (rows in a grid-stride loop; with the columns in several passes of
//             G_ R_ C_ where the kernel only keeps elements of the lane variable apart);
//   PosLanes  a group per chunk of kl_.chunk stored entries whatever the rows (nonzero-balanced):
//             the first row found by binary search, rows that start and end in the chunk stored,
//             the others added by atomics (pos_lanes_atomic) or written as carries the fix-up
//             kernel adds in chunk order (pos_lanes, deterministic: pos_fixup).
// Dot products over the lane variable (sddmm's, an attention logit) are partial sums per lane
// combined by a shuffle tree over the group (combine), as in the lanes form.
#include <algorithm>

#include "codegen/cuda_kernel.h"

namespace gnnfuse::codegen::emit {

namespace {

void each_stmt(const imp::Stmt& s, const std::function<void(const imp::Stmt&)>& f) {
  f(s);
  for (auto& k : s.body) each_stmt(*k, f);
}

void each_read(const imp::Value& v, const std::function<void(const imp::Value&)>& f) {
  if (v.kind == imp::Value::Kind::Read) f(v);
  for (auto& a : v.args) each_read(*a, f);
}

// The temporaries a statement writes or reads.
void touched(const imp::Stmt& x, const std::function<void(const std::string&)>& f) {
  if (x.kind == imp::Stmt::Kind::Fill) f(x.tensor);
  if (x.kind != imp::Stmt::Kind::Assign && x.kind != imp::Stmt::Kind::Accumulate) return;
  f(x.lhs.tensor);
  each_read(*x.rhs, [&](const imp::Value& v) { f(v.access.tensor); });
}

}  // namespace

bool CudaPrinter::reg_form() const { return step_ && (step_->form == Form::RegLanes || step_->form == Form::PosLanes); }

// Whether a lanes kernel keeps its row buffers in registers: each is kept over the lane variable
// alone and only touched inside the lane loops (a fill aside), it stores no rows for a dense
// product block, and no buffer is kept per lane.
bool CudaPrinter::reg_ok(const Step& st) const {
  if (st.form != Form::Lanes || !st.spill.empty()) return false;
  std::set<std::string> bufs;
  bool ok = true;
  for (auto* s : st.body)
    each_stmt(*s, [&](const imp::Stmt& x) {
      if (x.kind != imp::Stmt::Kind::Alloc || x.dims.empty() || st.rows.count(x.tensor)) return;
      if (st.tile.empty() || x.dims != std::vector<std::string>{st.tile}) ok = false;
      bufs.insert(x.tensor);
    });
  std::function<void(const imp::Stmt&, bool)> rec = [&](const imp::Stmt& x, bool lanes) {
    lanes = lanes || (x.kind == imp::Stmt::Kind::For && x.sched.unit == ParallelUnit::Lane && x.var == st.tile);
    if (!lanes && x.kind != imp::Stmt::Kind::Fill)
      touched(x, [&](const std::string& t) { ok = ok && !bufs.count(t); });
    for (auto& k : x.body) rec(*k, lanes);
  };
  for (auto* s : st.body) rec(*s, false);
  return ok;
}

// Whether a register kernel may cover its lane variable in several passes (each pass a row's
// columns c0_ .. c0_ + G_ R_ C_): no lane loop sums over it (a dot product needs every column).
bool CudaPrinter::reg_passes(const Step& st) const {
  if (st.form == Form::PosLanes) return true;
  bool ok = true;
  for (auto* s : st.body)
    each_stmt(*s, [&](const imp::Stmt& x) {
      if (x.kind == imp::Stmt::Kind::For && x.sched.unit == ParallelUnit::Lane && !x.sched.reduced.empty()) ok = false;
    });
  return ok;
}

// The columns of the lane's register chunks: f0_ the first of chunk r_ (c0_ the pass's first).
void CudaPrinter::reg_columns(const std::string& v, const std::string& c0, const std::function<void()>& body) {
  line("GNNFUSE_UNROLL");
  open("for (int r_ = 0; r_ < R_; ++r_) {");
  line("const int64_t f0_ = " + c0 + " + (static_cast<int64_t>(r_) * G_ + lane_) * C_;");
  open("if (f0_ < n_" + v + ") {");
  body();
  close();
  close();
}

// A lane loop (or the pos split's tile loop): over the lane's register chunks where it touches
// a row buffer, else strided over the whole extent, C_ elements (one vector load) at a time.
void CudaPrinter::reg_lane_loop(const imp::Stmt& s) {
  const std::string& v = s.var;
  bool uses = false;
  each_stmt(s, [&](const imp::Stmt& x) { touched(x, [&](const std::string& t) { uses = uses || regs_.count(t); }); });
  const bool was = divergent_;
  divergent_ = true;
  const std::string c0 = v == step_->tile ? "c0_" : "int64_t(0)";
  if (uses) {
    reg_columns(v, c0, [&] { tile_loop(s); });
  } else {
    open("for (int64_t f0_ = " + c0 + " + static_cast<int64_t>(lane_) * C_; f0_ < n_" + v + "; f0_ += static_cast<int64_t>(G_) * C_) {");
    tile_loop(s);
    close();
  }
  divergent_ = was;
  combine(s, s.sched.reduced);
}

// The entries [b, b + n_q_) of walk s: lane q_ loads entry b + q_'s index (edge id) and value.
void CudaPrinter::broadcast_entries(const imp::Stmt& s, const std::string& b) {
  const std::string& L = s.level;
  const TensorDecl* d = s_.find(L);
  const bool values = d && !d->values.empty();
  line("index_t mj_ = 0;");
  if (s.csc) line("int64_t me_ = 0;");
  if (values) line("acc_t mv_ = acc_t(0);");
  open("if (lane_ < n_q_) {");
  line("mj_ = " + L + (s.csc ? "_row[" : "_col[") + b + " + lane_];");
  if (s.csc) line("me_ = " + L + "_perm[" + b + " + lane_];");
  if (values) line("mv_ = " + entry_value(s, s.csc ? "me_" : "static_cast<int64_t>(" + b + " + lane_)") + ";");
  close();
}

// A walk the whole group takes together (RegLanes): G_ entries loaded at once, then each
// broadcast to the group by shuffles.
void CudaPrinter::broadcast_walk(const imp::Stmt& s) {
  const std::string& L = s.level;
  const std::string p = "p_" + L;
  const std::string b = "b_" + L;
  const TensorDecl* d = s_.find(L);
  const bool values = d && !d->values.empty();
  entry_blocks(s);
  broadcast_entries(s, b);
  open("for (int q_ = 0; q_ < n_q_; ++q_) {");
  line("const index_t " + p + " = " + b + " + static_cast<index_t>(q_);");
  line("(void)" + p + ";");
  line("const int64_t " + s.var + " = static_cast<int64_t>(__shfl_sync(mask_, mj_, q_, G_));");
  line("(void)" + s.var + ";");
  line("const int64_t e_" + L + " = " + (s.csc ? "__shfl_sync(mask_, me_, q_, G_)" : "static_cast<int64_t>(" + p + ")") + ";");
  line("(void)e_" + L + ";");
  if (values) line("const acc_t sv_ = __shfl_sync(mask_, mv_, q_, G_);");
  const std::string was = staged_;
  staged_ = values ? L : "";
  staged_value_ = "sv_";
  for (auto& k : s.body) statement(*k);
  staged_value_ = "sv_[q_]";
  staged_ = was;
  close();
  close();
}

void CudaPrinter::reg_lanes_kernel(const Step& st) {
  setup_row_context(st);
  const std::string& v = st.tile;
  const bool passes = !regs_.empty() && reg_passes(st);
  line("// reg lanes: groups of G_ lanes per row " + row_ + (v.empty() ? "" : ", the lanes over " + v + " (R_ chunks of C_ elements per lane, in registers)") +
       ", the row's entries loaded G_ at a time and broadcast by shuffles");
  kernel_head(st, true, true);
  line("const int64_t per_block_ = static_cast<int64_t>(blockDim.x) / G_;");
  line("const int64_t group_ = static_cast<int64_t>(blockIdx.x) * per_block_ + static_cast<int64_t>(threadIdx.x) / G_;");
  line("const int64_t cols_ = static_cast<int64_t>(G_) * R_ * C_;  // columns per pass");
  line("(void)cols_;");
  line("const int64_t passes_ = " + (passes ? "(n_" + v + " + cols_ - 1) / cols_" : std::string("int64_t(1)")) + ";");
  open("for (int64_t t_ = group_; t_ < n_" + row_ + " * passes_; t_ += static_cast<int64_t>(gridDim.x) * per_block_) {");
  line("const int64_t " + row_ + " = passes_ == 1 ? t_ : t_ / passes_;");
  line("const int64_t c0_ = passes_ == 1 ? 0 : (t_ % passes_) * cols_;");
  line("(void)c0_;");
  for (auto* s : st.body) statement(*s);
  close();
  close();
  line("");
}

// Entry q_at_ of a chunk (its index and value broadcast from lane q_), then the walk's body.
void CudaPrinter::chunk_entry(const imp::Stmt& w) {
  const std::string& L = w.level;
  const std::string p = "p_" + L;
  line("const index_t " + p + " = static_cast<index_t>(q_at_);");
  line("(void)" + p + ";");
  line("const int64_t " + w.var + " = static_cast<int64_t>(__shfl_sync(mask_, mj_, q_, G_));");
  line("(void)" + w.var + ";");
  line("const int64_t e_" + L + " = " + (w.csc ? "__shfl_sync(mask_, me_, q_, G_)" : "q_at_") + ";");
  line("(void)e_" + L + ";");
  const TensorDecl* d = s_.find(L);
  const bool values = d && !d->values.empty();
  if (values) line("const acc_t sv_ = __shfl_sync(mask_, mv_, q_, G_);");
  staged_ = values ? L : "";
  staged_value_ = "sv_";
  for (auto& k : w.body) statement(*k);
  staged_value_ = "sv_[q_]";
  staged_ = "";
}

// A group per (chunk of kl_.chunk stored entries, pass of G_ R_ C_ columns): the entries walked
// in order with the row's sums in registers; a row is stored when it ends (or at the chunk's end):
// whole where it began and ended in the chunk, else a carry (slot 0 where it began before the
// chunk, slot 1 with its row where it goes on past it) or an atomic addition.
void CudaPrinter::pos_lanes_kernel(const Step& st) {
  if (st.entrywise) {
    entry_lanes_kernel(st);
    return;
  }
  setup_row_context(st);
  const imp::Stmt* w = nullptr;
  const imp::Stmt* store = nullptr;
  for (auto* s : st.body) {
    if (s->kind == imp::Stmt::Kind::Walk && !w) w = s;
    if (s->kind == imp::Stmt::Kind::For && s->var == st.tile) store = s;
  }
  if (!w || !store || store->body.size() != 1) fail(s_.loc, "internal error: a pos lanes kernel without its walk and store");
  const std::string& acc = st.top->sched.reduced.at(0);
  const std::string& out = store->body[0]->lhs.tensor;
  const std::string& v = st.tile;
  const std::string P = ptr(st.top->sched.balance_by);
  const bool det = st.top->sched.reduction == ReductionStrategy::Segmented;
  const std::string at = out + " + (" + row_ + " * n_" + v + " + " + v + ")";
  const std::string put = s_.find(out)->acc ? "*(" + at + ") = x_;" : "cu::store(" + at + ", x_);";
  const std::string cut = det ? "carry_[(c_ * 2 + (head_ ? 1 : 0)) * n_" + v + " + " + v + "] = x_;" : "cu::atomic_add(" + at + ", x_);";
  // The row's sums out: stored whole, or cut by a chunk border.
  auto flush = [&] {
    line("const bool head_ = static_cast<int64_t>(" + P + "[" + row_ + "]) >= cb_;  // the row began in the chunk");
    line("const bool whole_ = head_ && re_ <= ce_;");
    line("(void)head_;");
    reg_columns(v, "c0_", [&] {
      line("GNNFUSE_UNROLL");
      open("for (int k_ = 0; k_ < C_; ++k_) {");
      line("const int64_t " + v + " = f0_ + k_;");
      open("if (" + v + " < n_" + v + ") {");
      line("const acc_t x_ = " + acc + "[r_ * C_ + k_];");
      line("if (whole_) " + put);
      line("else " + cut);
      close();
      close();
    });
  };
  line("// pos lanes: a group of G_ lanes per chunk of kl_.chunk entries of " + st.top->sched.balance_by + ", the lanes over " + v +
       " (R_ chunks of C_ elements per lane, in registers), rows cut by a chunk border " +
       (det ? "added in order by " + kernel_name(st, "_fixup") : "added by atomics"));
  kernel_head(st, true, true);
  chunks(P, det, false);
  line("const int64_t per_block_ = static_cast<int64_t>(blockDim.x) / G_;");
  line("const int64_t group_ = static_cast<int64_t>(blockIdx.x) * per_block_ + static_cast<int64_t>(threadIdx.x) / G_;");
  line("const int64_t cols_ = static_cast<int64_t>(G_) * R_ * C_;  // columns per pass");
  line("const int64_t passes_ = (n_" + v + " + cols_ - 1) / cols_;");
  open("for (int64_t t_ = group_; t_ < chunks_ * passes_; t_ += static_cast<int64_t>(gridDim.x) * per_block_) {");
  line("const int64_t c_ = passes_ == 1 ? t_ : t_ / passes_;");
  line("const int64_t c0_ = passes_ == 1 ? 0 : (t_ % passes_) * cols_;");
  line("const int64_t cb_ = c_ * kl_.chunk;");
  line("const int64_t ce_ = cb_ + kl_.chunk < nnz_ ? cb_ + kl_.chunk : nnz_;");
  line("int64_t " + row_ + " = cu::row_of(" + P + ", n_" + row_ + ", cb_);");
  line("int64_t re_ = static_cast<int64_t>(" + P + "[" + row_ + " + 1]);");
  line("acc_t " + acc + "[R_ * C_];");
  line("GNNFUSE_UNROLL");
  line("for (int k_ = 0; k_ < R_ * C_; ++k_) " + acc + "[k_] = acc_t(0);");
  open("for (int64_t b_ = cb_; b_ < ce_; b_ += G_) {");
  line("const int n_q_ = static_cast<int>(ce_ - b_ < G_ ? ce_ - b_ : G_);");
  broadcast_entries(*w, "b_");
  open("for (int q_ = 0; q_ < n_q_; ++q_) {");
  line("const int64_t q_at_ = b_ + q_;");
  open("if (q_at_ >= re_) {  // the row ended: its sums out, on to the entry's row");
  flush();
  line("GNNFUSE_UNROLL");
  line("for (int k_ = 0; k_ < R_ * C_; ++k_) " + acc + "[k_] = acc_t(0);");
  line("do ++" + row_ + "; while (static_cast<int64_t>(" + P + "[" + row_ + " + 1]) <= q_at_);");
  line("re_ = static_cast<int64_t>(" + P + "[" + row_ + " + 1]);");
  close();
  chunk_entry(*w);
  close();
  close();
  open("if (ce_ > cb_) {  // the row open at the chunk's end");
  flush();
  if (det) line("if (c0_ == 0 && lane_ == 0) carry_row_[c_] = head_ && !whole_ ? " + row_ + " : -1;");
  close();
  close();
  close();
  line("");
}

// A phase that is one walk of its row, staged, with nothing else but the row's bounds: each
// entry's work stands alone (schedule_cuda's entrywise).
bool CudaPrinter::entrywise(const Step& st) const {
  const imp::Stmt* w = nullptr;
  for (auto* s : st.body) {
    if (s->kind == imp::Stmt::Kind::RowBounds) continue;
    if (s->kind != imp::Stmt::Kind::Walk || !s->sched.stage_shared || w) return false;
    w = s;
  }
  if (!w) return false;
  for (auto* s : st.body)  // the walk's level is bounded by the row itself
    if (s->kind == imp::Stmt::Kind::RowBounds && s->level == w->level && s->var == st.top->var) return true;
  return false;
}

// The entrywise form of pos lanes: a group per chunk of kl_.chunk stored entries (an sddmm's
// entries on skewed rows), each entry's row followed as the chunk goes; nothing to combine
// across entries, so no carries and no atomics.
void CudaPrinter::entry_lanes_kernel(const Step& st) {
  setup_row_context(st);
  const imp::Stmt* w = nullptr;
  for (auto* s : st.body)
    if (s->kind == imp::Stmt::Kind::Walk) w = s;
  const std::string& L = w->level;
  const std::string P = ptr(L);
  line("// pos lanes: a group of G_ lanes per chunk of kl_.chunk entries of " + L + (st.tile.empty() ? "" : ", the lanes over " + st.tile) +
       ", each entry's row " + row_ + " followed along the chunk");
  kernel_head(st, true, true);
  chunks(P, false, false);
  line("const int64_t per_block_ = static_cast<int64_t>(blockDim.x) / G_;");
  line("const int64_t group_ = static_cast<int64_t>(blockIdx.x) * per_block_ + static_cast<int64_t>(threadIdx.x) / G_;");
  line("const int64_t c0_ = 0;");
  line("(void)c0_;");
  open("for (int64_t c_ = group_; c_ < chunks_; c_ += static_cast<int64_t>(gridDim.x) * per_block_) {");
  line("const int64_t cb_ = c_ * kl_.chunk;");
  line("const int64_t ce_ = cb_ + kl_.chunk < nnz_ ? cb_ + kl_.chunk : nnz_;");
  line("int64_t " + row_ + " = cu::row_of(" + P + ", n_" + row_ + ", cb_);");
  line("int64_t re_ = static_cast<int64_t>(" + P + "[" + row_ + " + 1]);");
  open("for (int64_t b_ = cb_; b_ < ce_; b_ += G_) {");
  line("const int n_q_ = static_cast<int>(ce_ - b_ < G_ ? ce_ - b_ : G_);");
  broadcast_entries(*w, "b_");
  open("for (int q_ = 0; q_ < n_q_; ++q_) {");
  line("const int64_t q_at_ = b_ + q_;");
  open("if (q_at_ >= re_) {  // on to the entry's row");
  line("do ++" + row_ + "; while (static_cast<int64_t>(" + P + "[" + row_ + " + 1]) <= q_at_);");
  line("re_ = static_cast<int64_t>(" + P + "[" + row_ + " + 1]);");
  close();
  for (auto* s : st.body)
    if (s->kind == imp::Stmt::Kind::RowBounds) statement(*s);
  chunk_entry(*w);
  close();
  close();
  close();
  close();
  line("");
}

// The launch of a register kernel: its vector width and register chunks as template arguments.
// Element loads (VW 1: F not whole vectors, or unaligned) take 8 chunks whatever kl_.regs: a
// superset of the columns the launch asked for (a chunk past the row is skipped, the grid-stride
// loop covers the passes the kernel counts), one instantiation instead of four.
void CudaPrinter::reg_launch(const Step& st, const std::string& dims) {
  setup_row_context(st);
  const std::string name = kernel_name(st);
  std::vector<int> rs = regs_.empty() ? std::vector<int>{1} : std::vector<int>{8, 4, 2, 1};
  auto launches = [&](const std::string& vw) {
    for (size_t k = 0; k < rs.size(); ++k) {
      const std::string r = std::to_string(rs[k]);
      const std::string l = "GNNFUSE_LAUNCH((" + name + "<scalar_t, index_t, " + vw + ", " + r + ">), " + dims + ");";
      if (k + 1 == rs.size()) line(rs.size() > 1 ? "else " + l : l);
      else line(std::string(k ? "else " : "") + "if (kl_.regs >= " + r + ") " + l);
    }
  };
  if (!st.tile_loads) {  // nothing loaded by VW_: the VW_ = 1 instance alone (vector_ok false)
    if (!regs_.empty()) rs = {8};
    launches("1");
    return;
  }
  open("if (kl_.vector_width > 1) {");
  launches("cu::kVec128<scalar_t>");
  close();
  open("else {");
  if (!regs_.empty()) rs = {8};
  launches("1");
  close();
}

}  // namespace gnnfuse::codegen::emit
