// The IR's methods (ir.h): locations and errors, schemas and specs, unit statements and
// programs, iteration spaces, index-tree nodes.
#include <algorithm>
#include <sstream>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- errors and locations
std::string Loc::str() const {
  std::ostringstream os;
  os << (file.empty() ? "<spec>" : file) << ":" << line << ":" << col;
  return os.str();
}

void fail(const Loc& loc, const std::string& msg) {
  throw SpecError(loc.str() + ": error: " + msg);
}

// ---------------------------------------------------------------- schemas
const SchemaArg* Schema::arg(const std::string& n) const {
  for (auto& a : args)
    if (a.name == n) return &a;
  return nullptr;
}

// ---------------------------------------------------------------- specs
const TensorDecl* OpSpec::find(const std::string& n) const {
  for (auto& t : tensors)
    if (t.name == n) return &t;
  return nullptr;
}

const TensorDecl& OpSpec::output() const {
  for (auto& t : tensors)
    if (t.role == Role::Output) return t;
  throw SpecError("spec " + name + " has no output");
}

const TensorDecl* OpSpec::reduced_operand() const {
  std::vector<std::string> free = vars_of(expr.rhs);
  for (auto& t : tensors)
    if (t.role == Role::SparseInput && !std::count(expr.lhs_idx.begin(), expr.lhs_idx.end(), t.vars[1]) &&
        std::count(free.begin(), free.end(), t.vars[1]))
      return &t;
  return nullptr;
}

// ---------------------------------------------------------------- unit statements
bool Stmt::reads(const std::string& tensor) const {
  for (auto& o : rhs)
    if (!o.is_const && o.access.tensor == tensor) return true;
  return false;
}

std::string to_string(const Stmt& s) {
  auto acc = [](const Access& a) {
    std::string out = a.tensor;
    if (!a.idx.empty()) {
      out += "(";
      for (size_t k = 0; k < a.idx.size(); ++k) out += (k ? "," : "") + a.idx[k];
      out += ")";
    }
    return out;
  };
  auto opnd = [&](const Operand& o) {
    if (!o.is_const) return acc(o.access);
    std::ostringstream os;
    os << o.value;
    return os.str();
  };
  std::string rhs;
  switch (s.op) {
    case Stmt::Op::Copy: rhs = opnd(s.rhs[0]); break;
    case Stmt::Op::Neg: rhs = "-" + opnd(s.rhs[0]); break;
    case Stmt::Op::Call: {
      std::ostringstream prm;
      if (s.has_param && !s.param_arg.empty()) prm << ", " << s.param_arg;
      else if (s.has_param) prm << ", " << s.param;
      rhs = s.fn + "(" + opnd(s.rhs[0]) + prm.str() + ")";
      break;
    }
    case Stmt::Op::Mul: rhs = opnd(s.rhs[0]) + " * " + opnd(s.rhs[1]); break;
    case Stmt::Op::Div: rhs = opnd(s.rhs[0]) + " / " + opnd(s.rhs[1]); break;
    case Stmt::Op::Add: rhs = opnd(s.rhs[0]) + " + " + opnd(s.rhs[1]); break;
    case Stmt::Op::Sub: rhs = opnd(s.rhs[0]) + " - " + opnd(s.rhs[1]); break;
  }
  if (!s.accumulate) return acc(s.lhs) + " = " + rhs;
  return acc(s.lhs) + (s.reduce == Reduce::Sum ? " += " : " " + to_string(s.reduce) + "= ") + rhs;
}

const TensorInfo& Program::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw SpecError("internal error: unknown tensor " + name);
  return it->second;
}

std::string Program::outer_var(const std::string& sparse) const {
  const TensorInfo& t = tensor(sparse);
  return t.dims.at(static_cast<size_t>(t.outer));
}
std::string Program::inner_var(const std::string& sparse) const {
  const TensorInfo& t = tensor(sparse);
  return t.dims.at(static_cast<size_t>(1 - t.outer));
}

// ---------------------------------------------------------------- spaces
namespace {
std::set<std::set<std::string>> absorb(const std::set<std::set<std::string>>& terms) {
  std::set<std::set<std::string>> out;
  for (auto& t : terms) {
    bool covered = false;
    for (auto& o : terms)
      if (o != t && std::includes(t.begin(), t.end(), o.begin(), o.end())) covered = true;
    if (!covered) out.insert(t);
  }
  return out;
}
}  // namespace

Space Space::operator&(const Space& o) const {
  Space s;
  s.terms.clear();
  for (auto& a : terms)
    for (auto& b : o.terms) {
      std::set<std::string> t = a;
      t.insert(b.begin(), b.end());
      s.terms.insert(t);
    }
  s.terms = absorb(s.terms);
  return s;
}

Space Space::operator|(const Space& o) const {
  Space s;
  s.terms = terms;
  s.terms.insert(o.terms.begin(), o.terms.end());
  s.terms = absorb(s.terms);
  return s;
}

bool Space::is_dense() const { return terms.size() == 1 && terms.begin()->empty(); }

bool Space::single_level(std::string* sparse) const {
  if (is_dense()) {
    sparse->clear();
    return true;
  }
  if (terms.size() == 1 && terms.begin()->size() == 1) {
    *sparse = *terms.begin()->begin();
    return true;
  }
  return false;
}

std::string Space::str() const {
  if (is_dense()) return "dense";
  std::string out;
  for (auto& t : terms) {
    if (!out.empty()) out += " | ";
    std::string term;
    for (auto& l : t) term += (term.empty() ? "" : "&") + l;
    out += term;
  }
  return out;
}

// ---------------------------------------------------------------- trees
std::unique_ptr<Node> Node::root() { return std::make_unique<Node>(); }

std::unique_ptr<Node> Node::loop(const std::string& var, const Space& space) {
  auto n = std::make_unique<Node>();
  n->kind = Kind::Loop;
  n->var = var;
  n->space = space;
  return n;
}

std::unique_ptr<Node> Node::compute(int stmt) {
  auto n = std::make_unique<Node>();
  n->kind = Kind::Compute;
  n->stmt = stmt;
  return n;
}

std::unique_ptr<Node> Node::reset(const std::string& tensor) {
  auto n = std::make_unique<Node>();
  n->kind = Kind::Reset;
  n->tensor = tensor;
  return n;
}

const char* to_string(ParallelUnit u) {
  switch (u) {
    case ParallelUnit::None: return "none";
    case ParallelUnit::CpuChunk: return "cpu chunk";
    case ParallelUnit::SimdLane: return "simd lane";
    case ParallelUnit::Grid: return "grid";
    case ParallelUnit::Block: return "block";
    case ParallelUnit::Warp: return "warp";
    case ParallelUnit::LaneGroup: return "lane group";
    case ParallelUnit::Lane: return "lane";
  }
  return "?";
}

const char* to_string(ReductionStrategy r) {
  switch (r) {
    case ReductionStrategy::Serial: return "serial";
    case ReductionStrategy::PrivateCopy: return "private copy";
    case ReductionStrategy::Simd: return "simd";
    case ReductionStrategy::Shuffle: return "shuffle";
    case ReductionStrategy::Segmented: return "segmented";
    case ReductionStrategy::Atomic: return "atomic";
  }
  return "?";
}

const std::vector<std::string>& LoopSchedule::private_sums() const {
  static const std::vector<std::string> none;
  return reduction == ReductionStrategy::PrivateCopy ? reduced : none;
}

std::string LoopSchedule::simd_reduction() const {
  return reduction == ReductionStrategy::Simd && !reduced.empty() ? reduced[0] : std::string();
}

bool MatmulBlock::operator==(const MatmulBlock& o) const {
  return form == o.form && r == o.r && r2 == o.r2 && dense == o.dense && c == o.c && x == o.x && transpose == o.transpose &&
         target == o.target && matrix_target == o.matrix_target && overwrite == o.overwrite;
}

bool LoopSchedule::operator==(const LoopSchedule& o) const {
  return unit == o.unit && group == o.group && reduction == o.reduction && reduced == o.reduced && balance_by == o.balance_by &&
         register_tile == o.register_tile && prefetch_rows == o.prefetch_rows && prefetch_edges == o.prefetch_edges &&
         (matmul == o.matmul || (matmul && o.matmul && *matmul == *o.matmul)) && rows_per_block == o.rows_per_block &&
         feature_tile == o.feature_tile && vector_width == o.vector_width && stage_shared == o.stage_shared;
}

void collect_stmts(const Node& n, std::vector<int>* out) {
  if (n.kind == Node::Kind::Compute) out->push_back(n.stmt);
  for (auto& k : n.kids) collect_stmts(*k, out);
}

std::unique_ptr<Node> Node::clone() const {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->var = var;
  n->space = space;
  n->stmt = stmt;
  n->tensor = tensor;
  n->sched = sched;
  n->walk = walk;
  n->located = located;
  n->located_by_map = located_by_map;
  for (auto& k : kids) n->kids.push_back(k->clone());
  return n;
}

}  // namespace gnnfuse::codegen
