// Stages 3-5: iteration spaces, index trees, trie-like fusion, temporary shrinking; the printer
// of trees and the cost model of a scheduled tree. The schedules (stage 6) are per target
// (schedule_cpu.cpp); the pipeline that runs every stage is pipeline.cpp.
#include <algorithm>
#include <functional>
#include <sstream>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- spaces
SpaceMap initial_spaces(const Program& p) {
  // Forward, in statement order: a temporary holds values only where its producer iterates
  // (stored-entry semantics), so a consumer sees the producer's space for each of its dims.
  SpaceMap m(p.stmts.size());
  std::map<std::string, std::vector<Space>> temp_space;
  for (auto& s : p.stmts) {
    for (auto& v : s.vars) {
      auto operand_space = [&](const Operand& o) {
        if (o.is_const) return Space::dense();
        const TensorInfo& t = p.tensor(o.access.tensor);
        if (t.role == Role::SparseInput || t.role == Role::EdgeInput || t.role == Role::SelectInput) {
          // The entry walked: the column through CSR (under any of its names: A(i,j2) is a
          // second walk over row i), the row through the CSC view.
          const TensorInfo& pt = p.tensor(t.pattern);
          const std::string& inner = o.access.idx.at(static_cast<size_t>(1 - pt.outer));
          if (pt.outer == 1 && o.access.idx.at(1) != p.outer_var(t.pattern))
            throw SpecError("a renamed walk over " + t.pattern + " through its CSC view is not lowered");
          if (v == inner) return Space::level(t.pattern);
        }
        if (t.role == Role::Temp)
          for (size_t d = 0; d < o.access.idx.size(); ++d)
            if (o.access.idx[d] == v) return temp_space.at(t.name).at(d);
        return Space::dense();
      };
      Space sp;
      bool is_sum = s.op == Stmt::Op::Add || s.op == Stmt::Op::Sub;
      for (size_t k = 0; k < s.rhs.size(); ++k) {
        Space o = operand_space(s.rhs[k]);
        sp = k == 0 ? o : (is_sum ? (sp | o) : (sp & o));
      }
      const TensorInfo& lhs = p.tensor(s.lhs.tensor);
      if (!lhs.pattern.empty() && v == p.inner_var(lhs.pattern)) sp = sp & Space::level(lhs.pattern);
      m[s.id][v] = sp;
    }
    if (p.tensor(s.lhs.tensor).role == Role::Temp) {
      std::vector<Space> dims;
      for (auto& v : s.lhs.idx) dims.push_back(m[s.id][v]);
      temp_space[s.lhs.tensor] = dims;
    }
  }
  return m;
}

SpaceMap propagate_spaces(const Program& p) {
  SpaceMap m = initial_spaces(p);
  for (int s = static_cast<int>(p.stmts.size()) - 1; s >= 0; --s) {
    const Stmt& st = p.stmts[s];
    if (p.tensor(st.lhs.tensor).role != Role::Temp) continue;
    for (size_t d = 0; d < st.lhs.idx.size(); ++d) {
      bool any = false;
      Space need;
      for (size_t c = s + 1; c < p.stmts.size(); ++c)
        for (auto& o : p.stmts[c].rhs) {
          if (o.is_const || o.access.tensor != st.lhs.tensor) continue;
          const Space& cs = m[c].at(o.access.idx.at(d));
          need = any ? (need | cs) : cs;
          any = true;
        }
      // A level mask applies where the producer iterates the level's outer variable too (a
      // temporary over (i,f) computed outside the column walk of a CSC adjoint stays dense).
      bool walkable = any;
      for (auto& term : need.terms)
        for (auto& level : term)
          if (!std::count(st.vars.begin(), st.vars.end(), p.outer_var(level))) walkable = false;
      if (walkable) m[s][st.lhs.idx[d]] = m[s][st.lhs.idx[d]] & need;
    }
  }
  return m;
}

// ---------------------------------------------------------------- walk merging
namespace {

bool has_var(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Column variables under which statements walk the rows of sparse operand `A` (by CSR).
std::vector<std::string> walk_vars(const Program& p, const std::string& A) {
  std::vector<std::string> out;
  for (auto& v : p.order)
    for (auto& st : p.stmts) {
      bool uses = false;
      auto look = [&](const Access& a) {
        const TensorInfo& t = p.tensor(a.tensor);
        bool on_a = (t.role == Role::SparseInput && a.tensor == A) ||
                    ((t.role == Role::EdgeInput || t.role == Role::SelectInput || t.role == Role::Output) && t.pattern == A);
        if (on_a && a.idx.size() > 1 && a.idx[1] == v) uses = true;
      };
      look(st.lhs);
      for (auto& o : st.rhs)
        if (!o.is_const) look(o.access);
      if (uses && !has_var(out, v)) out.push_back(v);
    }
  return out;
}

// Whether a statement reducing over `a` feeds, through any chain of statements, one that runs
// under `b` (so the walk over b must follow the whole walk over a).
bool reduced_then_used(const Program& p, const std::string& a, const std::string& b) {
  size_t n = p.stmts.size();
  std::vector<bool> reached(n, false);
  std::vector<size_t> stack;
  for (size_t k = 0; k < n; ++k)
    if (has_var(p.stmts[k].sum_vars, a)) {
      reached[k] = true;
      stack.push_back(k);
    }
  while (!stack.empty()) {
    size_t k = stack.back();
    stack.pop_back();
    for (size_t m = 0; m < n; ++m)
      if (!reached[m] && p.stmts[m].reads(p.stmts[k].lhs.tensor)) {
        reached[m] = true;
        stack.push_back(m);
      }
  }
  for (size_t m = 0; m < n; ++m)
    if (reached[m] && has_var(p.stmts[m].vars, b) && !has_var(p.stmts[m].sum_vars, a)) return true;
  return false;
}

void rename_var(Program& p, const std::string& from, const std::string& to) {
  auto ren = [&](std::vector<std::string>& vs) {
    for (auto& v : vs)
      if (v == from) v = to;
    std::vector<std::string> out;
    for (auto& v : vs)
      if (!has_var(out, v)) out.push_back(v);
    vs = out;
  };
  for (auto& st : p.stmts) {
    ren(st.lhs.idx);
    for (auto& o : st.rhs)
      if (!o.is_const) ren(o.access.idx);
    ren(st.sum_vars);
    ren(st.vars);
  }
  for (auto& [name, t] : p.tensors)
    if (t.role == Role::Temp) ren(t.dims);
  p.order.erase(std::remove(p.order.begin(), p.order.end(), from), p.order.end());
}

// Statements computing the same value twice (the scores of two merged walks): the later one is
// dropped and its temporary read as the earlier one's.
bool drop_duplicate(Program& p) {
  auto writers = [&](const std::string& t) {
    int n = 0;
    for (auto& st : p.stmts) n += st.lhs.tensor == t;
    return n;
  };
  // The statement up to the names of the variables it sums privately (a dot product over d and
  // the same one over d3): those read the same dimensions of the same tensors, hence one extent.
  auto key = [&](const Stmt& st) {
    std::map<std::string, std::string> canon;
    for (auto& v : st.sum_vars) canon[v] = "_" + std::to_string(canon.size());
    auto name = [&](const std::string& v) { return canon.count(v) ? canon[v] : v; };
    std::string k = std::to_string(static_cast<int>(st.op)) + "|" + st.fn + "|" + std::to_string(st.param) + "|" + st.param_arg + "|" +
                    (st.accumulate ? "acc " + to_string(st.reduce) : "set") + "|" + identity(p.tensor(st.lhs.tensor).init);
    for (auto& v : st.lhs.idx) k += "," + v;
    k += "|";
    for (auto& o : st.rhs) {
      if (o.is_const) {
        k += "#" + std::to_string(o.value);
        continue;
      }
      k += o.access.tensor + "(";
      for (auto& v : o.access.idx) k += name(v) + ",";
      k += ")";
    }
    return k;
  };
  for (size_t b = 0; b < p.stmts.size(); ++b) {
    const Stmt& B = p.stmts[b];
    if (p.tensor(B.lhs.tensor).role != Role::Temp || writers(B.lhs.tensor) != 1 || !B.arg_out.empty()) continue;
    for (size_t a = 0; a < b; ++a) {
      const Stmt& A = p.stmts[a];
      if (p.tensor(A.lhs.tensor).role != Role::Temp || writers(A.lhs.tensor) != 1 || key(A) != key(B)) continue;
      if (p.tensor(A.lhs.tensor).dims != p.tensor(B.lhs.tensor).dims) continue;
      std::string keep = A.lhs.tensor, gone = B.lhs.tensor;
      p.stmts.erase(p.stmts.begin() + static_cast<std::ptrdiff_t>(b));
      for (auto& st : p.stmts)
        for (auto& o : st.rhs)
          if (!o.is_const && o.access.tensor == gone) o.access.tensor = keep;
      for (size_t k = 0; k < p.stmts.size(); ++k) p.stmts[k].id = static_cast<int>(k);
      p.tensors.erase(gone);
      p.temps.erase(std::remove(p.temps.begin(), p.temps.end(), gone), p.temps.end());
      return true;
    }
  }
  return false;
}

}  // namespace

bool merge_walks(Program& p) {
  bool merged = false;
  for (auto& [name, t] : std::map<std::string, TensorInfo>(p.tensors)) {
    if (t.role != Role::SparseInput || t.outer != 0) continue;
    for (bool again = true; again;) {
      again = false;
      std::vector<std::string> ws = walk_vars(p, name);
      for (size_t x = 0; x < ws.size() && !again; ++x)
        for (size_t y = x + 1; y < ws.size() && !again; ++y) {
          const std::string &a = ws[x], &b = ws[y];
          if (has_var(p.spec->output().vars, b) || reduced_then_used(p, a, b) || reduced_then_used(p, b, a)) continue;
          rename_var(p, b, a);
          merged = again = true;
        }
    }
  }
  if (merged)
    while (drop_duplicate(p)) {
    }
  return merged;
}

// ---------------------------------------------------------------- trees
std::unique_ptr<Node> build_trees(const Program& p, const SpaceMap& spaces) {
  auto root = Node::root();
  for (auto& s : p.stmts) {
    Node* at = root.get();
    for (auto& v : s.vars) {
      at->kids.push_back(Node::loop(v, spaces[s.id].at(v)));
      at = at->kids.back().get();
    }
    at->kids.push_back(Node::compute(s.id));
  }
  return root;
}

// ---------------------------------------------------------------- fusion
namespace {

bool same_space(const Node& a, const Node& b) {
  return a.kind == Node::Kind::Loop && b.kind == Node::Kind::Loop && a.var == b.var && a.space == b.space;
}

struct SiblingDeps {
  // order[a][b]: b depends on a (flow, anti or output); input[a][b]: both read one input tensor.
  std::vector<std::vector<bool>> order, input, prevent;
};

SiblingDeps sibling_deps(const Program& p, const Node& parent) {
  size_t n = parent.kids.size();
  std::vector<std::vector<int>> st(n);
  for (size_t k = 0; k < n; ++k) collect_stmts(*parent.kids[k], &st[k]);
  SiblingDeps d;
  d.order.assign(n, std::vector<bool>(n, false));
  d.input = d.order;
  d.prevent = d.order;
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      const Node& na = *parent.kids[a];
      const Node& nb = *parent.kids[b];
      for (int sa : st[a])
        for (int sb : st[b]) {
          const Stmt& A = p.stmts[sa];
          const Stmt& B = p.stmts[sb];
          bool flow = B.reads(A.lhs.tensor);
          bool anti = A.reads(B.lhs.tensor);
          bool output = A.lhs.tensor == B.lhs.tensor;
          if (flow || anti || output) d.order[a][b] = true;
          for (auto& o : A.rhs)
            if (!o.is_const && p.tensor(o.access.tensor).role != Role::Temp && B.reads(o.access.tensor)) d.input[a][b] = true;
          // Reduce-then-use: B under loop x may not read a value that A reduces over x.
          if (flow && na.kind == Node::Kind::Loop && std::count(A.sum_vars.begin(), A.sum_vars.end(), na.var))
            d.prevent[a][b] = true;
        }
      if (!same_space(na, nb)) d.prevent[a][b] = true;
    }
  return d;
}

// Algorithms 1 and 2 of seed 003 on the children of one node, then recursion.
void fuse_level(const Program& p, Node& parent) {
  size_t n = parent.kids.size();
  if (n > 1) {
    SiblingDeps d = sibling_deps(p, parent);
    std::vector<size_t> head(n);
    for (size_t k = 0; k < n; ++k) head[k] = k;
    auto find = [&](size_t k) {
      while (head[k] != k) k = head[k];
      return k;
    };
    auto members = [&](size_t g) {
      std::vector<size_t> m;
      for (size_t k = 0; k < n; ++k)
        if (find(k) == g) m.push_back(k);
      return m;
    };
    auto group_order_edge = [&](size_t g, size_t h) {
      for (size_t a : members(g))
        for (size_t b : members(h))
          if (a < b && d.order[a][b]) return true;
      return false;
    };
    // Would merging groups g and h close a cycle through a third group?
    auto creates_cycle = [&](size_t g, size_t h) {
      std::vector<size_t> groups;
      for (size_t k = 0; k < n; ++k)
        if (find(k) == k && k != g && k != h) groups.push_back(k);
      std::function<bool(size_t, size_t, std::vector<bool>&)> reach = [&](size_t from, size_t to, std::vector<bool>& seen) {
        if (from == to) return true;
        seen[from] = true;
        for (size_t k = 0; k < n; ++k)
          if (find(k) == k && !seen[k] && group_order_edge(from, k) && reach(k, to, seen)) return true;
        return false;
      };
      for (size_t w : groups) {
        std::vector<bool> s1(n, false), s2(n, false), s3(n, false), s4(n, false);
        bool from_pair = reach(g, w, s1) || reach(h, w, s2);
        bool to_pair = reach(w, g, s3) || reach(w, h, s4);
        if (from_pair && to_pair) return true;
      }
      return false;
    };
    auto prevented = [&](size_t g, size_t h) {
      for (size_t a : members(g))
        for (size_t b : members(h))
          if (d.prevent[std::min(a, b)][std::max(a, b)]) return true;
      return false;
    };
    for (size_t k = 0; k < n; ++k) {
      bool changed = true;
      while (changed) {
        changed = false;
        size_t g = find(k);
        for (size_t b = 0; b < n && !changed; ++b) {
          size_t h = find(b);
          if (h == g) continue;
          bool edge = false;
          for (size_t x : members(g))
            for (size_t y : members(h))
              if (x < y && (d.order[x][y] || d.input[x][y])) edge = true;
          if (!edge || prevented(g, h) || creates_cycle(g, h)) continue;
          head[h] = g;
          changed = true;
        }
      }
    }
    // Merge each group into its first member, then order the groups topologically
    // (ties by original position).
    std::vector<size_t> group_ids;
    for (size_t k = 0; k < n; ++k)
      if (find(k) == k) group_ids.push_back(k);
    std::vector<size_t> sorted;
    std::vector<bool> placed(n, false);
    while (sorted.size() < group_ids.size()) {
      for (size_t g : group_ids) {
        if (placed[g]) continue;
        bool ready = true;
        for (size_t h : group_ids)
          if (h != g && !placed[h] && group_order_edge(h, g)) ready = false;
        if (ready) {
          placed[g] = true;
          sorted.push_back(g);
          break;
        }
      }
    }
    std::vector<std::unique_ptr<Node>> old = std::move(parent.kids);
    parent.kids.clear();
    for (size_t g : sorted) {
      std::vector<size_t> ms = members(g);
      std::unique_ptr<Node> host = std::move(old[ms[0]]);
      for (size_t m = 1; m < ms.size(); ++m)
        for (auto& kid : old[ms[m]]->kids) host->kids.push_back(std::move(kid));
      parent.kids.push_back(std::move(host));
    }
  }
  for (auto& k : parent.kids)
    if (k->kind == Node::Kind::Loop) fuse_level(p, *k);
}

// Loop nodes from the root down to every compute node that defines or uses `temp`.
std::vector<std::vector<const Node*>> paths_of(const Program& p, const Node& root, const std::string& temp, bool defs_only = false) {
  std::vector<std::vector<const Node*>> out;
  std::vector<const Node*> stack;
  std::function<void(const Node&)> walk = [&](const Node& n) {
    if (n.kind == Node::Kind::Compute) {
      const Stmt& s = p.stmts[n.stmt];
      if (s.lhs.tensor == temp || (!defs_only && s.reads(temp))) out.push_back(stack);
      return;
    }
    if (n.kind == Node::Kind::Loop) stack.push_back(&n);
    for (auto& k : n.kids) walk(*k);
    if (n.kind == Node::Kind::Loop) stack.pop_back();
  };
  walk(root);
  return out;
}

std::vector<const Node*> common_prefix(const std::vector<std::vector<const Node*>>& paths) {
  std::vector<const Node*> prefix;
  if (paths.empty()) return prefix;
  for (size_t d = 0;; ++d) {
    for (auto& pth : paths)
      if (d >= pth.size() || pth[d] != paths[0][d]) return prefix;
    prefix.push_back(paths[0][d]);
  }
}

}  // namespace

void fuse(const Program& p, Node& root) { fuse_level(p, root); }

const Node* home_of(const Program& p, const Node& root, const std::string& temp) {
  auto prefix = common_prefix(paths_of(p, root, temp));
  return prefix.empty() ? nullptr : prefix.back();
}

// ---------------------------------------------------------------- memory
void shrink_temporaries(Program& p, Node& root) {
  for (auto& name : p.temps) {
    TensorInfo& t = p.tensors.at(name);
    auto paths = paths_of(p, root, name);
    auto prefix = common_prefix(paths);
    std::vector<std::string> kept;
    for (auto& v : t.dims) {
      bool common = std::any_of(prefix.begin(), prefix.end(), [&](const Node* n) { return n->var == v; });
      if (!common) kept.push_back(v);
    }
    t.kept_dims = kept;
    t.shrunk = true;
    t.compressed_by.clear();
    // Sparsify: the last kept dimension iterates the same sparse level in every definition and
    // use. Stored by position within the row when the row loop is common to all of them, or by
    // absolute position when the row is the other kept dimension.
    t.compressed_global = false;
    if (!kept.empty()) {
      // The levels every definition and use iterates along the last kept dimension (one level,
      // or a co-iteration A&B of several: then the one whose row the common loops bind, which
      // the co-iteration locates at each walked coordinate).
      std::set<std::string> levels;
      bool ok = true, first = true;
      for (auto& pth : paths) {
        const Node* loop = nullptr;
        for (size_t d = prefix.size(); d < pth.size(); ++d)
          if (pth[d]->var == kept.back()) loop = pth[d];
        if (!loop || loop->space.terms.size() != 1 || loop->space.is_dense()) {
          ok = false;
          break;
        }
        const std::set<std::string>& term = *loop->space.terms.begin();
        if (first) levels = term;
        else {
          std::set<std::string> both;
          for (auto& l : term)
            if (levels.count(l)) both.insert(l);
          levels = both;
        }
        first = false;
      }
      std::string level;
      if (ok && levels.size() == 1) level = *levels.begin();
      if (ok && levels.size() > 1)
        for (auto& l : levels) {
          const std::string row = p.outer_var(l);
          if (level.empty() && std::any_of(prefix.begin(), prefix.end(), [&](const Node* n) { return n->var == row; })) level = l;
        }
      if (ok && !level.empty()) {
        std::string row = p.outer_var(level);
        bool row_bound = std::any_of(prefix.begin(), prefix.end(), [&](const Node* n) { return n->var == row; });
        if (kept.size() == 1 && row_bound) {
          t.compressed_by = level;
        } else if (kept.size() == 2 && kept[0] == row) {
          t.compressed_by = level;
          t.compressed_global = true;
        }
      }
    }
    bool accumulates = false;
    for (auto& s : p.stmts)
      if (s.lhs.tensor == name && s.accumulate) accumulates = true;
    if (accumulates) {
      Node* home = prefix.empty() ? &root : const_cast<Node*>(prefix.back());
      home->kids.insert(home->kids.begin(), Node::reset(name));
    }
  }
}

// ---------------------------------------------------------------- printing
std::string print_tree(const Program& p, const Node& root) {
  std::ostringstream os;
  auto label_access = [&](const Access& a) {
    const TensorInfo& t = p.tensor(a.tensor);
    std::vector<std::string> idx;
    if (t.role == Role::Temp) {
      for (size_t d = 0; d < a.idx.size(); ++d)
        if (std::count(t.kept_dims.begin(), t.kept_dims.end(), t.dims[d])) idx.push_back(a.idx[d]);
    } else {
      idx = a.idx;
    }
    return Access{a.tensor, idx};
  };
  std::function<void(const Node&, int)> rec = [&](const Node& n, int depth) {
    std::string pad(static_cast<size_t>(depth) * 2, ' ');
    switch (n.kind) {
      case Node::Kind::Root: os << pad << "root\n"; break;
      case Node::Kind::Loop:
        os << pad << "for " << n.var << " in " << n.space.str();
        if (n.sched.chunks()) {
          os << "  [parallel" << (n.sched.balance_by.empty() ? "" : ", balanced by " + n.sched.balance_by + " nonzeros");
          for (auto& t : n.sched.private_sums()) os << ", private sum " << t;
          os << "]";
        }
        if (n.sched.simd()) os << "  [simd" << (n.sched.simd_reduction().empty() ? "" : " reduction(+:" + n.sched.simd_reduction() + ")") << "]";
        if (!n.located.empty() || (n.space.terms.size() == 1 && n.space.terms.begin()->size() > 1)) {
          os << "  [walk " << n.walk;
          for (size_t k = 0; k < n.located.size(); ++k)
            os << ", locate " << n.located[k] << (n.located_by_map[k] ? " by row map" : " by search");
          os << "]";
        }
        os << "\n";
        break;
      case Node::Kind::Compute: {
        Stmt s = p.stmts[n.stmt];
        s.lhs = label_access(s.lhs);
        for (auto& o : s.rhs)
          if (!o.is_const) o.access = label_access(o.access);
        os << pad << "S" << n.stmt << ": " << to_string(s) << "\n";
        break;
      }
      case Node::Kind::Reset: {
        const TensorInfo& t = p.tensor(n.tensor);
        os << pad << "reset " << n.tensor;
        if (!t.kept_dims.empty()) {
          os << "(";
          for (size_t d = 0; d < t.kept_dims.size(); ++d) os << (d ? "," : "") << t.kept_dims[d];
          os << ")";
        }
        os << "\n";
        break;
      }
    }
    for (auto& k : n.kids) rec(*k, depth + 1);
  };
  rec(root, 0);
  bool any = false;
  for (auto& name : p.temps) {
    const TensorInfo& t = p.tensor(name);
    if (!t.shrunk) continue;
    if (!any) os << "temporaries:\n";
    any = true;
    os << "  " << name << "(";
    for (size_t d = 0; d < t.dims.size(); ++d) os << (d ? "," : "") << t.dims[d];
    os << ") -> ";
    if (t.kept_dims.empty()) {
      os << "scalar";
    } else {
      os << "(";
      for (size_t d = 0; d < t.kept_dims.size(); ++d) os << (d ? "," : "") << t.kept_dims[d];
      os << ")";
      if (t.compressed_by.empty()) os << " dense";
      else os << " compressed by " << t.compressed_by << (t.compressed_global ? " positions" : " row positions");
    }
    os << "\n";
  }
  return os.str();
}

// ---------------------------------------------------------------- cost model
Cost cost_model(const Program& p, const Node& root) {
  Cost cost;
  // trips: the factors of the enclosing loops; walked: whether a walk encloses.
  std::function<void(const Node&, std::vector<CostFactor>, bool)> rec = [&](const Node& n, std::vector<CostFactor> trips, bool walked) {
    if (n.kind == Node::Kind::Loop) {
      std::string level = n.walk;
      if (level.empty() && !n.space.is_dense()) n.space.single_level(&level);
      if (level.empty()) {
        trips.push_back({CostFactor::Kind::Extent, n.var, ""});
      } else {
        trips.push_back({CostFactor::Kind::MeanRow, p.outer_var(level), level});
        walked = true;
      }
    }
    if (n.kind == Node::Kind::Compute) cost.terms.push_back({walked ? 1.0 : kDenseWeight, trips});
    for (auto& k : n.kids) rec(*k, trips, walked);
  };
  rec(root, {}, false);
  for (auto& name : p.temps) {
    const TensorInfo& t = p.tensor(name);
    if (home_of(p, root, name) || t.kept_dims.empty()) continue;
    CostTerm size;
    if (!t.compressed_by.empty()) {
      size.factors.push_back({CostFactor::Kind::Nnz, "", t.compressed_by});
      for (size_t d = 2; d < t.kept_dims.size(); ++d) size.factors.push_back({CostFactor::Kind::Extent, t.kept_dims[d], ""});
    } else {
      for (auto& d : t.kept_dims) size.factors.push_back({CostFactor::Kind::Extent, d, ""});
    }
    cost.terms.push_back(size);
  }
  return cost;
}

}  // namespace gnnfuse::codegen
