// Stage 6, CPU target: the CPU schedule of a fused, shrunk index tree: the parallel row loop
// balanced by nonzeros (private per-thread sums where it sums over its own variable), simd
// inner loops and simd reductions, co-iteration by walk and locate; then register tiles,
// prefetches and dense product blocks (schedule_cpu_blocks.cpp).
#include <algorithm>
#include <functional>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- CPU schedule
void schedule_cpu(const Program& p, Node& root) {
  for (auto& top : root.kids) {
    if (top->kind != Node::Kind::Loop) continue;
    std::vector<int> st;
    collect_stmts(*top, &st);
    // Statements summing over the loop's variable: allowed when they sum into temporaries that
    // live across the loop (homed at the root), which each thread then sums privately.
    bool serial = false;
    std::vector<std::string> priv;
    for (int s : st) {
      const Stmt& x = p.stmts[s];
      if (!std::count(x.sum_vars.begin(), x.sum_vars.end(), top->var)) continue;
      const TensorInfo& t = p.tensor(x.lhs.tensor);
      if (x.reduce != Reduce::Sum || t.role != Role::Temp || home_of(p, root, t.name) != nullptr) {
        serial = true;
        continue;
      }
      if (!std::count(priv.begin(), priv.end(), t.name)) priv.push_back(t.name);
    }
    if (serial || !top->space.is_dense()) continue;
    top->sched.unit = ParallelUnit::CpuChunk;
    if (!priv.empty()) {
      top->sched.reduction = ReductionStrategy::PrivateCopy;
      top->sched.reduced = priv;
    }
    std::function<void(const Node&)> find_level = [&](const Node& n) {
      std::string l;
      if (n.kind == Node::Kind::Loop && n.space.single_level(&l) && !l.empty() && p.outer_var(l) == top->var && top->sched.balance_by.empty())
        top->sched.balance_by = l;
      for (auto& k : n.kids) find_level(*k);
    };
    find_level(*top);
  }
  // Co-iteration: a loop over A&B walks the operand declared first and locates the others at
  // each walked coordinate, by a dense position map of the row when the row is the top loop's
  // variable (filled once per row), else by binary search in the row.
  auto declared_at = [&](const std::string& t) {
    for (size_t k = 0; k < p.spec->tensors.size(); ++k)
      if (p.spec->tensors[k].name == t) return k;
    return p.spec->tensors.size();
  };
  for (auto& top : root.kids) {
    if (top->kind != Node::Kind::Loop) continue;
    std::function<void(Node&, std::vector<std::string>&)> rec = [&](Node& n, std::vector<std::string>& enclosing) {
      if (n.kind == Node::Kind::Loop && n.space.terms.size() == 1 && !n.space.is_dense()) {
        // A level whose row no enclosing loop binds constrains nothing here (the values read
        // were restricted to it where they were produced): the loop iterates the others.
        std::vector<std::string> levels;
        for (auto& l : *n.space.terms.begin())
          if (std::count(enclosing.begin(), enclosing.end(), p.outer_var(l))) levels.push_back(l);
        if (levels.empty()) {
          // None is: a walk of any would read a row no loop has chosen (the copy of a row's
          // accumulator over j after the walks over k of `Y(i,j) = A(i,k) * B(k,j)`, which
          // must write every j of a dense result anyway). The loop runs densely over its extent.
          n.space = Space::dense();
          n.walk.clear();
          n.located.clear();
          n.located_by_map.clear();
        }
      }
      if (n.kind == Node::Kind::Loop && n.space.terms.size() == 1 && !n.space.is_dense()) {
        std::vector<std::string> levels;
        for (auto& l : *n.space.terms.begin())
          if (std::count(enclosing.begin(), enclosing.end(), p.outer_var(l))) levels.push_back(l);
        std::sort(levels.begin(), levels.end(), [&](const std::string& a, const std::string& b) { return declared_at(a) < declared_at(b); });
        n.walk = levels[0];
        n.located.clear();
        n.located_by_map.clear();
        for (size_t k = 1; k < levels.size(); ++k) {
          n.located.push_back(levels[k]);
          n.located_by_map.push_back(p.outer_var(levels[k]) == top->var);
        }
      }
      if (n.kind == Node::Kind::Loop) enclosing.push_back(n.var);
      for (auto& k : n.kids) rec(*k, enclosing);
      if (n.kind == Node::Kind::Loop) enclosing.pop_back();
    };
    std::vector<std::string> enclosing;
    rec(*top, enclosing);
  }
  std::function<void(Node&)> mark_simd = [&](Node& n) {
    for (auto& k : n.kids) mark_simd(*k);
    if (n.kind != Node::Kind::Loop || !n.space.is_dense() || n.sched.chunks()) return;
    std::string reduction;
    for (auto& k : n.kids) {
      if (k->kind != Node::Kind::Compute) return;
      const Stmt& s = p.stmts[k->stmt];
      const TensorInfo& t = p.tensor(s.lhs.tensor);
      const auto& dims = t.role == Role::Temp ? t.kept_dims : t.dims;
      if (std::count(dims.begin(), dims.end(), n.var)) continue;
      // The statement reduces over this loop: only a scalar temporary can be a simd reduction.
      if (!s.accumulate || s.reduce != Reduce::Sum || t.role != Role::Temp || !dims.empty() || !reduction.empty()) return;
      reduction = t.name;
    }
    n.sched.unit = ParallelUnit::SimdLane;
    if (!reduction.empty()) {
      n.sched.reduction = ReductionStrategy::Simd;
      n.sched.reduced = {reduction};
    }
  };
  mark_simd(root);
  schedule_cpu_blocks(p, root);
}

}  // namespace gnnfuse::codegen
