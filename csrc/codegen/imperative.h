// Below the scheduled index tree, for every target: the lowering that decides what the trees
// leave to the printers.
//   entry_semantics  stored-entry semantics: what a statement yields for a sparse row without
//                    entries (an empty sum is 0, not 0 / 0; a max / min over no entry stores 0)
//   lower            the imperative IR of a scheduled tree: loops over dense ranges, walks over
//                    a sparse level's row, locates, row bounds, allocations of temporaries,
//                    assignments and accumulations, guarded values, matmul blocks, parallel
//                    regions per the schedule annotations
//   print_imperative its text (--dump, golden tests)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

struct EntryRule {
  // Div: the quotient is taken only where the current row of this sparse operand (open in an
  // enclosing loop, not being walked) has entries, 0 elsewhere: a sum over its walk divided by a
  // row statistic (a softmax-weighted sum, the division taken out of the sum) is an empty sum,
  // 0, not 0 / 0; a statistic divided by such a sum (1 / sum exp) is 0, not inf (which would
  // turn an empty sum times it into NaN).
  std::string div_nonempty;
  // The store into the output of a reduce max / min op: a row of this operand (the reduced one)
  // without entries stores 0 (its position stays -1); `row` is its row variable.
  std::string store_empty_zero;
  std::string row;
};

// Per statement id (the tree holds each statement once): its stored-entry rules.
std::vector<EntryRule> entry_semantics(const Program& p, const Node& root);

namespace imp {

// A value: a constant, a read of a tensor element (an input's, an edge operand's, a temporary's
// at its kept indices), an operation, a call, or a guarded value (`cond ? a : b`, the conditions
// stored-entry semantics introduce).
struct Value;
using ValueP = std::shared_ptr<const Value>;
struct Value {
  enum class Kind { Const, Read, Neg, Binary, Call, Guard };
  Kind kind = Kind::Const;
  double value = 0;    // Const
  Access access;       // Read: the tensor and its indices (a temporary's kept ones)
  Role role = Role::Temp;  // Read
  char op = 0;         // Binary: + - * /
  std::string fn;      // Call
  std::string param;   // Call: its constant parameter (a number or a schema argument)
  double param_value = 0;  // Call: the number, exactly (when param is not a schema argument)
  // Guard: `row S has entries ? args[0] : args[1]`; row_open: S's row bounds are those of the
  // enclosing loop over `row` (else read from S's row pointers).
  std::string guard_level, guard_row;
  bool row_open = false;
  std::vector<ValueP> args;
};

// A statement. Loops: For (a dense range 0..n_var, or from the column a register tile left),
// Walk (the stored entries of the current row of `level`, the walked coordinate bound to var),
// Parallel (For in chunks run on threads, LoopSchedule::unit CpuChunk; `blocked`: in blocks of
// rows around a matmul block). Others: RowBounds (the row of a sparse operand the enclosing
// loop's variable selects), Locate (the position of the walked coordinate in another level's
// row; the iteration is skipped where it has none), Alloc (a temporary's storage, at the loop
// that is its home), Fill (a temporary set to its initial value), Assign, Accumulate (+=, or
// keep the max / min, recording the position in arg_out), Matmul (a dense product block).
// CUDA: Parallel is also the loop over the grid (LoopSchedule::unit Grid).
struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
struct Stmt {
  enum class Kind { Block, For, Walk, Parallel, RowBounds, Locate, Alloc, Fill, Assign, Accumulate, Matmul };
  Kind kind = Kind::Block;
  std::string var;    // loops: the variable; RowBounds, Locate: the coordinate
  std::string level;  // Walk, RowBounds, Locate: the sparse operand
  bool csc = false;   // Walk, RowBounds, Locate: through the CSC view
  LoopSchedule sched;  // loops: the schedule annotations (unit, reduction, prefetch, tile)
  std::string tile_from;  // For: the first column (the columns a register tile left), or ""
  bool by_map = false;    // Locate: through the row map of the level (else binary search)
  bool blocked = false;   // Parallel: rows in blocks around a Matmul
  std::string tensor;     // Alloc, Fill; Assign, Accumulate: see lhs
  Reduce init = Reduce::Sum;  // Alloc, Fill: starts at the identity of this reduction (0, -inf, inf)
  std::vector<std::string> dims;  // Alloc: kept dimensions ({} a scalar)
  std::string compressed_by;      // Alloc: stored by positions of this level's (row) entries
  bool global = false;            // Alloc: positions of all of compressed_by (else of its row)
  Access lhs;                     // Assign, Accumulate
  Reduce reduce = Reduce::Sum;    // Accumulate: sum | max | min
  std::string arg_out;            // Accumulate max/min: the output recording the position
  ValueP rhs;                     // Assign, Accumulate
  std::shared_ptr<const MatmulBlock> matmul;  // Matmul
  std::vector<StmtP> body;        // Block, loops
};

struct Kernel {
  std::string name;
  StmtP body;  // a Block
};

// The imperative IR of a compiled op's scheduled tree.
Kernel lower(const Compiled& c);
// The same for another scheduled tree of its program (a schedule variant).
Kernel lower(const Compiled& c, const Node& tree);
std::string print(const Kernel& k);

}  // namespace imp

}  // namespace gnnfuse::codegen
