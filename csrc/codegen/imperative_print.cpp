// The text of the imperative IR (imp::print): `gnnfuse-gen --dump` and the golden tests
// (tests/codegen/test_imperative.cpp).
#include <sstream>

#include "codegen/imperative.h"

namespace gnnfuse::codegen::imp {

namespace {

std::string access_str(const Access& a) {
  std::string s = a.tensor;
  if (a.idx.empty()) return s;
  s += "(";
  for (size_t k = 0; k < a.idx.size(); ++k) s += (k ? "," : "") + a.idx[k];
  return s + ")";
}

std::string value_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Const: {
      std::ostringstream os;
      os << v.value;
      return os.str();
    }
    case Value::Kind::Read: return access_str(v.access);
    case Value::Kind::Neg: return "-" + value_str(*v.args[0]);
    case Value::Kind::Binary: return value_str(*v.args[0]) + " " + v.op + " " + value_str(*v.args[1]);
    case Value::Kind::Call: return v.fn + "(" + value_str(*v.args[0]) + (v.param.empty() ? "" : ", " + v.param) + ")";
    case Value::Kind::Guard:
      return "(" + std::string(v.row_open ? "row " : "row pointers of ") + v.guard_level + "(" + v.guard_row + ") nonempty ? " +
             value_str(*v.args[0]) + " : " + value_str(*v.args[1]) + ")";
  }
  return "";
}

std::string schedule_str(const LoopSchedule& s) {
  std::string out;
  auto add = [&](const std::string& x) { out += (out.empty() ? "" : ", ") + x; };
  if (s.unit != ParallelUnit::None) add(to_string(s.unit) + (s.group ? " of " + std::to_string(s.group) : std::string()));
  if (s.rows_per_block) add(std::to_string(s.rows_per_block) + " rows per block");
  if (s.feature_tile)
    add("feature tile " + std::to_string(s.feature_tile) + ", vector width " + (s.vector_width ? std::to_string(s.vector_width) : "at launch"));
  if (s.stage_shared) add("staged in shared memory");
  if (!s.balance_by.empty()) add("balanced by " + s.balance_by);
  if (s.reduction != ReductionStrategy::Serial) {
    std::string r = std::string(to_string(s.reduction)) + " reduction";
    for (auto& t : s.reduced) r += " " + t;
    add(r);
  }
  if (s.register_tile) add("register tile");
  if (!s.prefetch_rows.empty() || !s.prefetch_edges.empty()) {
    std::string f = "prefetch";
    for (auto& a : s.prefetch_rows) f += " " + access_str(a);
    for (auto& e : s.prefetch_edges) f += " " + e + "[e]";
    add(f);
  }
  return out.empty() ? "" : "  [" + out + "]";
}

std::string matmul_str(const MatmulBlock& m) {
  // A row operand of the block: a temporary holding the row, or a dense input's row.
  auto row = [](const MatmulBlock::RowOperand& r) { return r.tensor + "(" + (r.temp ? "" : "row,") + r.var + ")"; };
  const std::string d = m.dense + (m.transpose ? "(" + m.c + "," + m.x + ")" : "(" + m.x + "," + m.c + ")");
  switch (m.form) {
    case MatmulBlock::Form::Product:
      return "matmul product " + m.target + "(" + (m.matrix_target ? "row," : "") + m.c + ") " + (m.overwrite ? "=" : "+=") + " sum over " +
             m.x + " of " + row(m.r) + " * " + d;
    case MatmulBlock::Form::Dot: return "matmul dot " + m.target + "(row," + m.c + ") = sum over " + m.x + " of " + row(m.r) + " * " + d;
    case MatmulBlock::Form::Outer: return "matmul outer " + m.target + " += sum over rows of " + row(m.r) + " * " + row(m.r2);
  }
  return "";
}

std::string tensor_str(const Stmt& s) {
  std::string out = s.tensor;
  if (!s.dims.empty()) {
    out += "(";
    for (size_t d = 0; d < s.dims.size(); ++d) out += (d ? "," : "") + s.dims[d];
    out += ")";
  }
  if (!s.compressed_by.empty()) out += " by " + s.compressed_by + (s.global ? " positions" : " row positions");
  return out;
}

void print_stmt(const Stmt& s, int depth, std::ostringstream& os) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  auto body = [&] {
    for (auto& k : s.per_worker) print_stmt(*k, depth + 1, os);
    for (auto& k : s.body) print_stmt(*k, depth + 1, os);
  };
  switch (s.kind) {
    case Stmt::Kind::Block:
      for (auto& k : s.body) print_stmt(*k, depth, os);
      return;
    case Stmt::Kind::Parallel:
      os << pad << "parallel for " << s.var << " < n_" << s.var << schedule_str(s.sched) << (s.blocked ? "  [row blocks]" : "") << "\n";
      body();
      return;
    case Stmt::Kind::For:
      os << pad << "for " << s.var << " < n_" << s.var << schedule_str(s.sched) << "\n";
      body();
      return;
    case Stmt::Kind::Walk:
      os << pad << "walk " << s.var << " in " << s.level << (s.csc ? " by columns" : "") << schedule_str(s.sched) << "\n";
      body();
      return;
    case Stmt::Kind::RowBounds: os << pad << "row " << s.level << "(" << s.var << ")" << (s.csc ? " by columns" : "") << "\n"; return;
    case Stmt::Kind::Locate:
      os << pad << "locate " << s.var << " in " << s.level << (s.by_map ? " by row map" : " by search") << ", else next\n";
      return;
    case Stmt::Kind::Alloc: os << pad << "alloc " << tensor_str(s) << " = " << identity(s.init) << "\n"; return;
    case Stmt::Kind::Fill: os << pad << "fill " << s.tensor << " = " << identity(s.init) << "\n"; return;
    case Stmt::Kind::Assign: os << pad << access_str(s.lhs) << " = " << value_str(*s.rhs) << "\n"; return;
    case Stmt::Kind::Accumulate:
      os << pad << access_str(s.lhs) << (s.reduce == Reduce::Sum ? " += " : " " + to_string(s.reduce) + "= ") << value_str(*s.rhs)
         << (s.arg_out.empty() ? "" : "  [position to " + s.arg_out + "]") << "\n";
      return;
    case Stmt::Kind::Matmul: os << pad << matmul_str(*s.matmul) << "\n"; return;
    case Stmt::Kind::Workspace:
      os << pad << "per worker: workspace " << tensor_str(s) << (s.blocked ? ", a slot per row of a block" : "") << "\n";
      return;
    case Stmt::Kind::MapWorkspace: os << pad << "per worker: row map of " << s.level << "\n"; return;
    case Stmt::Kind::RowPass:
      os << pad << "rows " << s.var << " of the block\n";
      body();
      return;
    case Stmt::Kind::FillMap: os << pad << "fill row map of " << s.level << (s.csc ? " by columns" : "") << "\n"; return;
    case Stmt::Kind::ClearMap: os << pad << "clear row map of " << s.level << (s.csc ? " by columns" : "") << "\n"; return;
    case Stmt::Kind::BuildRows:
      os << pad << "build rows " << s.var << " < n_" << s.var << " of " << s.level << schedule_str(s.sched) << "\n";
      body();
      return;
    case Stmt::Kind::BeginOutputRow:
      os << pad << "begin row " << s.level << "(" << s.var << ")" << (s.body.empty() ? "" : ", product count:") << "\n";
      body();
      return;
    case Stmt::Kind::CountRow: os << pad << "count row " << s.level << "\n"; return;
    case Stmt::Kind::Insert:
      os << pad << "insert " << s.var << " into " << s.level << (s.body.empty() ? "" : ", a new slot:") << "\n";
      body();
      return;
    case Stmt::Kind::OutputWalk:
      os << pad << "walk " << s.var << " in " << s.level << " as built, writing " << s.tensor << "(" << s.row << "," << s.var << ")\n";
      body();
      return;
    case Stmt::Kind::EndOutputRow: os << pad << "end row " << s.level << "(" << s.var << "), sorted\n"; return;
  }
}

}  // namespace

std::string print(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << "\n";
  for (auto& s : k.body->body) print_stmt(*s, 1, os);
  return os.str();
}

}  // namespace gnnfuse::codegen::imp
