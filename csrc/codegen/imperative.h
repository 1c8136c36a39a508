// Below the scheduled index tree, for every target: the lowering that decides what the trees
// leave to the printers.
//   entry_semantics  stored-entry semantics: what a statement yields for a sparse row without
//                    entries (an empty sum is 0, not 0 / 0; a max / min over no entry stores 0)
//   lower            the imperative IR of a scheduled tree: loops over dense ranges, walks over
//                    a sparse level's row, locates, row bounds, row maps, allocations of
//                    temporaries and the workspaces they live in, assignments and accumulations,
//                    guarded values, matmul blocks, parallel regions per the schedule annotations;
//                    for an op computing its output pattern (`symbolic S`) also its assembling
//                    kernel (values and pattern in one pass) and its pattern kernel
//   print            its text (--dump, golden tests)
// The pipeline lowers every op once (Compiled::kernel, ::assemble, ::pattern; a target's schedule
// variants: ScheduleVariant::kernel); a target's kernel printer prints these statements and reads
// nothing else of the tree (cpu_kernel*.cpp, cuda_kernel*.cpp: see
// docs/ARCHITECTURE.md, "Adding a target"). Every decision a printer needs is a statement, a
// field, or a LoopSchedule annotation carried on a loop statement; spelling is the printer's.
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
  double value = 0;    // Const; Call: its constant parameter (when param_arg is "")
  Access access;       // Read: the tensor and its indices (a temporary's kept ones)
  Role role = Role::Temp;  // Read
  // Read of a temporary stored whole at the root as a row-major matrix, computed in a nest of its
  // own and read by later nests (root_matrix, ir.h): its rows are read like a dense input's.
  bool root_matrix = false;
  char op = 0;         // Binary: + - * /
  std::string fn;      // Call
  std::string param;   // Call: its constant parameter as text (a number or a schema argument), or ""
  std::string param_arg;  // Call: the parameter is this schema `float` argument (else `value`)
  // Guard: `row S has entries ? args[0] : args[1]`; row_open: S's row bounds are those of the
  // enclosing loop over `row` (else read from S's row pointers; only the whole value stored into
  // the output is guarded so).
  std::string guard_level, guard_row;
  bool row_open = false;
  std::vector<ValueP> args;
};

// A statement. Loops: For (a dense range 0..n_var), Walk (the stored entries of the current row
// of `level`, the walked coordinate bound to var), Parallel (For in chunks run on threads,
// LoopSchedule::unit CpuChunk; `blocked`: in blocks of rows around a matmul block). Others:
// RowBounds (the row of a sparse operand the enclosing loop's variable selects), Locate (the
// position of the walked coordinate in another level's row; the iteration is skipped where it
// has none), Alloc (a temporary's storage, at the loop that is its home), Fill (a temporary set
// to its initial value), Assign, Accumulate (+=, or keep the max / min, recording the position
// in arg_out), Matmul (a dense product block). CUDA: Parallel is also the loop over the grid
// (LoopSchedule::unit Grid), row-blocked too (its RowPasses are the kernels around the block).
//
// Added for the printers (every one of them decided here, not by a printer):
//   Workspace    in a top-level loop's per_worker list: the storage of a temporary homed inside
//                the loop (non-scalar), allocated once per worker and reused by every iteration
//                (a printer may instead allocate at the Alloc; the CPU printer hoists).
//                `compressed_by` set: sized per row at its Alloc (a row-length buffer);
//                `blocked`: one slot per row of a row block (homed at a blocked Parallel).
//   MapWorkspace in per_worker: the row map of `level` (a dense array over its columns of
//                positions in the current row, -1 elsewhere) that its by-map Locates read.
//   RowPass      in a row-blocked Parallel (whose body is RowPass?, Matmul, RowPass?): one pass
//                over the rows `var` of a block, each row running `body` (its row header, then
//                the statements of the children before, or after, the block). The pass before
//                the block is there when the row loop has children before it, be it only the
//                reset the overwriting product replaces (then the pass holds the header alone).
//   FillMap, ClearMap  in the top-level loop's body: the row map of `level` set from the current
//                row's entries after the row header, and reset (O(row), never O(columns)) after
//                the children.
//   BuildRows    the top loop of an assembling or pattern kernel: the rows `var` of the output
//                pattern S (`level`) that the kernel builds, in tasks (chunks balanced by
//                sched.balance_by) each writing its rows to buffers of its own, then compacted
//                into one CSR (row pointers, one allocation, one copy per task).
//   BeginOutputRow  at the loop over S's rows (`var`): S's row starts empty in a sparse
//                workspace whose policy reads the row's product count, computed by `body` (a
//                pattern nest: For, Walk, RowBounds, CountRow) when the workspace wants it.
//                Then S's row bounds are the workspace's slots.
//   CountRow     in a product count: the row of `level` adds its length (its products).
//   Insert       coordinate `var` inserted into the row of S being built. Assembling kernel:
//                where the values kernel locates S; gives the coordinate's slot (S's position),
//                whose temporaries start at their initial value when it is new (`body`: their
//                Fills). Pattern kernel: where a statement writes the output on S.
//   OutputWalk   assembling kernel, the walk over S: the coordinates of the row built (`var`),
//                in increasing order with their slots; writes the row's columns and the values
//                of the output `tensor`, and ends the row (`row`: the row's variable).
//   EndOutputRow pattern kernel: the row's coordinates written sorted; ends the row `var`.
//
// The body of a loop starts with its header (per iteration, in this order): Locate*, RowBounds*,
// BeginOutputRow?, Alloc*, FillMap*; then the statements of its children in tree order; then
// ClearMap*. A row-blocked Parallel has no header of its own: each RowPass starts with it.
struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
struct Stmt {
  enum class Kind {
    Block, For, Walk, Parallel, RowBounds, Locate, Alloc, Fill, Assign, Accumulate, Matmul,
    // added for the printers (see above)
    Workspace, MapWorkspace, RowPass, FillMap, ClearMap, BuildRows, BeginOutputRow, CountRow, Insert, OutputWalk, EndOutputRow
  };
  Kind kind = Kind::Block;
  std::string var;    // loops: the variable; RowBounds, Locate, Insert: the coordinate
  std::string level;  // Walk, RowBounds, Locate, maps, CountRow: the sparse operand; S of BuildRows .. EndOutputRow
  bool csc = false;   // Walk, RowBounds, Locate, FillMap, ClearMap: through the CSC view
  // Loops: the schedule annotations (unit, reduction: private copies of sched.reduced per worker
  // of a Parallel, a simd sum of a For; register tile of a For under a Walk; prefetches of a
  // Walk; balance_by of a Parallel or BuildRows).
  LoopSchedule sched;
  bool by_map = false;    // Locate: through the row map of the level (else binary search)
  bool blocked = false;   // Parallel: rows in blocks around a Matmul; Workspace: a slot per row of a block
  std::string tensor;     // Alloc, Fill, Workspace; Assign, Accumulate: see lhs; OutputWalk: the output
  Reduce init = Reduce::Sum;  // Alloc, Fill, Workspace: starts at the identity of this reduction (0, -inf, inf)
  std::vector<std::string> dims;  // Alloc, Workspace: kept dimensions ({} a scalar)
  std::string compressed_by;      // Alloc, Workspace: stored by positions of this level's (row) entries
  bool global = false;            // Alloc, Workspace: positions of all of compressed_by (else of its row)
  Access lhs;                     // Assign, Accumulate
  Reduce reduce = Reduce::Sum;    // Accumulate: sum | max | min
  std::string arg_out;            // Accumulate max/min: the output recording the position
  Access arg_at;                  // Accumulate with arg_out: its element (the output's indices)
  std::string arg_of;             // Accumulate with arg_out: the operand whose current entry's position is recorded
  ValueP rhs;                     // Assign, Accumulate
  std::shared_ptr<const MatmulBlock> matmul;  // Matmul
  std::string row;                // OutputWalk: the variable of the output row
  std::vector<StmtP> per_worker;  // top-level For, Parallel, BuildRows: Workspace*, MapWorkspace*
  std::vector<StmtP> body;        // Block, loops, RowPass, BeginOutputRow, Insert
};

// What a kernel computes: the op's values (its output pattern, if any, an input); its values with
// the output pattern S built in the same pass (`<op>_assemble`); S alone (`<op>_symbolic`).
enum class Mode { Values, Assemble, Pattern };

struct Kernel {
  std::string name;
  Mode mode = Mode::Values;
  std::string pattern;  // Assemble, Pattern: S
  StmtP body;  // a Block
};

// The imperative IR of a compiled op's scheduled tree (its values kernel, Mode::Values), or of
// the assembling or pattern kernel of a `symbolic S` op. Fails (SpecError) on what no target
// lowers: a union of sparse levels, nested walks over one operand, a located row no enclosing
// loop binds, a sparse top-level loop, an assembled output not computed under one dense loop
// over S's rows.
Kernel lower(const Compiled& c, Mode mode = Mode::Values);
// The values kernel of another scheduled tree of its program (a target's schedule variant).
Kernel lower(const Compiled& c, const Node& tree);
std::string print(const Kernel& k);

}  // namespace imp

}  // namespace gnnfuse::codegen
