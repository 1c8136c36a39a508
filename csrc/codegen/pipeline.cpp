// The pipeline: one op through every stage for a target (compile: decompose, spaces, trees,
// fusion, shrinking, the target's schedule, cost model; its variants; each lowering to the
// imperative IR the printers print), and one user op with every op derived from it
// (compile_family: the adjoints, down to the spec's grad_order).
#include <algorithm>
#include <functional>

#include "codegen/imperative.h"
#include "codegen/ir.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- pipeline
namespace {

std::unique_ptr<Compiled> compile_one(const OpSpec& spec, Target target, const std::vector<int>& choices, std::vector<int>* ties) {
  auto c = std::make_unique<Compiled>();
  c->spec = spec;
  c->target = target;
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
  schedule(target, p, *tree);
  c->stages.emplace_back(target_info(target).schedule_stage, print_tree(p, *tree));
  c->schedule_variants = schedule_variants(target, p, *tree);
  c->tree = std::move(tree);
  c->cost_model = cost_model(p, *c->tree);
  c->cost = print_cost(target, c->cost_model);
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

bool same_node(const Program& pa, const Node& a, const Program& pb, const Node& b) {
  if (a.kind != b.kind || a.var != b.var || a.space != b.space || a.stmt != b.stmt || a.tensor != b.tensor || !(a.sched == b.sched) ||
      a.walk != b.walk || a.located != b.located || a.located_by_map != b.located_by_map || a.kids.size() != b.kids.size())
    return false;
  if (a.kind == Node::Kind::Compute) {
    const Stmt& x = pa.stmts[static_cast<size_t>(a.stmt)];
    const Stmt& y = pb.stmts[static_cast<size_t>(b.stmt)];
    auto same_operand = [](const Operand& o, const Operand& q) { return o.is_const == q.is_const && o.value == q.value && o.access == q.access; };
    if (!(x.lhs == y.lhs) || x.op != y.op || x.fn != y.fn || x.param != y.param || x.has_param != y.has_param ||
        x.param_arg != y.param_arg || x.accumulate != y.accumulate || x.reduce != y.reduce || x.rhs.size() != y.rhs.size() ||
        !std::equal(x.rhs.begin(), x.rhs.end(), y.rhs.begin(), same_operand))
      return false;
  }
  for (size_t k = 0; k < a.kids.size(); ++k)
    if (!same_node(pa, *a.kids[k], pb, *b.kids[k])) return false;
  return true;
}

}  // namespace

bool same_lowering(const Compiled& a, const Compiled& b) {
  const Program& pa = a.program;
  const Program& pb = b.program;
  if (!(a.cost_model == b.cost_model) || pa.temps != pb.temps) return false;
  for (auto& name : pa.temps) {
    const TensorInfo& x = pa.tensor(name);
    const TensorInfo& y = pb.tensor(name);
    if (x.dims != y.dims || x.kept_dims != y.kept_dims || x.compressed_by != y.compressed_by || x.compressed_global != y.compressed_global ||
        x.shrunk != y.shrunk || x.init != y.init)
      return false;
  }
  return same_node(pa, *a.tree, pb, *b.tree);
}

namespace {

// The lowering's values kernel and its target's schedule variants (the first is its tree).
void lower_values(Compiled& c) {
  c.kernel = std::make_shared<const imp::Kernel>(imp::lower(c));
  for (size_t v = 0; v < c.schedule_variants.size(); ++v)
    c.schedule_variants[v].kernel = v ? std::make_shared<const imp::Kernel>(imp::lower(c, *c.schedule_variants[v].tree)) : c.kernel;
}

// Every lowering chosen with its schedule variants, and for a `symbolic S` op its assembling and
// pattern kernels, lowered once to the imperative IR (what the printers print).
std::unique_ptr<Compiled> lowered(std::unique_ptr<Compiled> c) {
  lower_values(*c);
  for (auto& a : c->alternatives) lower_values(*a);
  if (!c->spec.symbolic.empty()) {
    c->pattern = std::make_shared<const imp::Kernel>(imp::lower(*c, imp::Mode::Pattern));
    c->assemble = std::make_shared<const imp::Kernel>(imp::lower(*c, imp::Mode::Assemble));
  }
  return c;
}

std::unique_ptr<Compiled> compile_variants(const OpSpec& spec, Target target) {
  std::vector<int> ties;
  std::unique_ptr<Compiled> first = compile_one(spec, target, {}, &ties);
  if (!spec.variants) return first;
  // Every combination of choices at the steps that tie, in order (breadth first: the choices a
  // lowering made, then one other pick at a later step), the first kMaxVariants distinct trees
  // among at most 8 * kMaxVariants lowerings tried (a long chain of tied dense factors has
  // factorially many associations, mostly equivalent).
  std::vector<const Compiled*> seen{first.get()};
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
        std::unique_ptr<Compiled> v = compile_one(spec, target, next, &next_ties);
        todo.push_back({next, next_ties});
        const bool dup = std::any_of(seen.begin(), seen.end(), [&](const Compiled* s) { return same_lowering(*s, *v); });
        if (dup || !lowers_without_scatter(v->program, *v->tree)) continue;
        seen.push_back(v.get());
        first->alternatives.push_back(std::move(v));
      }
  }
  return first;
}

}  // namespace

std::unique_ptr<Compiled> compile(const OpSpec& spec, Target target) { return lowered(compile_variants(spec, target)); }

Family compile_family(const OpSpec& user_op, Target target) {
  Family f;
  f.target = target;
  f.ops.push_back(compile(user_op, target));
  for (size_t k = 0; k < f.ops.size(); ++k) {
    const OpSpec& s = f.ops[k]->spec;
    if (s.grad_order < 1) continue;
    std::vector<Adjoint> adj = differentiate(s);
    for (auto& a : adj) {
      if (a.zero) continue;
      for (auto& st : a.stats) {
        bool have = false;
        for (auto& c : f.ops) have = have || c->spec.name == st.spec.name;
        if (!have) f.ops.push_back(compile(st.spec, target));
      }
      f.ops.push_back(compile(a.spec, target));
    }
    f.adjoints[s.name] = std::move(adj);
  }
  return f;
}

}  // namespace gnnfuse::codegen
