// The pipeline: one op through every stage (compile: decompose, spaces, trees, fusion,
// shrinking, schedule, cost model; its variants), and one user op with every op derived from
// it (compile_family: the adjoints, down to the spec's grad_order).
#include <algorithm>
#include <functional>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- pipeline
namespace {

std::unique_ptr<Compiled> compile_one(const OpSpec& spec, const std::vector<int>& choices, std::vector<int>* ties) {
  auto c = std::make_unique<Compiled>();
  c->spec = spec;
  c->program = decompose(c->spec, choices, ties);
  Program& p = c->program;
  c->stages.emplace_back("decomposed", print_program(p));
  if (merge_walks(p)) c->stages.emplace_back("after walk merging", print_program(p));
  auto tree = build_trees(p, initial_spaces(p));
  c->stages.emplace_back("index trees", print_tree(p, *tree));
  tree = build_trees(p, propagate_spaces(p));
  c->stages.emplace_back("after iteration-space propagation", print_tree(p, *tree));
  fuse(p, *tree);
  c->stages.emplace_back("after trie fusion", print_tree(p, *tree));
  shrink_temporaries(p, *tree);
  c->stages.emplace_back("after temporary shrinking", print_tree(p, *tree));
  schedule_cpu(p, *tree);
  c->stages.emplace_back("CPU schedule", print_tree(p, *tree));
  c->tree = std::move(tree);
  c->cost = cost_expr(p, *c->tree);
  if (spec.variants) c->stages.emplace_back("cost model", c->cost + "\n");
  return c;
}

// Whether a lowering runs as the CPU emitter lays it out without scattering: no walk outside a
// loop over its operand's rows (a sparse level iterated at the root), and no private per-thread
// sum over a temporary that keeps the walked coordinate (each thread would hold an N x F copy and
// scatter into it). An association whose order would need the walk in the other direction (the
// loop order is the spec's, one for all variants) gives such a tree; it is not offered.
bool lowers_without_scatter(const Program& p, const Node& root) {
  for (auto& k : root.kids)
    if (k->kind == Node::Kind::Loop && !k->space.is_dense()) return false;
  std::function<bool(const Node&)> ok = [&](const Node& n) {
    for (auto& t : n.sched.private_sums()) {
      const TensorInfo& ti = p.tensor(t);
      for (auto& d : ti.kept_dims)
        for (auto& [name, info] : p.tensors)
          if (info.role == Role::SparseInput && p.inner_var(name) == d) return false;
    }
    for (auto& k : n.kids)
      if (!ok(*k)) return false;
    return true;
  };
  return ok(root);
}

}  // namespace

std::unique_ptr<Compiled> compile(const OpSpec& spec) {
  std::vector<int> ties;
  std::unique_ptr<Compiled> first = compile_one(spec, {}, &ties);
  if (!spec.variants) return first;
  // Every combination of choices at the steps that tie, in order (breadth first: the choices a
  // lowering made, then one other pick at a later step), the first kMaxVariants distinct trees
  // among at most 8 * kMaxVariants lowerings tried (a long chain of tied dense factors has
  // factorially many associations, mostly equivalent).
  std::vector<std::string> seen{first->stages.back().second + first->stages[first->stages.size() - 2].second};
  std::vector<std::pair<std::vector<int>, std::vector<int>>> todo;  // (choices, their lowering's ties)
  todo.push_back({{}, ties});
  int tries = 0;
  for (size_t q = 0; q < todo.size() && static_cast<int>(seen.size()) < kMaxVariants; ++q) {
    const auto [choices, at] = todo[q];
    for (size_t step = choices.size(); step < at.size(); ++step)
      for (int alt = 1; alt < at[step]; ++alt) {
        if (static_cast<int>(seen.size()) >= kMaxVariants || ++tries > 8 * kMaxVariants) break;
        std::vector<int> next = choices;
        next.resize(step, 0);
        next.push_back(alt);
        std::vector<int> next_ties;
        std::unique_ptr<Compiled> v = compile_one(spec, next, &next_ties);
        const std::string key = v->stages.back().second + v->stages[v->stages.size() - 2].second;
        todo.push_back({next, next_ties});
        if (std::find(seen.begin(), seen.end(), key) != seen.end() || !lowers_without_scatter(v->program, *v->tree)) continue;
        seen.push_back(key);
        first->alternatives.push_back(std::move(v));
      }
  }
  return first;
}

Family compile_family(const OpSpec& user_op) {
  Family f;
  f.ops.push_back(compile(user_op));
  for (size_t k = 0; k < f.ops.size(); ++k) {
    const OpSpec& s = f.ops[k]->spec;
    if (s.grad_order < 1) continue;
    std::vector<Adjoint> adj = differentiate(s);
    for (auto& a : adj) {
      if (a.zero) continue;
      for (auto& st : a.stats) {
        bool have = false;
        for (auto& c : f.ops) have = have || c->spec.name == st.spec.name;
        if (!have) f.ops.push_back(compile(st.spec));
      }
      f.ops.push_back(compile(a.spec));
    }
    f.adjoints[s.name] = std::move(adj);
  }
  return f;
}

}  // namespace gnnfuse::codegen
