// Stage 6, CUDA target: the CUDA schedule of a fused, shrunk index tree, and its variants.
//
// It starts from the decisions every target shares and the CPU pass already makes (which top
// loops run in parallel, co-iteration by walk and locate, dense product blocks, private sums of
// weight gradients: schedule_cpu), drops what is CPU-only (chunks, simd, register tiles,
// prefetches, row maps: a locate searches the row on CUDA) and maps the loops to the machine with
// seed 000's knobs kept apart: tiling (groups of `group` lanes per row, rows_per_block groups per
// block, feature_tile columns per thread in registers, vector_width) and reduction (the group's
// lanes combined by shuffles, a segmented reduction, atomics). A top loop is cut into phases at
// its dense product blocks (the CUDA kernel covers the sparse part; the product is a host hook
// the adapter maps to cuBLAS); each phase is one kernel, in one of three forms:
//   row split  the group's lanes split each walk of the row (lane l takes entries l, l + G, ...)
//              and hold the row's accumulators over the tiled variable in registers (feature_tile
//              columns each); after a walk, shuffles combine the lanes' partial sums (max / min
//              with their positions). The row runs once per column tile. Seed 000's
//              `{<1/G row, c col>, G}`; G = 32 is warp-per-row for long rows.
//   pos split  a warp takes a fixed chunk of nonzeros whatever the rows (seed 001's nonzero-
//              balanced kernel), one entry per lane; a segmented reduction keyed by row combines
//              the lanes; rows cut by a chunk border leave partial sums that a fix-up pass adds
//              in chunk order (Segmented, deterministic) or that go to the output by atomics at
//              the borders only (Atomic).
//   lanes      the group walks each row together and its lanes split the innermost dense loops
//              (the lane variable), combining sums over them by shuffles: every op lowers so;
//              row buffers live in shared memory or a global workspace, the walk's entries are
//              staged in shared memory `group` at a time.
// The schedule itself (Compiled::tree) is row split where every phase allows it, else lanes;
// schedule_variants_cuda gives every variant the tree allows, chosen at launch
// (runtime/cuda_launch.h).
#include <algorithm>
#include <functional>

#include "codegen/imperative.h"

namespace gnnfuse::codegen {

namespace {

constexpr int kGroup = 8;          // lanes per row: seed 000's best static choice (4 to 8)
constexpr int kBlockThreads = 256;  // threads per block (seed 000)
constexpr int kFeatureTile = 8;    // columns per thread (seed 000's column tile)
constexpr int kWarp = 32;

// RegLanes: the lanes form with every dense variable's loops over the lanes where they allow it
// (a dot product beside the row buffers' loops: sddmm_spmm's logits), for the register kernels.
// EntryLanes: the same tree, offered where some top loop is one walk of per-entry values (an
// sddmm): the printer balances it by nonzeros (pos_lanes), no row spans a chunk's work.
// PosLanes(Atomic): the RegLanes tree of a plain aggregation balanced by nonzeros (the pos split's
// shape, the walk's per-entry values free to be dot products: sddmm_spmm), for pos_lanes.
enum class Form { RowSplit, PosSplit, PosSplitAtomic, Lanes, RegLanes, EntryLanes, PosLanes, PosLanesAtomic };

std::string level_of(const Node& n) {
  std::string level = n.walk;
  if (level.empty() && !n.space.is_dense()) n.space.single_level(&level);
  return level;
}

bool is_walk(const Node& n) { return n.kind == Node::Kind::Loop && !level_of(n).empty(); }
bool is_dense_loop(const Node& n) { return n.kind == Node::Kind::Loop && level_of(n).empty(); }

class CudaSchedule {
 public:
  CudaSchedule(const Program& p, Node& root) : p_(p), root_(root) {}

  // Clears every annotation and maps the tree in `form` (row split and pos split where a phase
  // allows them, lanes elsewhere). Returns whether the form applied to some phase.
  bool apply(Form form) {
    bool used = false;
    for (auto& top : root_.kids) {
      if (top->kind != Node::Kind::Loop) continue;
      const bool grid = top->sched.unit == ParallelUnit::Grid;
      const LoopSchedule keep = top->sched;
      clear(*top);
      top->sched.unit = grid ? ParallelUnit::Grid : ParallelUnit::None;
      top->sched.group = kGroup;
      top->sched.rows_per_block = kBlockThreads / kGroup;
      top->sched.reduction = keep.reduction;
      top->sched.reduced = keep.reduced;
      if (grid && (form == Form::PosSplit || form == Form::PosSplitAtomic)) {
        if (pos_split(*top, form)) {
          used = true;
          continue;
        }
      }
      if (grid && (form == Form::PosLanes || form == Form::PosLanesAtomic) && phases(*top).size() == 1) {
        lanes(*top, 0, top->kids.size(), true);
        used = pos_split(*top, form, true) || used;
        continue;
      }
      for (auto [b, e] : phases(*top)) {
        const bool lanes_only = form == Form::Lanes || form == Form::RegLanes || form == Form::EntryLanes || form == Form::PosLanes ||
                                form == Form::PosLanesAtomic;
        if (grid && !lanes_only && row_split(*top, b, e)) {
          used = used || form == Form::RowSplit;
          continue;
        }
        const bool regs = lanes(*top, b, e, lanes_only && form != Form::Lanes);
        used = used || form == Form::Lanes || (form == Form::RegLanes && regs) || (form == Form::EntryLanes && grid && entrywise(*top));
      }
    }
    return used;
  }

  // The CPU schedule's shared decisions, with its CPU-only annotations mapped or dropped.
  void from_cpu() {
    for (auto& top : root_.kids) {
      if (top->kind != Node::Kind::Loop) continue;
      const bool grid = top->sched.chunks();
      std::vector<std::string> sums = top->sched.private_sums();
      // Sums over the grid's rows into temporaries of the whole call: a dense product block
      // computes them whole (the host hook); others are added by atomics.
      for (auto& k : top->kids)
        if (k->sched.matmul && k->sched.matmul->form == MatmulBlock::Form::Outer)
          sums.erase(std::remove(sums.begin(), sums.end(), k->sched.matmul->target), sums.end());
      std::function<void(Node&)> rec = [&](Node& n) {
        if (n.kind == Node::Kind::Loop) {
          auto matmul = n.sched.matmul;
          n.sched = LoopSchedule{};
          n.sched.matmul = matmul;
          n.located_by_map.assign(n.located.size(), false);
        }
        for (auto& k : n.kids) rec(*k);
      };
      rec(*top);
      top->sched.unit = grid ? ParallelUnit::Grid : ParallelUnit::None;
      if (!sums.empty()) {
        top->sched.reduction = ReductionStrategy::Atomic;
        top->sched.reduced = sums;
      }
    }
  }

 private:
  const Program& p_;
  Node& root_;

  // Every annotation below the top loop cleared (the dense product blocks stay).
  static void clear(Node& top) {
    std::function<void(Node&)> rec = [&](Node& n) {
      if (n.kind == Node::Kind::Loop) {
        auto matmul = n.sched.matmul;
        n.sched = LoopSchedule{};
        n.sched.matmul = matmul;
      }
      for (auto& k : n.kids) rec(*k);
    };
    rec(top);
  }

  // The top loop's children between its dense product blocks: [begin, end) ranges.
  static std::vector<std::pair<size_t, size_t>> phases(const Node& top) {
    std::vector<std::pair<size_t, size_t>> out;
    size_t b = 0;
    for (size_t k = 0; k <= top.kids.size(); ++k)
      if (k == top.kids.size() || top.kids[k]->sched.matmul) {
        out.push_back({b, k});
        b = k + 1;
      }
    return out;
  }

  bool inside(const Node& root, const Node& x) const {
    if (&root == &x) return true;
    for (auto& k : root.kids)
      if (inside(*k, x)) return true;
    return false;
  }

  // The full access a statement writes (the temporaries' full indices).
  const Stmt& stmt(const Node& n) const { return p_.stmts[static_cast<size_t>(n.stmt)]; }

  // Temporaries read or written by the computes under n (a reset alone keeps nothing in a
  // register: a dense product block's result is reset before the block, in the phase before it).
  void temps_under(const Node& n, std::set<std::string>* out) const {
    if (n.kind == Node::Kind::Compute) {
      const Stmt& s = stmt(n);
      if (p_.tensor(s.lhs.tensor).role == Role::Temp) out->insert(s.lhs.tensor);
      for (auto& o : s.rhs)
        if (!o.is_const && p_.tensor(o.access.tensor).role == Role::Temp) out->insert(o.access.tensor);
    }
    for (auto& k : n.kids) temps_under(*k, out);
  }

  // The row buffers of a phase (temporaries homed at the top loop, kept over some dimension) all
  // kept over one variable v: v ("" when there is none); false when they are not.
  bool tile_var(const Node& top, size_t b, size_t e, std::string* v) const {
    std::set<std::string> temps;
    for (size_t k = b; k < e; ++k) temps_under(*top.kids[k], &temps);
    v->clear();
    for (auto& t : temps) {
      const TensorInfo& ti = p_.tensor(t);
      const Node* home = home_of(p_, root_, t);
      if (!home || ti.kept_dims.empty()) continue;  // the call's temporaries; scalars in registers
      if (home != &top || ti.kept_dims.size() != 1 || !ti.compressed_by.empty()) return false;
      if (!v->empty() && *v != ti.kept_dims[0]) return false;
      *v = ti.kept_dims[0];
    }
    return true;
  }

  // Whether a write under a loop over v stays within v's tile (its access keeps v), recursively;
  // and loops over v are dense.
  bool tiles_cleanly(const Node& n, const std::string& v, bool under_v) const {
    if (n.kind == Node::Kind::Loop && n.var == v && !is_dense_loop(n)) return false;
    under_v = under_v || (n.kind == Node::Kind::Loop && n.var == v);
    if (n.kind == Node::Kind::Compute && under_v) {
      const Stmt& s = stmt(n);
      const TensorInfo& t = p_.tensor(s.lhs.tensor);
      const Node* home = t.role == Role::Temp ? home_of(p_, root_, s.lhs.tensor) : nullptr;
      const bool local = home && home != &root_ && std::count(t.kept_dims.begin(), t.kept_dims.end(), v) == 0 && !s.accumulate;
      if (!local && !std::count(s.lhs.idx.begin(), s.lhs.idx.end(), v)) return false;
    }
    for (auto& k : n.kids)
      if (!tiles_cleanly(*k, v, under_v)) return false;
    return true;
  }

  // A walk the group's lanes can split: every statement under it writes a temporary homed under
  // it, an output or call temporary at the walked entry, or accumulates into a temporary of the
  // row (`top`), which the lanes then combine. The latter go to *reduced.
  bool splittable(const Node& top, const Node& w, std::vector<std::string>* reduced) const {
    bool ok = true;
    std::function<void(const Node&)> rec = [&](const Node& n) {
      if (n.kind == Node::Kind::Compute) {
        const Stmt& s = stmt(n);
        const TensorInfo& t = p_.tensor(s.lhs.tensor);
        const Node* home = t.role == Role::Temp ? home_of(p_, root_, s.lhs.tensor) : nullptr;
        if (t.role == Role::Temp && home && inside(w, *home) && home != &w) {
          // per entry
        } else if (t.role == Role::Temp && home == &w) {
          // per entry
        } else if (t.role == Role::Temp && home == &top && s.accumulate) {
          if (!std::count(reduced->begin(), reduced->end(), s.lhs.tensor)) reduced->push_back(s.lhs.tensor);
        } else if (!s.accumulate && !t.pattern.empty() && t.pattern == level_of(w)) {
          // an output on the walked operand: one entry per lane
        } else if (!s.accumulate && std::count(s.lhs.idx.begin(), s.lhs.idx.end(), w.var) && t.role == Role::Output) {
          // indexed by the walked coordinate
        } else {
          ok = false;
        }
      }
      for (auto& k : n.kids) rec(*k);
    };
    rec(w);
    return ok;
  }

  // Row split for the phase [b, e) of top, if it allows it.
  bool row_split(Node& top, size_t b, size_t e) {
    std::string v;
    if (!tile_var(top, b, e, &v)) return false;
    std::vector<std::pair<Node*, std::vector<std::string>>> walks;
    for (size_t k = b; k < e; ++k) {
      Node& n = *top.kids[k];
      if (is_walk(n)) {
        std::vector<std::string> red;
        if (!splittable(top, n, &red)) return false;
        walks.push_back({&n, red});
      } else {
        bool nested = false;
        std::function<void(const Node&)> rec = [&](const Node& m) {
          nested = nested || is_walk(m);
          for (auto& c : m.kids) rec(*c);
        };
        rec(n);
        if (nested) return false;  // a walk inside a row-level loop: the lanes could not split it
      }
      if (!v.empty() && !tiles_cleanly(n, v, false)) return false;
    }
    if (walks.empty() && v.empty()) return false;  // nothing to split or tile: lanes over its loops
    for (auto& [w, red] : walks) {
      w->sched.unit = ParallelUnit::LaneGroup;
      w->sched.group = kGroup;
      if (!red.empty()) {
        w->sched.reduction = ReductionStrategy::Shuffle;
        w->sched.reduced = red;
      }
    }
    if (!v.empty()) mark_tile(top, b, e, v);
    return true;
  }

  void mark_tile(Node& top, size_t b, size_t e, const std::string& v) {
    std::function<void(Node&)> rec = [&](Node& n) {
      if (n.kind == Node::Kind::Loop && n.var == v) n.sched.feature_tile = kFeatureTile;
      for (auto& k : n.kids) rec(*k);
    };
    for (size_t k = b; k < e; ++k) rec(*top.kids[k]);
  }

  // Pos split: the top loop is one phase that resets a row accumulator over v, walks one level
  // of its row summing into the accumulator (nothing else leaves the walk), and copies the
  // accumulator into the output row.
  // With `lanes_tree` (PosLanes): the tree the lanes marked stays as it is (its store loop on the
  // lanes), and the walk may keep values of one entry that are sums themselves (dot products).
  bool pos_split(Node& top, Form form, bool lanes_tree = false) {
    if (!phases(top).empty() && phases(top).size() != 1) return false;
    if (top.sched.reduction != ReductionStrategy::Serial) return false;
    std::string v;
    if (!tile_var(top, 0, top.kids.size(), &v) || v.empty()) return false;
    Node* walk = nullptr;
    Node* store = nullptr;
    std::string acc;
    for (auto& k : top.kids) {
      if (k->kind == Node::Kind::Reset) continue;
      if (is_walk(*k) && !walk) {
        walk = k.get();
        continue;
      }
      if (is_dense_loop(*k) && k->var == v && walk && !store && k->kids.size() == 1 && k->kids[0]->kind == Node::Kind::Compute) {
        store = k.get();
        continue;
      }
      return false;
    }
    if (!walk || !store || p_.outer_var(level_of(*walk)) != top.var || !walk->located.empty()) return false;
    std::vector<std::string> red;
    if (!splittable(top, *walk, &red) || red.size() != 1) return false;
    acc = red[0];
    const TensorInfo& at = p_.tensor(acc);
    if (at.init != Reduce::Sum || at.kept_dims != std::vector<std::string>{v}) return false;
    // Nothing but the sum into the accumulator leaves the walk.
    bool ok = true;
    std::function<void(const Node&)> rec = [&](const Node& n) {
      if (n.kind == Node::Kind::Compute) {
        const Stmt& s = stmt(n);
        const TensorInfo& t = p_.tensor(s.lhs.tensor);
        if (s.lhs.tensor == acc) ok = ok && s.accumulate && s.reduce == Reduce::Sum;
        else if (lanes_tree) ok = ok && t.role == Role::Temp && home_of(p_, root_, s.lhs.tensor) && inside(*walk, *home_of(p_, root_, s.lhs.tensor));
        else ok = ok && t.role == Role::Temp && !s.accumulate;
      }
      if (n.kind == Node::Kind::Loop && n.var != v && !is_dense_loop(n)) ok = false;  // a nested walk
      for (auto& k : n.kids) rec(*k);
    };
    for (auto& k : walk->kids) rec(*k);
    // The store: Out(top, v) = acc(v), a plain copy (no stored-entry rule).
    const Stmt& s = stmt(*store->kids[0]);
    const TensorInfo& out = p_.tensor(s.lhs.tensor);
    const std::vector<EntryRule> rules = entry_semantics(p_, root_);
    const EntryRule& r = rules[static_cast<size_t>(s.id)];
    if (!ok || out.role != Role::Output || !out.pattern.empty() || s.op != Stmt::Op::Copy || s.accumulate || s.rhs.size() != 1 ||
        s.rhs[0].is_const || s.rhs[0].access.tensor != acc || s.lhs.idx != std::vector<std::string>{top.var, v} ||
        out.dims != s.lhs.idx || !r.store_empty_zero.empty() || !r.div_nonempty.empty())
      return false;
    if (lanes_tree && store->sched.unit != ParallelUnit::Lane) return false;
    top.sched.group = kWarp;
    top.sched.rows_per_block = 0;  // a warp per chunk of entries, not per row
    top.sched.balance_by = level_of(*walk);
    top.sched.reduction = form == Form::PosSplit || form == Form::PosLanes ? ReductionStrategy::Segmented : ReductionStrategy::Atomic;
    top.sched.reduced = {acc};
    if (lanes_tree) return true;
    walk->sched.unit = ParallelUnit::Lane;
    mark_tile(top, 0, top.kids.size(), v);
    return true;
  }

  // Lanes: the phase's lane variable is the last variable of the spec's order among its dense
  // loops whose statements keep it or sum over it into values of the enclosing loops; its loops
  // go to the lanes. Walks directly under the row loop stage their entries in shared memory.
  // With `more` (RegLanes), then the loops of every other dense variable that neither hold nor
  // lie in lane loops and only sum over it or keep values of one iteration (no row buffer).
  // Returns whether the phase's row buffers could live in registers (none, or all kept over the
  // lane variable alone): the register form differs from the lanes form only where one does.
  bool lanes(Node& top, size_t b, size_t e, bool more = false) {
    std::set<std::string> dense_vars;
    std::function<void(const Node&)> vars = [&](const Node& n) {
      if (is_dense_loop(n)) dense_vars.insert(n.var);
      for (auto& k : n.kids) vars(*k);
    };
    for (size_t k = b; k < e; ++k) vars(*top.kids[k]);
    std::string v;
    for (auto it = p_.order.rbegin(); it != p_.order.rend() && v.empty(); ++it)
      if (dense_vars.count(*it)) v = *it;
    std::string kept;  // RegLanes: the variable the row buffers keep comes first
    if (more && tile_var(top, b, e, &kept) && dense_vars.count(kept)) v = kept;
    const bool laned = lane_var(top, b, e, v, false);
    if (more)
      for (auto it = p_.order.rbegin(); it != p_.order.rend(); ++it)
        if (dense_vars.count(*it) && *it != v) lane_var(top, b, e, *it, true);
    for (size_t k = b; k < e; ++k)
      if (is_walk(*top.kids[k])) top.kids[k]->sched.stage_shared = true;
    std::string tv;
    return tile_var(top, b, e, &tv) && (tv.empty() || (tv == v && laned));
  }

  // A top loop that is one walk of its row whose statements only keep values of one entry (no
  // temporary of the row): every entry's work stands alone.
  bool entrywise(const Node& top) const {
    if (top.kids.size() != 1 || !is_walk(*top.kids[0])) return false;
    const Node& w = *top.kids[0];
    if (p_.outer_var(level_of(w)) != top.var || !w.located.empty()) return false;
    std::set<std::string> temps;
    temps_under(w, &temps);
    for (auto& t : temps) {
      const Node* home = home_of(p_, root_, t);
      if (!home || !inside(w, *home)) return false;
    }
    std::vector<std::string> red;
    return splittable(top, w, &red) && red.empty();
  }

  static bool has_lane(const Node& n) {
    if (n.sched.unit == ParallelUnit::Lane) return true;
    for (auto& k : n.kids)
      if (has_lane(*k)) return true;
    return false;
  }

  // The loops over v of the phase to the lanes, if they allow it (`extra`: a further lane
  // variable, its loops outside and around no lane loop, keeping no row buffer over v).
  bool lane_var(Node& top, size_t b, size_t e, const std::string& v, bool extra) {
    std::vector<std::pair<Node*, std::vector<std::string>>> loops;
    bool ok = !v.empty();
    std::function<void(Node&, std::set<std::string>&)> rec = [&](Node& n, std::set<std::string>& bound) {
      if (extra && n.sched.unit == ParallelUnit::Lane) return;  // another variable's lanes: nothing under them
      if (n.kind == Node::Kind::Loop && n.var == v) {
        if (!is_dense_loop(n) || (extra && has_lane(n))) ok = false;
        std::vector<std::string> red;
        std::function<void(const Node&)> in = [&](const Node& m) {
          if (m.kind == Node::Kind::Loop && m.var != v && !is_dense_loop(m)) ok = false;  // a walk under the lanes
          if (m.kind == Node::Kind::Compute) {
            const Stmt& s = stmt(m);
            const TensorInfo& t = p_.tensor(s.lhs.tensor);
            const Node* home = t.role == Role::Temp ? home_of(p_, root_, s.lhs.tensor) : nullptr;
            if (std::count(s.lhs.idx.begin(), s.lhs.idx.end(), v) && (t.role != Role::Temp || std::count(t.kept_dims.begin(), t.kept_dims.end(), v))) {
              // the lane's own element (a further lane variable: of the output only)
              if (extra && t.role == Role::Temp) ok = false;
            } else if (t.role == Role::Temp && home && inside(n, *home) && home != &n) {
              // a value of one iteration
            } else if (t.role == Role::Temp && home && !inside(n, *home) && s.accumulate && s.arg_out.empty()) {
              // summed over v: the lanes combine it after the loop, at indices bound outside it
              for (size_t d = 0; d < t.dims.size(); ++d)
                if (std::count(t.kept_dims.begin(), t.kept_dims.end(), t.dims[d]) && !bound.count(s.lhs.idx[d])) ok = false;
              if (!std::count(red.begin(), red.end(), s.lhs.tensor)) red.push_back(s.lhs.tensor);
            } else {
              ok = false;
            }
          }
          for (auto& k : m.kids) in(*k);
        };
        in(n);
        loops.push_back({&n, red});
        return;
      }
      if (n.kind == Node::Kind::Loop) bound.insert(n.var);
      for (auto& k : n.kids) rec(*k, bound);
      if (n.kind == Node::Kind::Loop) bound.erase(n.var);
    };
    std::set<std::string> bound{top.var};
    for (size_t k = b; k < e; ++k) rec(*top.kids[k], bound);
    if (ok)
      for (auto& [n, red] : loops) {
        n->sched.unit = ParallelUnit::Lane;
        if (!red.empty()) {
          n->sched.reduction = ReductionStrategy::Shuffle;
          n->sched.reduced = red;
        }
      }
    return ok;
  }
};

}  // namespace

void schedule_cuda(const Program& p, Node& root) {
  schedule_cpu(p, root);
  CudaSchedule s(p, root);
  s.from_cpu();
  s.apply(Form::RowSplit);
}

std::vector<ScheduleVariant> schedule_variants_cuda(const Program& p, const Node& root) {
  std::vector<ScheduleVariant> out;
  out.push_back({"row_split", root.clone(), nullptr});
  auto add = [&](const char* name, Form form) {
    std::unique_ptr<Node> t = root.clone();
    CudaSchedule s(p, *t);
    if (s.apply(form)) out.push_back({name, std::move(t), nullptr});
  };
  add("pos_split", Form::PosSplit);
  add("pos_split_atomic", Form::PosSplitAtomic);
  add("lanes", Form::Lanes);
  // The schedule is row split where every phase allows it: where none does, it is lanes itself.
  bool any_split = false;
  std::function<void(const Node&)> rec = [&](const Node& n) {
    any_split = any_split || n.sched.unit == ParallelUnit::LaneGroup;
    for (auto& k : n.kids) rec(*k);
  };
  rec(root);
  if (!any_split) {
    out.erase(std::remove_if(out.begin(), out.end(), [](const ScheduleVariant& v) { return v.name == "lanes"; }), out.end());
    out[0].name = "lanes";
  }
  // The register forms (cuda_kernel_lanes.cpp): the lanes tree printed with the row buffers in
  // registers, and the pos split tree printed with lanes over its tile; the printer keeps the
  // older form for a kernel whose buffers cannot live in registers.
  add("reg_lanes", Form::RegLanes);
  add("pos_lanes", Form::PosSplit);
  add("pos_lanes_atomic", Form::PosSplitAtomic);
  auto has = [&](const char* name) { return std::any_of(out.begin(), out.end(), [&](const ScheduleVariant& v) { return v.name == name; }); };
  if (!has("pos_lanes")) add("pos_lanes", Form::PosLanes);
  if (!has("pos_lanes_atomic")) add("pos_lanes_atomic", Form::PosLanesAtomic);
  if (!has("pos_lanes")) add("pos_lanes", Form::EntryLanes);
  return out;
}

}  // namespace gnnfuse::codegen
