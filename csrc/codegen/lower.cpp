// The lowering below the scheduled index tree, for every target: stored-entry semantics
// (entry_semantics).
#include <functional>
#include <set>

#include "codegen/imperative.h"

namespace gnnfuse::codegen {

namespace {

// The sparse operand whose row (open in an enclosing loop, not being walked) a temporary is a
// sum over, directly or as a factor of a product or a sum of such products; "" if none. Such a
// value is an empty sum, 0, for a row without entries, whatever it is multiplied by.
std::string empty_walk_of(const Program& p, const Operand& o, const std::set<std::string>& enclosing,
                          const std::set<std::string>& walking, int depth = 0) {
  if (o.is_const || depth > 8 || p.tensor(o.access.tensor).role != Role::Temp) return "";
  for (auto& st : p.stmts) {
    if (st.lhs.tensor != o.access.tensor) continue;
    if (st.accumulate && st.reduce == "sum")
      for (auto& t : p.spec->tensors)
        if (t.role == Role::SparseInput && enclosing.count(p.outer_var(t.name)) && !walking.count(t.name))
          for (auto& v : st.sum_vars)
            if (v == p.inner_var(t.name)) return t.name;
    if (st.op == Stmt::Op::Mul || st.op == Stmt::Op::Copy)
      for (size_t k = 0; k < st.rhs.size(); ++k) {
        std::string w = empty_walk_of(p, st.rhs[k], enclosing, walking, depth + 1);
        if (!w.empty()) return w;
      }
  }
  return "";
}

}  // namespace

std::vector<EntryRule> entry_semantics(const Program& p, const Node& root) {
  std::vector<EntryRule> out(p.stmts.size());
  const OpSpec& s = *p.spec;
  std::set<std::string> enclosing, walking;  // variables of the enclosing loops; levels they walk or locate
  std::function<void(const Node&)> rec = [&](const Node& n) {
    if (n.kind == Node::Kind::Compute) {
      const Stmt& st = p.stmts[n.stmt];
      EntryRule& r = out[static_cast<size_t>(n.stmt)];
      if (st.op == Stmt::Op::Div) {
        r.div_nonempty = empty_walk_of(p, st.rhs[0], enclosing, walking);
        if (r.div_nonempty.empty()) r.div_nonempty = empty_walk_of(p, st.rhs[1], enclosing, walking);
      }
      if (p.tensor(st.lhs.tensor).role == Role::Output && s.selects()) {
        r.store_empty_zero = s.reduced_operand()->name;
        r.row = s.reduced_operand()->vars[0];
      }
    }
    std::vector<std::string> added;
    if (n.kind == Node::Kind::Loop) {
      std::string level = n.walk;
      if (level.empty() && !n.space.is_dense()) n.space.single_level(&level);
      if (!level.empty()) added.push_back(level);
      added.insert(added.end(), n.located.begin(), n.located.end());
    }
    std::vector<std::string> fresh;
    for (auto& l : added)
      if (walking.insert(l).second) fresh.push_back(l);
    const bool bound = n.kind == Node::Kind::Loop && enclosing.insert(n.var).second;
    for (auto& k : n.kids) rec(*k);
    if (bound) enclosing.erase(n.var);
    for (auto& l : fresh) walking.erase(l);
  };
  rec(root);
  return out;
}

}  // namespace gnnfuse::codegen
