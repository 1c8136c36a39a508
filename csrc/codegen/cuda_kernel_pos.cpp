// The CUDA kernel printer, continued (cuda_kernel.h): the nonzero-balanced kernels (pos split,
// seed 001's nonzero split with seed 000's segmented reduction) and the host side of a variant:
// the shape of its kernels for the launch decision, and its launch function.
#include <algorithm>

#include "codegen/cuda_kernel.h"

namespace gnnfuse::codegen::emit {

namespace {

void each_stmt_(const imp::Stmt& s, const std::function<void(const imp::Stmt&)>& f) {
  f(s);
  for (auto& k : s.body) each_stmt_(*k, f);
}

const imp::Stmt* first(const std::vector<const imp::Stmt*>& body, imp::Stmt::Kind kind) {
  for (auto* s : body)
    if (s->kind == kind) return s;
  return nullptr;
}

}  // namespace

// The chunks of the stored entries (the row pointers P's last gives their count) and, with
// carries, the workspace of the row each chunk's slot 1 belongs to and the two slots per chunk.
void CudaPrinter::chunks(const std::string& P, bool carries, bool read_only) {
  const std::string c = read_only ? "const " : "";
  line("const int64_t nnz_ = static_cast<int64_t>(" + P + "[n_" + row_ + "]);");
  line("const int64_t chunks_ = (nnz_ + kl_.chunk - 1) / kl_.chunk;");
  if (!carries) return;
  line(c + "int64_t* carry_row_ = reinterpret_cast<" + c + "int64_t*>(ws_ + kl_.workspace_offset);");
  line(c + "acc_t* carry_ = reinterpret_cast<" + c + "acc_t*>(carry_row_ + kl_.chunks);");
}

// A warp per (chunk of kl_.chunk stored entries, tile of C_ columns): 32 entries per step, one
// per lane; the lanes' products reduced by row (segment_sums); each run of a row that ends in
// the step is stored by its head lane when the row lies wholly in the chunk, else it is a carry
// (its chunk's slot 0); the run still open at the chunk's end is a carry too (slot 1 when the row
// began in the chunk, with its row, slot 0 otherwise). The fix-up kernel adds a row's carries in
// chunk order (Segmented); the atomic form adds them to the zeroed output instead (Atomic).
void CudaPrinter::pos_kernel(const Step& st) {
  setup_row_context(st);
  const imp::Stmt* w = first(st.body, imp::Stmt::Kind::Walk);
  const imp::Stmt* store = nullptr;
  for (auto* s : st.body)
    if (s->kind == imp::Stmt::Kind::For && s->var == st.tile) store = s;
  if (!w || !store || store->body.size() != 1) fail(s_.loc, "internal error: a pos split kernel without its walk and store");
  const std::string& acc = st.top->sched.reduced.at(0);
  const std::string& out = store->body[0]->lhs.tensor;
  const std::string& v = st.tile;
  const std::string P = ptr(st.top->sched.balance_by);
  const bool det = st.top->sched.reduction == ReductionStrategy::Segmented;
  const bool acc_out = s_.find(out)->acc;
  auto put = [&](const std::string& row, const std::string& x) {
    const std::string at = out + " + (static_cast<int64_t>(" + row + ") * n_" + v + " + " + v + ")";
    return acc_out ? "*(" + at + ") = " + x + ";" : "cu::store(" + at + ", " + x + ");";
  };
  auto add = [&](const std::string& row, const std::string& x) {
    return "cu::atomic_add(" + out + " + (static_cast<int64_t>(" + row + ") * n_" + v + " + " + v + "), " + x + ");";
  };
  auto columns = [&](const std::string& body) {
    line("GNNFUSE_UNROLL");
    open("for (int k_ = 0; k_ < C_; ++k_) {");
    line("const int64_t " + v + " = f0_ + k_;");
    line("if (" + v + " < n_" + v + ") " + body);
    close();
  };
  line("// pos split: a warp per (chunk of kl_.chunk entries of " + st.top->sched.balance_by + ", tile of C_ columns of " + v +
       "), a segmented reduction by row " + row_ + (det ? ", carries added in order by " + kernel_name(st, "_fixup") : ", atomics at the chunk borders"));
  kernel_head(st, true);
  chunks(P, det, false);
  line("const int64_t tiles_ = (n_" + v + " + C_ - 1) / C_;");
  line("const int64_t warps_ = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);");
  open("for (int64_t w_ = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; w_ < chunks_ * tiles_; w_ += warps_) {");
  line("const int64_t c_ = w_ / tiles_;");
  line("const int64_t f0_ = (w_ % tiles_) * C_;");
  line("const int64_t cb_ = c_ * kl_.chunk;");
  line("const int64_t ce_ = cb_ + kl_.chunk < nnz_ ? cb_ + kl_.chunk : nnz_;");
  line("int64_t r0_ = cu::row_of(" + P + ", n_" + row_ + ", cb_);");
  line("long long open_ = -1;  // the row whose run goes on into the next step");
  line("acc_t open_v_[C_];");
  line("GNNFUSE_UNROLL");
  line("for (int k_ = 0; k_ < C_; ++k_) open_v_[k_] = acc_t(0);");
  open("for (int64_t b_ = cb_; b_ < ce_; b_ += 32) {");
  line("const int64_t q_ = b_ + lane_;");
  line("const bool live_ = q_ < ce_;");
  line("int64_t r_ = r0_;");
  line("if (live_)");
  line("  while (static_cast<int64_t>(" + P + "[r_ + 1]) <= q_) ++r_;");
  line("acc_t " + acc + "[C_];");
  line("GNNFUSE_UNROLL");
  line("for (int k_ = 0; k_ < C_; ++k_) " + acc + "[k_] = acc_t(0);");
  open("if (live_) {");
  line("const int64_t " + row_ + " = r_;");
  for (auto* s : st.body)
    if (s->kind == imp::Stmt::Kind::RowBounds) statement(*s);
  const std::string p = "p_" + w->level;
  line("const index_t " + p + " = static_cast<index_t>(q_);");
  divergent_ = true;
  pos_entry_ = true;
  walk_entry(*w, p);
  pos_entry_ = false;
  divergent_ = false;
  close();
  line("const long long key_ = live_ ? static_cast<long long>(r_) : -1 - static_cast<long long>(lane_);");
  line("cu::segment_sums(" + acc + ", key_, lane_);");
  line("const long long prev_ = __shfl_up_sync(0xffffffffu, key_, 1);");
  line("const bool head_ = live_ && (lane_ == 0 || prev_ != key_);");
  open("if (head_ && key_ == open_) {");
  line("GNNFUSE_UNROLL");
  line("for (int k_ = 0; k_ < C_; ++k_) " + acc + "[k_] += open_v_[k_];");
  close();
  line("const unsigned heads_ = __ballot_sync(0xffffffffu, head_);");
  line("const int last_ = 31 - __clz(static_cast<int>(heads_));");
  line("const long long last_row_ = __shfl_sync(0xffffffffu, key_, last_);");
  line("const int64_t end_ = b_ + 32 < ce_ ? b_ + 32 : ce_;");
  line("const bool cont_ = static_cast<int64_t>(" + P + "[last_row_ + 1]) > end_;");
  open("if (head_ && !(cont_ && lane_ == last_)) {  // a run whose row ends in this step");
  line("const bool whole_ = static_cast<int64_t>(" + P + "[key_]) >= cb_;");
  if (det) columns("{ if (whole_) " + put("key_", acc + "[k_]") + " else carry_[(c_ * 2) * n_" + v + " + " + v + "] = " + acc + "[k_]; }");
  else columns("{ if (whole_) " + put("key_", acc + "[k_]") + " else " + add("key_", acc + "[k_]") + " }");
  close();
  line("GNNFUSE_UNROLL");
  line("for (int k_ = 0; k_ < C_; ++k_) open_v_[k_] = __shfl_sync(0xffffffffu, " + acc + "[k_], last_);");
  line("open_ = cont_ ? last_row_ : -1;");
  line("r0_ = static_cast<int64_t>(last_row_);");
  close();
  if (det) {
    open("if (lane_ == 0) {  // the run open at the chunk's end");
    line("const bool before_ = open_ >= 0 && static_cast<int64_t>(" + P + "[open_]) < cb_;");
    open("if (open_ >= 0) {");
    columns("carry_[(c_ * 2 + (before_ ? 0 : 1)) * n_" + v + " + " + v + "] = open_v_[k_];");
    close();
    line("if (f0_ == 0) carry_row_[c_] = open_ >= 0 && !before_ ? static_cast<int64_t>(open_) : -1;");
    close();
  } else {
    open("if (lane_ == 0 && open_ >= 0) {  // the run open at the chunk's end");
    columns(add("open_", "open_v_[k_]"));
    close();
  }
  close();
  close();
  line("");
}

// The rows cut by chunk borders: the carry of the chunk where the row began (slot 1), then
// slot 0 of every later chunk the row reaches, in chunk order; one thread per (chunk, column).
void CudaPrinter::pos_fixup(const Step& st) {
  const std::string& v = st.tile;
  const std::string P = ptr(st.top->sched.balance_by);
  const imp::Stmt* store = nullptr;
  for (auto* s : st.body)
    if (s->kind == imp::Stmt::Kind::For && s->var == v) store = s;
  const std::string& out = store->body.at(0)->lhs.tensor;
  line("// the carries of the rows cut by chunk borders, added in chunk order");
  line("template <typename scalar_t, typename index_t>");
  open("GNNFUSE_GLOBAL void " + kernel_name(st, "_fixup") + "(const " + s_.name + "_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {");
  line("using acc_t = cu::acc_t<scalar_t>;");
  locals();
  chunks(P, true, true);
  line("const int64_t stride_ = static_cast<int64_t>(gridDim.x) * blockDim.x;");
  open("for (int64_t x_ = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x_ < chunks_ * n_" + v + "; x_ += stride_) {");
  line("const int64_t c_ = x_ / n_" + v + ";");
  line("const int64_t " + v + " = x_ % n_" + v + ";");
  line("const int64_t r_ = carry_row_[c_];");
  line("if (r_ < 0) continue;");
  line("acc_t s_ = carry_[(c_ * 2 + 1) * n_" + v + " + " + v + "];");
  line("const int64_t end_ = static_cast<int64_t>(" + P + "[r_ + 1]);");
  line("for (int64_t c2_ = c_ + 1; c2_ < chunks_ && c2_ * kl_.chunk < end_; ++c2_) s_ += carry_[(c2_ * 2) * n_" + v + " + " + v + "];");
  const std::string at = out + " + (r_ * n_" + v + " + " + v + ")";
  line(s_.find(out)->acc ? "*(" + at + ") = s_;" : "cu::store(" + at + ", s_);");
  close();
  close();
  line("");
}

// ---------------------------------------------------------------- host
void CudaPrinter::shape(const Step& st) {
  setup_row_context(st);
  const char* form = st.form == Form::RowSplit   ? "RowSplit"
                     : st.form == Form::PosSplit ? "PosSplit"
                     : st.form == Form::Lanes    ? "Lanes"
                     : st.form == Form::RegLanes ? "RegLanes"
                     : st.form == Form::PosLanes ? "PosLanes"
                                                 : "Serial";
  const bool tiled = (st.form == Form::RowSplit || st.form == Form::PosSplit) && !st.tile.empty();
  open("{");
  line("runtime::cuda::KernelShape k_;");
  line(std::string("k_.form = runtime::cuda::Form::") + form + ";");
  line("k_.rows = n_" + row_ + ";");
  line("k_.tile_extent = " + (st.tile.empty() ? std::string("1") : "n_" + st.tile) + ";");
  line("k_.feature_tile = " + std::string(tiled ? "8" : "0") + ";");
  auto elems = [&](const std::map<std::string, int>& bufs) {
    std::string n = "int64_t(0)";
    for (auto& [t, k] : bufs) {
      n += " + int64_t(1)";
      for (auto& d : p_.tensor(t).kept_dims) n += " * n_" + d;
    }
    return n;
  };
  if (st.split) {  // the mean entries per row of the split walk's operand: the group's lanes
    const TensorDecl* d = s_.find(st.split->level);
    const std::string rows = "n_" + d->vars.at(st.split->csc ? 1 : 0);
    line("k_.split_mean = (prm." + st.split->level + "_nnz + std::max<int64_t>(1, " + rows + ") - 1) / std::max<int64_t>(1, " + rows + ");");
  }
  line("k_.group_elems = " + elems(group_bufs_) + ";");
  line("k_.thread_elems = " + elems(thread_bufs_) + ";");
  if (st.staged)
    line(std::string("k_.staged_bytes = ") + (st.staged_edges ? "8 + " : "") + (st.staged_values ? "static_cast<int64_t>(sizeof(acc_t)) + " : "") +
         "static_cast<int64_t>(sizeof(index_t));");
  // A tiled kernel that loads nothing by VW_ has only its VW_ = 1 instance: no vector width.
  std::string ok = (st.form == Form::RowSplit || st.form == Form::PosSplit || st.form == Form::RegLanes || st.form == Form::PosLanes) &&
                           !st.tile_loads
                       ? "false"
                       : "true";
  if (ok == "true")
    for (auto& t : st.vec_reads) ok += " && reinterpret_cast<uintptr_t>(prm." + t + ") % 16 == 0";
  line("k_.vector_ok = " + ok + ";");
  if (reg_form()) {
    line(std::string("k_.regs = ") + (regs_.empty() ? "false" : "true") + ";");
    line(std::string("k_.passes = ") + (reg_passes(st) ? "true" : "false") + ";");
    std::set<std::string> vars;  // every lane loop's variable: vector loads need each extent a multiple of VW
    for (auto* s : st.body)
      each_stmt_(*s, [&](const imp::Stmt& x) {
        if (x.kind == imp::Stmt::Kind::For && (x.sched.unit == ParallelUnit::Lane || x.sched.feature_tile > 0) && x.var != st.tile) vars.insert(x.var);
      });
    std::string g = "n_" + st.tile;
    for (auto& x : vars) g = "runtime::cuda::gcd_of(" + g + ", n_" + x + ")";
    if (!vars.empty()) line("k_.lane_gcd = " + g + ";");
  }
  line("v_.kernels.push_back(k_);");
  close();
}

void CudaPrinter::launch_step(const Step& st) {
  if (st.matmul) {
    matmul_call(st);
    return;
  }
  open("{");
  line("const runtime::cuda::KernelLaunch& kl_ = cfg.kernels[" + std::to_string(st.kernel) + "];");
  const std::string dims = "dim3(static_cast<unsigned>(kl_.grid)), dim3(static_cast<unsigned>(kl_.block)), static_cast<size_t>(kl_.smem_bytes), stream, prm, kl_, ws_";
  const std::string name = kernel_name(st);
  if ((st.form == Form::PosSplit || st.form == Form::PosLanes) && !st.entrywise) {
    const imp::Stmt* store = nullptr;
    for (auto* s : st.body)
      if (s->kind == imp::Stmt::Kind::For && s->var == st.tile) store = s;
    const std::string& out = store->body.at(0)->lhs.tensor;
    const std::string type = s_.find(out)->acc ? "acc_t" : "scalar_t";
    // The step's own row variable, not row_: reg_launch sets that for this step only below, so
    // here it still held the previous step's (spmm_mean_grad_x's pos lanes zeroed n_i rows of
    // DX(j,f), past its end on a graph with more rows than columns).
    line("// rows without entries: zero (the kernel never reaches them)");
    line("cu::fill<" + type + ">(static_cast<" + type + "*>(prm." + out + "), n_" + st.top->var + " * n_" + st.tile + ", " + type + "{}, stream);");
  }
  if ((st.form == Form::RowSplit || st.form == Form::PosSplit) && !st.tile_loads) {
    line("GNNFUSE_LAUNCH((" + name + "<scalar_t, index_t, 1>), " + dims + ");");
  } else if (st.form == Form::RowSplit || st.form == Form::PosSplit) {
    line("if (kl_.vector_width > 1)");
    line("  GNNFUSE_LAUNCH((" + name + "<scalar_t, index_t, cu::kVec128<scalar_t>>), " + dims + ");");
    line("else");
    line("  GNNFUSE_LAUNCH((" + name + "<scalar_t, index_t, 1>), " + dims + ");");
  } else if (st.form == Form::RegLanes || st.form == Form::PosLanes) {
    reg_launch(st, dims);
  } else {
    line("GNNFUSE_LAUNCH((" + name + "<scalar_t, index_t>), " + dims + ");");
  }
  if ((st.form == Form::PosSplit || st.form == Form::PosLanes) && st.top->sched.reduction == ReductionStrategy::Segmented) {
    line("const int64_t fb_ = (kl_.chunks * n_" + st.tile + " + 255) / 256;");
    line("GNNFUSE_LAUNCH((" + kernel_name(st, "_fixup") +
         "<scalar_t, index_t>), dim3(static_cast<unsigned>(fb_ < 1 ? 1 : fb_ < 65535 ? fb_ : 65535)), dim3(256), 0, stream, prm, kl_, ws_);");
  }
  close();
}

// A dense product block: the hook (cuBLAS through ATen in the adapter) on the rows the kernels
// stored, C (+)= op(A) op(B) row-major.
void CudaPrinter::matmul_call(const Step& st) {
  const MatmulBlock& m = *st.matmul;
  const std::string& row = st.top->var;
  open("{");
  line("if (env.matmul == nullptr) throw std::runtime_error(\"" + s_.name +
       " on cuda: a dense product block needs Env::matmul (cuBLAS through ATen in the adapter)\");");
  line("runtime::cuda::MatmulCall mc_;");
  auto operand = [&](const MatmulBlock::RowOperand& r, const std::string& side) {
    line("mc_." + side + " = " + (r.temp ? "rows_" + r.tensor : "prm." + r.tensor) + ";");
    line("mc_." + side + "_acc = " + (r.temp || s_.find(r.tensor)->acc ? "true" : "false") + ";");
  };
  auto dense = [&] {
    line("mc_.b = prm." + m.dense + ";");
    line("mc_.ldb = n_" + (m.transpose ? m.x : m.c) + ";");
    line(std::string("mc_.b_trans = ") + (m.transpose ? "true" : "false") + ";");
    line(std::string("mc_.b_acc = ") + (s_.find(m.dense)->acc ? "true" : "false") + ";");
  };
  switch (m.form) {
    case MatmulBlock::Form::Product:
      line("// " + m.target + "(" + row + "," + m.c + ") " + (m.overwrite ? "=" : "+=") + " sum over " + m.x + " of " + m.r.tensor + "(" + row + "," +
           m.x + ") * " + m.dense);
      line("mc_.m = n_" + row + ";  mc_.n = n_" + m.c + ";  mc_.k = n_" + m.x + ";");
      operand(m.r, "a");
      line("mc_.lda = n_" + m.x + ";");
      dense();
      line("mc_.c = " + (m.matrix_target ? m.target : "rows_" + m.target) + ";");
      line("mc_.ldc = n_" + m.c + ";");
      line("mc_.c_acc = true;");
      line(std::string("mc_.accumulate = ") + (m.overwrite ? "false" : "true") + ";");
      break;
    case MatmulBlock::Form::Dot:
      line("// " + m.target + "(" + row + "," + m.c + ") = sum over " + m.x + " of " + m.r.tensor + "(" + row + "," + m.x + ") * " + m.dense);
      line("mc_.m = n_" + row + ";  mc_.n = n_" + m.c + ";  mc_.k = n_" + m.x + ";");
      operand(m.r, "a");
      line("mc_.lda = n_" + m.x + ";");
      dense();
      line("mc_.c = prm." + m.target + ";");
      line("mc_.ldc = n_" + m.c + ";");
      line(std::string("mc_.c_acc = ") + (s_.find(m.target)->acc ? "true" : "false") + ";");
      line("mc_.accumulate = false;");
      break;
    case MatmulBlock::Form::Outer:
      line("// " + m.target + " += sum over rows " + row + " of " + m.r.tensor + "(" + row + "," + m.r.var + ")^T * " + m.r2.tensor + "(" + row + "," +
           m.r2.var + ")");
      line("mc_.m = n_" + m.r.var + ";  mc_.n = n_" + m.r2.var + ";  mc_.k = n_" + row + ";");
      operand(m.r, "a");
      line("mc_.lda = n_" + m.r.var + ";");
      line("mc_.a_trans = true;");
      operand(m.r2, "b");
      line("mc_.ldb = n_" + m.r2.var + ";");
      line("mc_.c = " + m.target + ";");
      line("mc_.ldc = n_" + m.r2.var + ";");
      line("mc_.c_acc = true;");
      line("mc_.accumulate = true;");
      break;
  }
  line("env.matmul(env.matmul_ctx, mc_, cu::dtype_code<scalar_t>());");
  close();
}

std::string CudaPrinter::host() {
  os_.str("");
  depth_ = 0;
  auto extents = [&] {
    for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";");
    for (auto& v : s_.order) line("(void)n_" + v + ";");
  };
  const std::string prm = "const " + s_.name + "_params& prm";
  const char* variant = variant_ == "row_split"          ? "RowSplit"
                        : variant_ == "pos_split"        ? "PosSplit"
                        : variant_ == "pos_split_atomic" ? "PosSplitAtomic"
                        : variant_ == "reg_lanes"        ? "RegLanes"
                        : variant_ == "pos_lanes"        ? "PosLanes"
                        : variant_ == "pos_lanes_atomic" ? "PosLanesAtomic"
                                                         : "Lanes";
  // The shape of every kernel for the launch decision.
  line("template <typename scalar_t, typename index_t>");
  open("runtime::cuda::VariantShape " + fn_ + "_shape(" + prm + ") {");
  line("using acc_t = cu::acc_t<scalar_t>;");
  extents();
  line("(void)sizeof(acc_t);");
  line("runtime::cuda::VariantShape v_;");
  line(std::string("v_.variant = runtime::cuda::Variant::") + variant + ";");
  for (auto& st : steps_)
    if (!st.matmul) shape(st);
  line("return v_;");
  close();
  line("");
  // The workspace of the call's temporaries.
  line("template <typename scalar_t>");
  open("int64_t " + fn_ + "_call_bytes(" + prm + ") {");
  line("using acc_t = cu::acc_t<scalar_t>;");
  line("(void)sizeof(acc_t);");
  extents();
  call_pointers(true);
  line("return at_;");
  close();
  line("");
  // The launch: temporaries of the call filled, then the steps in order on the stream.
  line("template <typename scalar_t, typename index_t>");
  open("void " + fn_ + "_launch(" + prm + ", const runtime::cuda::LaunchConfig& cfg, const runtime::cuda::Env& env) {");
  line("using acc_t = cu::acc_t<scalar_t>;");
  line("const cudaStream_t stream = static_cast<cudaStream_t>(env.stream);");
  line("unsigned char* ws_ = static_cast<unsigned char*>(env.workspace);");
  line("(void)ws_;");
  line("(void)sizeof(acc_t);");
  extents();
  call_pointers(false);
  for (auto& t : call_) {
    if (!t.fill) continue;
    std::string n = "int64_t(1)";
    for (auto& d : t.dims) n += " * n_" + d;
    const std::string v = t.init == Reduce::Sum ? "acc_t(0)" : t.init == Reduce::Max ? "-cu::infinity<acc_t>()" : "cu::infinity<acc_t>()";
    line("cu::fill<acc_t>(" + t.name + ", " + n + ", " + v + ", stream);");
  }
  for (auto& st : steps_) launch_step(st);
  close();
  line("");
  return os_.str();
}

}  // namespace gnnfuse::codegen::emit
