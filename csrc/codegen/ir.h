// The generator's data structures, one stage after another:
//   OpSpec (parsed spec)  ->  Program (unit statements + tensors)  ->  index trees (Node)
// Index trees are the loop IR: propagation, fusion, memory passes and the schedule annotate or
// rewrite them, and the emitters print them. Everything is torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace gnnfuse::codegen {

// ---------------------------------------------------------------- errors and locations
struct Loc {
  std::string file;
  int line = 0;
  int col = 0;
  std::string str() const;
};

struct SpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws SpecError "file:line:col: error: msg".
[[noreturn]] void fail(const Loc& loc, const std::string& msg);

// ---------------------------------------------------------------- reductions and dtypes
// A spec names them by their text; the tables of builtins.cpp are the one place that parses
// and prints it (nullopt: not a name of the kind).
enum class Reduce { Sum, Max, Min };
enum class DType { Float32, Float64, BFloat16, Float16 };  // the floating dtypes of an op
enum class IndexType { Int32, Int64 };                     // the dtypes of csr indices
std::string to_string(Reduce r);     // sum, max, min
std::string to_string(DType d);      // float32, float64, bfloat16, float16
std::string to_string(IndexType i);  // int32, int64
// Where an accumulator of the reduction starts (its identity): 0, -inf, inf.
std::string identity(Reduce r);
std::optional<Reduce> parse_reduce(const std::string& text);
std::optional<DType> parse_dtype(const std::string& text);
std::optional<IndexType> parse_index_type(const std::string& text);

// ---------------------------------------------------------------- expression IR (immutable)
struct Expr;
using ExprP = std::shared_ptr<const Expr>;

struct Expr {
  // Reduce: an explicit max or min over one index variable, max[j](e) / min[j](e) (sums are
  // implicit: Einstein convention).
  enum class Kind { Access, Const, Binary, Call, Neg, Reduce };
  Kind kind;
  std::string name;              // Access: tensor name; Call: function name; Reduce: max | min
  std::vector<std::string> idx;  // Access: index variables; Reduce: the bound variable
  double value = 0;              // Const; Call: the constant parameter (leaky_relu slope, pow exponent)
  bool has_param = false;        // Call: takes a constant parameter
  std::string param_arg;         // Call: the parameter is this schema `float` argument (else `value`)
  char op = 0;                   // Binary: one of + - * /
  bool grouped = false;          // written in parentheses (the decomposition keeps such a product whole)
  std::vector<ExprP> args;       // Binary: 2, Call: 1, Neg: 1, Reduce: 1
  Loc loc;
};

std::string to_string(const ExprP& e);
// Index variables of an expression, in order of first appearance.
// The variables bound by max[j](...) are not free: they are left out.
std::vector<std::string> vars_of(const ExprP& e);
// Every variable of an expression, bound ones included (the loops it needs).
std::vector<std::string> all_vars_of(const ExprP& e);
// The element-wise functions the generator knows (one expression argument, and for some a
// constant parameter: leaky_relu(x, slope), leaky_step(x, slope), pow(x, exponent)) are the
// function table of builtins.h.

struct Assignment {
  std::string lhs;
  std::vector<std::string> lhs_idx;
  ExprP rhs;
  Loc loc;
};
// Parses "Y(i,f) = A(i,j) * X(j,f)". `loc` is the location of the text's first character.
Assignment parse_assignment(const std::string& text, const Loc& loc);

// ---------------------------------------------------------------- op specs
struct SchemaArg {
  std::string type;  // "Tensor", "int", "float", "bool", "str"
  std::string name;
  bool optional = false;  // "Tensor?" etc.
  std::string default_value;  // "None", "1", ...: empty when the argument has no default
};

struct Schema {
  std::string name;
  std::vector<SchemaArg> args;
  std::vector<std::string> returns;  // "Tensor", ...
  std::string text;
  const SchemaArg* arg(const std::string& name) const;
};
Schema parse_schema(const std::string& text, const Loc& loc);

// CountInput: `count N(i) of A`, the number of stored entries of row i of A (at least 1), read
// from A's row pointers (no argument). SelectInput: `select M(i,j,f) on A = arg`, an int64
// tensor over M's indices without A's column (the CSR position chosen per (i,f) by a max or min
// reduction, -1 for none); reads 1 where it names the current entry of A, else 0.
enum class Role { SparseInput, DenseInput, EdgeInput, CountInput, SelectInput, Output, Temp };

// A tensor of the spec: a sparse operand (CSR over its first variable, optionally with a CSC
// view), a dense operand (row-major over its variables), an edge operand (one value per stored
// entry of a sparse operand, in CSR order: "on A"), or the output (dense, or "on A").
struct TensorDecl {
  std::string name;
  Role role = Role::DenseInput;
  std::vector<std::string> vars;
  std::string arg;                             // dense or edge input: the schema argument
  std::string rowptr, col, values;             // sparse input: schema arguments
  bool values_optional = false;                // sparse input: values may be None (then 1)
  // Sparse input: the CSC view (column pointers, row indices, and perm[p] = the CSR position of
  // the p-th entry in column-major order). Required arguments when the op walks the operand by
  // columns; optional (a cache the backward uses) otherwise.
  std::string colptr, row, perm;
  bool csc_optional = false;
  // Sparse input declared `single`: every row holds exactly one entry (rowptr = 0, 1, ..., n,
  // checked by the adapters), so row j's entry sits at position j and a walk over the row reads
  // no row pointer (an assignment matrix: one random access per product instead of two).
  bool single = false;
  std::string pattern;                         // output, edge, count or select input: its sparse operand
  // Dense input or dense output held in the accumulation precision (`acc` after the
  // declaration): float32 for bfloat16/float16 ops, the op's dtype otherwise. The row
  // statistics a forward hands to its adjoints, so that the backward reads the values the
  // forward computed, not their rounding.
  bool acc = false;
  Loc loc;

  bool has_csc() const { return !colptr.empty(); }
};

struct OpSpec {
  std::string name;
  std::string doc;
  Schema schema;
  std::vector<TensorDecl> tensors;  // inputs in declaration order, then the output
  Assignment expr;
  // sum, max or min: how indices missing on the left are reduced at the top level. max and min
  // reduce exactly one index, the column of a csr operand walked by rows, and return a second
  // tensor (schema `-> (Tensor, Tensor)`): the CSR position chosen per output element (int64,
  // -1 for an empty row, whose output is 0), which the adjoints route the gradient through.
  Reduce reduce = Reduce::Sum;
  std::vector<std::string> order;   // loop order of the index variables
  std::vector<DType> dtypes;
  std::vector<IndexType> index_dtypes;
  // How many orders of derivatives are generated below this op (2: backward and double
  // backward). A derived op has its parent's order minus one.
  int grad_order = 2;
  std::string family;  // the user op a derived op comes from (its own name for user ops)
  // `extent j = n_cols`: index variables whose extent is a schema `int` argument (a csr
  // operand's column count that no dense operand gives), in declaration order.
  std::vector<std::pair<std::string, std::string>> extents;
  // `symbolic S`: the output lives on S, a pattern-only csr operand that is the op's result
  // pattern; the generator also emits `<op>_symbolic`, which computes S from the patterns of
  // the other csr operands (the sparse-workspace template: insert, sort, compress).
  std::string symbolic;
  // `variants auto`: every association of a product chain that the decomposition's smallest-
  // temporary rule ties on is lowered (a trie-fused (A X) W and the chain order A (X W), say),
  // and the kernel picks one per call from a cost model over the extents and the sparse
  // operands' row lengths (see Compiled::cost). Inherited by the derived ops.
  bool variants = false;
  // `autocast lower_precision | fp32 | promote`: how the op runs under torch.autocast (its
  // floating inputs cast to the autocast dtype like torch.mm, to float32 like a softmax, or to
  // the widest of their dtypes like torch.cat). Empty: derived from the expression (see
  // autocast_policy). The ops derived from it follow the user op's.
  std::string autocast;
  Loc loc;

  const TensorDecl* find(const std::string& name) const;
  const TensorDecl& output() const;
  bool derived() const { return family != name; }
  // reduce max or min: the op returns (values, positions).
  bool selects() const { return reduce != Reduce::Sum; }
  // The csr operand whose column the top level reduces (read on the right, absent on the left);
  // nullptr if none. reduce max/min choose among its entries.
  const TensorDecl* reduced_operand() const;
};

OpSpec parse_spec(const std::string& text, const std::string& file);
OpSpec load_spec(const std::string& path);
// Prints a spec back in the spec language; parse_spec(print_spec(s)) == s (round trip).
std::string print_spec(const OpSpec& spec);

// ---------------------------------------------------------------- unit statements
struct Access {
  std::string tensor;
  std::vector<std::string> idx;
  bool operator==(const Access& o) const { return tensor == o.tensor && idx == o.idx; }
};

struct Operand {
  bool is_const = false;
  double value = 0;
  Access access;
};

// One unit operation in three-address form: lhs (=|+=) op(rhs...). `accumulate` is true when
// the statement reduces over `sum_vars` (variables of the right side missing on the left).
struct Stmt {
  enum class Op { Copy, Mul, Div, Add, Sub, Neg, Call };
  int id = 0;
  Access lhs;
  Op op = Op::Copy;
  std::string fn;  // Call
  double param = 0;        // Call: constant parameter
  bool has_param = false;  // Call
  std::string param_arg;   // Call: the parameter is this schema `float` argument
  std::vector<Operand> rhs;
  bool accumulate = false;
  Reduce reduce = Reduce::Sum;  // accumulate with +=, or keep the max / min
  std::string arg_out;         // max/min into the op's accumulator: the output recording the position
  std::vector<std::string> sum_vars;
  std::vector<std::string> vars;  // every variable of the statement, in loop order

  bool reads(const std::string& tensor) const;
};
std::string to_string(const Stmt& s);

// Per-tensor facts, including what the memory passes decide for temporaries.
struct TensorInfo {
  std::string name;
  Role role = Role::Temp;
  std::vector<std::string> dims;  // index variables of its full shape
  std::string pattern;            // sparse input: itself; edge input and output "on A": A
  int outer = 0;                  // sparse input: the dimension walked by the outer loop
                                  // (0: rows, CSR; 1: columns, through the CSC view)
  // Memory passes (temporaries only):
  std::vector<std::string> kept_dims;  // dims left after shrinking
  std::string compressed_by;           // sparse operand whose positions index the last kept dim
  bool compressed_global = false;      // kept dims are that operand's (row, col): absolute positions;
                                       // otherwise the row is bound outside: positions within the row
  bool shrunk = false;
  Reduce init = Reduce::Sum;           // an accumulating temporary starts at this reduction's
                                       // identity: 0, -inf, inf
};

struct Program {
  const OpSpec* spec = nullptr;
  std::vector<Stmt> stmts;  // topological (dependence) order
  std::map<std::string, TensorInfo> tensors;
  std::vector<std::string> order;  // loop order
  std::vector<std::string> temps;  // temporaries in creation order

  const TensorInfo& tensor(const std::string& name) const;
  // Outer and inner variable of a sparse operand in the direction the op walks it: (row, column)
  // through CSR, (column, row) through the CSC view.
  std::string outer_var(const std::string& sparse) const;
  std::string inner_var(const std::string& sparse) const;
  bool walks_csc(const std::string& sparse) const { return tensor(sparse).outer == 1; }
};

// Stage 2: break the expression into unit statements with temporaries. Products of several
// factors are associated greedily so that each step produces the smallest temporary (ties go
// to a step involving a sparse operand), which contracts U(i,k)*V(j,k) before masking with
// A(i,j). A reducing output gets an accumulator temporary in the accumulation type.
//
// `choices` picks, at the k-th pairing step, the choices[k]-th of the pairs that tie on the
// smallest temporary (0, the default, also when choices is shorter: the rule's own tie-breaks
// first); `ties`, when given, receives the number of such pairs at every step. A chain of
// sparse operands only has no choice (it is multiplied innermost).
Program decompose(const OpSpec& spec, const std::vector<int>& choices = {}, std::vector<int>* ties = nullptr);

// Stage 2': sibling walks over the rows of one sparse operand under different column names
// (the numerator and the denominator of a softmax-weighted sum) become one walk when neither
// needs the other's complete reduction first; the statements that then compute the same value
// (the scores) are kept once. Returns whether anything was merged.
bool merge_walks(Program& p);

// ---------------------------------------------------------------- iteration spaces
// A Boolean mask over stored levels, in disjunctive normal form: an OR of ANDs of compressed
// levels. {{}} (one empty conjunction) is "true", i.e. a dense iteration space.
struct Space {
  std::set<std::set<std::string>> terms{{}};

  static Space dense() { return Space{}; }
  static Space level(const std::string& sparse) { return Space{{{sparse}}}; }
  Space operator&(const Space& o) const;
  Space operator|(const Space& o) const;
  bool is_dense() const;
  // The one sparse operand whose level this space iterates, or "" when dense.
  // Fails for co-iteration (AND of two levels) and unions of levels, which this
  // generator does not lower yet.
  bool single_level(std::string* sparse) const;
  bool operator==(const Space& o) const { return terms == o.terms; }
  bool operator!=(const Space& o) const { return !(*this == o); }
  std::string str() const;
};

// Stage 3: the space of every (statement, variable). Initial spaces come from each
// statement's own operands (AND for * and /, OR for + and -); then masks flow backwards from
// consumers to the producers of temporaries, OR-ed over consumers.
using SpaceMap = std::vector<std::map<std::string, Space>>;  // per statement id
SpaceMap initial_spaces(const Program& p);
SpaceMap propagate_spaces(const Program& p);

// ---------------------------------------------------------------- schedule annotations
// How a target maps a loop of the index tree to the machine: set by the target's schedule pass
// (schedule_cpu), read by the lowering and the printers; typed and copyable (Node::clone copies
// it). The CUDA units and strategies are declared for the CUDA target; the CPU schedule uses
// None, CpuChunk and SimdLane with Serial, PrivateCopy and Simd.
enum class ParallelUnit {
  None,       // a serial loop
  CpuChunk,   // the iterations split into chunks that runtime::parallel_for runs on threads
  SimdLane,   // the iterations are SIMD lanes (an innermost contiguous loop)
  Grid,       // CUDA: thread blocks over the iterations (grid-stride)
  Block,      // CUDA: one thread block per iteration
  Warp,       // CUDA: one warp per iteration
  LaneGroup,  // CUDA: a group of LoopSchedule::group lanes per iteration
  Lane,       // CUDA: one lane per iteration
};
enum class ReductionStrategy {
  Serial,       // nothing reduced across the unit's iterations (or reduced in order by one)
  PrivateCopy,  // each chunk sums into a private copy of the reduced temporaries, added into the
                // shared one in chunk order afterwards (reproducible)
  Simd,         // one scalar temporary summed in SIMD lanes, the lanes added in a fixed order
  Shuffle,      // CUDA: lanes combined by warp shuffles
  Segmented,    // CUDA: a segmented reduction over rows split across units
  Atomic,       // CUDA: atomic additions into the shared result
};
const char* to_string(ParallelUnit u);
const char* to_string(ReductionStrategy r);

// A dense product block under a parallel row loop over i (its rows run in blocks of
// runtime::kRowBlock): a child subtree of the row loop that multiplies per-row values by a dense
// operand D not indexed by i, or sums per-row outer products over i:
//   Product  for c, x (either order): C(c) += R(x) * D(..)     C a temporary of the row
//   Dot      for c: { s = 0; for x: s += R(x) * D(..); Out(i,c) = s }
//   Outer    for a, b: C(a,b) += R(a) * R2(b)                  C a private sum over i
// with R, R2 row operands: temporaries homed at the row loop over one variable, or dense inputs
// (i, x). The CPU target maps it to its register-tiled GEMM (runtime::gemm_acc) once per block
// of rows; the subtree below it stays the block's meaning (and the cost model's).
struct MatmulBlock {
  enum class Form { Product, Dot, Outer };
  struct RowOperand {
    std::string tensor;
    bool temp = false;
    std::string var;  // its index besides the row
    bool operator==(const RowOperand& o) const { return tensor == o.tensor && temp == o.temp && var == o.var; }
  };
  Form form = Form::Product;
  RowOperand r, r2;
  std::string dense, c, x;     // Product, Dot: D, the result's variable c, the contracted x
  bool transpose = false;      // D is stored (c, x): transposed before the row loop
  std::string target;          // Product: C; Dot: the output; Outer: C
  bool matrix_target = false;  // Product into a root matrix C(i, c) (its rows, not a row buffer)
  // Product: C is reset just before and written by no other statement: the block's product
  // overwrites C (its reset is left out, C is not loaded).
  bool overwrite = false;
  bool operator==(const MatmulBlock& o) const;
};

struct LoopSchedule {
  ParallelUnit unit = ParallelUnit::None;
  int group = 0;  // LaneGroup: lanes per group
  ReductionStrategy reduction = ReductionStrategy::Serial;
  // The temporaries the strategy reduces over the loop's variable: PrivateCopy, those homed at
  // the root that the loop sums into; Simd, the one scalar.
  std::vector<std::string> reduced;
  std::string balance_by;  // CpuChunk: the sparse operand whose nonzeros balance the chunks
  // A dense SimdLane loop (the features f) directly under a walk: the walk runs in passes over
  // register tiles of f (4, 2, then 1 vectors of runtime::Vec while they fit, each tile's row
  // accumulators held in registers over the whole walk), then once plainly over the rest of f.
  bool register_tile = false;
  // A walk: what it reads at random, prefetched a distance ahead of the walked position (across
  // row ends): the dense rows it gathers (an access whose first index is the walked coordinate,
  // one per tensor) and, through a CSC view, what is stored in CSR order and so reached through
  // perm: an edge input's rows or the walked operand's own values (tensor names, in tree order).
  std::vector<Access> prefetch_rows;
  std::vector<std::string> prefetch_edges;
  // A child loop of a CpuChunk row loop: the subtree is a dense product block.
  std::shared_ptr<const MatmulBlock> matmul;
  // CUDA (schedule_cuda.cpp): seed 000's tiling knobs, kept apart from the reduction ones
  // (`group` lanes reducing with `reduction`). Grid: rows_per_block groups of `group` lanes per
  // thread block (a default: the launch decision picks the group size, a power of two up to 32).
  // A dense loop with feature_tile C: the loop's variable is tiled, C columns per thread held in
  // registers, the row running once per tile; its rows are read vector_width elements at a time
  // (0: decided at launch from F and the alignment, at most 16 bytes). A walk with stage_shared:
  // its entries (indices, edge ids, values) are staged in block-shared memory, `group` at a time.
  int rows_per_block = 0;
  int feature_tile = 0;
  int vector_width = 0;
  bool stage_shared = false;

  bool chunks() const { return unit == ParallelUnit::CpuChunk; }
  bool simd() const { return unit == ParallelUnit::SimdLane; }
  // PrivateCopy: the temporaries summed privately per chunk (else none).
  const std::vector<std::string>& private_sums() const;
  // Simd: the scalar summed in lanes (else "").
  std::string simd_reduction() const;
  bool operator==(const LoopSchedule& o) const;
  bool operator!=(const LoopSchedule& o) const { return !(*this == o); }
};

// ---------------------------------------------------------------- index trees
struct Node {
  enum class Kind { Root, Loop, Compute, Reset };
  Kind kind = Kind::Root;
  std::string var;    // Loop
  Space space;        // Loop
  int stmt = -1;      // Compute
  std::string tensor; // Reset: temporary set to zero
  std::vector<std::unique_ptr<Node>> kids;

  // Loop: the target's schedule of it.
  LoopSchedule sched;
  // Co-iteration of several sparse levels (a loop over A&B): the level walked, and the others,
  // located at each walked coordinate: through a dense position map of the row (filled once
  // per iteration of the top loop, whose variable is the located operand's row) or by binary
  // search in the row (sorted columns).
  std::string walk;
  std::vector<std::string> located;
  std::vector<bool> located_by_map;

  static std::unique_ptr<Node> root();
  static std::unique_ptr<Node> loop(const std::string& var, const Space& space);
  static std::unique_ptr<Node> compute(int stmt);
  static std::unique_ptr<Node> reset(const std::string& tensor);
  std::unique_ptr<Node> clone() const;
};

// The statements of the compute leaves under n, in tree order.
void collect_stmts(const Node& n, std::vector<int>* out);

// Stage 3': one chain of loops per statement, in the program's loop order, under one root.
std::unique_ptr<Node> build_trees(const Program& p, const SpaceMap& spaces);

// Stage 4: trie-like fusion (seed 003 Algorithms 1 and 2). Siblings are grouped along
// dependence edges (flow, anti, output and input dependences) unless the edge is
// fusion-preventing: different variables or spaces, or a consumer under loop x reading a
// value reduced over x. Groups never create cycles.
void fuse(const Program& p, Node& root);

// Stage 5: temporary shrinking (seed 003 Algorithm 3) and sparsification. Each temporary
// loses the dimensions of the loops common to its definitions and uses, gets a reset as the
// first child of the deepest common loop when it accumulates, and is stored compressed when
// its only kept dimension iterates one sparse level everywhere.
void shrink_temporaries(Program& p, Node& root);

// ---------------------------------------------------------------- targets
// The machines the generator lowers to. Every stage down to the fused, shrunk index tree is the
// same for all; the schedule (stage 6) and the kernel printer are per target, side by side
// (the table in target.cpp): cpu today, cuda next.
enum class Target { Cpu, Cuda };

// Stage 6, per target. CPU: the parallel row loop balanced by nonzeros, private per-thread
// sums, simd inner loops, co-iteration by walk and locate (schedule_cpu.cpp).
void schedule_cpu(const Program& p, Node& root);
// CUDA (schedule_cuda.cpp): row loops over the grid, walks split over groups of lanes with
// shuffle reductions, feature tiles in registers, or lanes over the feature loops.
void schedule_cuda(const Program& p, Node& root);
// A target's other schedules of the same tree (variants chosen at launch, not by the cost model):
// each a copy of the scheduled tree with other annotations. CUDA: row_split (the schedule's own),
// pos_split and pos_split_atomic (nonzero-balanced, segmented reduction; carries added in order
// or atomics at the segment borders), lanes (lanes over the feature loops; every op has it).
namespace imp {
struct Kernel;  // the imperative IR (imperative.h)
}
struct ScheduleVariant {
  std::string name;
  std::unique_ptr<Node> tree;
  std::shared_ptr<const imp::Kernel> kernel;  // its imperative IR (compile() lowers it)
};
std::vector<ScheduleVariant> schedule_variants_cuda(const Program& p, const Node& root);
// The variants of `target` (none for a target whose schedule has no alternatives).
std::vector<ScheduleVariant> schedule_variants(Target target, const Program& p, const Node& root);
// The schedule of `target` (SpecError for a target not lowered yet).
void schedule(Target target, const Program& p, Node& root);

// Stage 6, CPU target, continued (schedule_cpu_blocks.cpp, called by schedule_cpu): register
// tiles of walks, prefetches, dense product blocks of the parallel row loops.
void schedule_cpu_blocks(const Program& p, Node& root);

// The deepest loop common to every definition and use of a temporary (nullptr: the root).
const Node* home_of(const Program& p, const Node& root, const std::string& temp);
// A temporary stored whole as a row-major matrix, computed in a nest of its own at the root and
// read by later nests (the X W of a chain order A (X W)): its rows are read like a dense input's.
bool root_matrix(const Program& p, const Node& root, const std::string& temp);
// The levels some loop under n locates through a row map (located_by_map).
void mapped_levels(const Node& n, std::set<std::string>* out);

// Printers.
std::string print_tree(const Program& p, const Node& root);
std::string print_program(const Program& p);

// ---------------------------------------------------------------- cost model
// A cost model as a value: a sum of terms, each a coefficient times factors over the call's
// extents n_<v> and the stored entries nnz_<S> of each csr operand S. Each target prints it in
// its own language (print_cost_cpu: a C++ expression over doubles).
struct CostFactor {
  enum class Kind { Extent, Nnz, MeanRow };  // n_<var>; nnz_<sparse>; nnz_<sparse> / max(1, n_<var>)
  Kind kind = Kind::Extent;
  std::string var;
  std::string sparse;
  bool operator==(const CostFactor& o) const { return kind == o.kind && var == o.var && sparse == o.sparse; }
};
struct CostTerm {
  double coeff = 1;
  std::vector<CostFactor> factors;
  bool operator==(const CostTerm& o) const { return coeff == o.coeff && factors == o.factors; }
};
struct Cost {
  std::vector<CostTerm> terms;  // none: 0
  bool operator==(const Cost& o) const { return terms == o.terms; }
};
// The CPU spelling of a cost model: "1.0 * n_i * (nnz_A / std::max(1.0, n_i)) + 0.125 * n_i".
std::string print_cost_cpu(const Cost& cost);

// ---------------------------------------------------------------- pipeline and emitters
struct Compiled {
  OpSpec spec;
  Target target = Target::Cpu;
  Program program;
  std::unique_ptr<Node> tree;  // after every pass
  // Snapshots of the tree after each stage, for --dump and the golden tests.
  std::vector<std::pair<std::string, std::string>> stages;
  // `variants auto`: the other lowerings of the same expression (distinct final trees), each a
  // Compiled of its own with an empty `alternatives`; this one is variant 0.
  std::vector<std::unique_ptr<Compiled>> alternatives;
  // The final, scheduled tree, as the pipeline returns it: `tree` (the snapshots above are
  // text for people and golden tests; nothing is read back from them).
  // The cost model of this lowering over the extents n_<v> and the stored entries nnz_<S> of
  // each csr operand S, in units of one gathered multiply-add (cost_model). The kernel runs the
  // variant of least cost. `cost` is its spelling for the target (the "cost model" snapshot).
  Cost cost_model;
  std::string cost;
  // The imperative IR of the final tree (imp::lower, imperative.h), lowered once by compile():
  // what the kernel printers print. `symbolic S` ops also get their assembling kernel
  // (<op>_assemble) and their pattern kernel (<op>_symbolic); null otherwise.
  std::shared_ptr<const imp::Kernel> kernel, assemble, pattern;
  // The target's schedule variants of `tree` (schedule_variants), each with its imperative IR
  // (lowered by compile() too): the first is `tree` itself (a copy); empty for a target without
  // variants (cpu).
  std::vector<ScheduleVariant> schedule_variants;
};
// Whether two lowerings are the same: structurally equal scheduled trees over equal statements
// and temporaries, and equal cost models (variants are deduplicated with it).
bool same_lowering(const Compiled& a, const Compiled& b);
// Runs every stage down to the imperative IR (Compiled::kernel, and ::assemble, ::pattern of a
// `symbolic S` op); `spec` is copied into the result (the program points to it).
// With `variants auto`, every lowering the decomposition's ties allow (at most kMaxVariants,
// duplicates dropped) goes to `alternatives`, each with its kernel.
std::unique_ptr<Compiled> compile(const OpSpec& spec, Target target = Target::Cpu);
constexpr int kMaxVariants = 4;

// The cost model of a scheduled tree (Compiled::cost_model): for every statement, the product of its
// loops' trip counts (a dense loop: n_v; a walk over S: nnz_S / n_<S's outer variable>, its mean
// row length), weighted 1 when it sits under a walk (a gathered, cache-missing access per
// multiply-add) and kDenseWeight when only dense loops enclose it (a dense product, which the
// emitter hands to the register-tiled GEMM); plus each temporary stored whole at the root, one
// unit per element (written, then read back from memory).
Cost cost_model(const Program& p, const Node& root);
constexpr double kDenseWeight = 0.125;

struct GeneratedFile {
  std::string path;  // relative to the output directory
  std::string text;
};
// ---------------------------------------------------------------- automatic differentiation
// The derivative of an op with respect to one floating input, as an op of its own: the
// adjoint's index expression, with the tensors it reads, in the spec language.
struct Adjoint {
  std::string input;       // schema argument of the differentiated op
  std::string input_tensor;  // its tensor in the spec
  bool zero = false;       // the derivative vanishes: the gradient is zeros
  std::string grad_arg;    // schema argument of `spec` that receives the incoming gradient
  std::string select_arg;  // reduce max/min: argument of `spec` that receives the forward's positions
  std::string text;        // the derived spec, in the spec language
  OpSpec spec;             // parsed from `text`
  // Row statistics hoisted out of a walk by columns. Inside the CSC walk of an adjoint (column j,
  // then the rows i holding it) a row max or row sum of the forward (a softmax's) would be a walk
  // over row i nested in the walk over j; each such sub-expression becomes a derived op of its
  // own, `<op>_stat<k>` (a walk by rows with a dense output over the row and the free indices),
  // which the backward runs first and passes as the dense argument `arg` (shared by the
  // adjoints of one op that need the same statistic). The adjoint then has grad_order 0.
  struct Stat {
    std::string arg;  // schema argument of the adjoint receiving it
    OpSpec spec;      // the statistic's op
    std::string text;
  };
  std::vector<Stat> stats;
};
// Differentiates every floating input (dense operands, csr values, edge operands) of `spec`.
// Sums distribute, products follow the product rule, functions the chain rule with one
// derivative table; variables bound inside a kept copy of a sub-expression are renamed. The
// result reads only the op's inputs and the incoming gradient: edge-sized intermediates of a
// fused op are recomputed inside the adjoint's kernel, never saved.
std::vector<Adjoint> differentiate(const OpSpec& spec);

// One user op and every op derived from it, down to its grad_order.
struct Family {
  Target target = Target::Cpu;
  std::vector<std::unique_ptr<Compiled>> ops;  // ops[0] is the user op
  std::map<std::string, std::vector<Adjoint>> adjoints;  // op name -> its adjoints (grad_order > 0)
};
Family compile_family(const OpSpec& user_op, Target target = Target::Cpu);

// An op that is one cuSPARSE generic-API call (aten_cusparse.cpp; the CUDA adapters hand it to
// cuSPARSE when that backend is selected):
//   SpMM   Y(a,f) = A(i,j) [* edge operands on A] * X(b,f) with {a, b} = {i, j}: op(A) = A where a
//          is A's row, A^T (transpose) where it is A's column;
//   SDDMM  E(i,j) on A = A(i,j) [* edge operands on A] * U(i,k) * V(j,k).
// `values`: A (where it has values) and the edge operands, whose product is each entry's value
// (none: 1). A sum over one csr operand (not `single`), row-major 2-D dense operands and output,
// no accumulation-precision tensors; nullopt for anything else.
struct CusparseForm {
  enum class Kind { SpMM, SDDMM };
  Kind kind = Kind::SpMM;
  const TensorDecl* sparse = nullptr;
  bool transpose = false;
  std::vector<const TensorDecl*> values;
  const TensorDecl* dense0 = nullptr;  // SpMM: X; SDDMM: U (indexed by A's row)
  const TensorDecl* dense1 = nullptr;  // SDDMM: V (indexed by A's column)
};
std::optional<CusparseForm> cusparse_form(const OpSpec& s);

// An op that the Tensor-Core SpMM runs (aten_cusparse.cpp; its kernels: cuda_tensor_cores.cpp):
// the SpMM form of CusparseForm, or its per-head form
//   Y(a,h,f) = A(i,j) [* edge operands on A, over (i,j) or (i,j,h)] * X(b,h,f), {a, b} = {i, j}:
// for every head h an SpMM over the same pattern whose entry values are the factors at h.
// `values` as CusparseForm's, at most cuda::kTcMaxFactors; `heads[k]`: values[k] is over the head.
struct TensorCoreForm {
  const TensorDecl* sparse = nullptr;
  bool transpose = false;
  std::vector<const TensorDecl*> values;
  std::vector<bool> heads;
  std::vector<bool> optional;  // values[k] may be absent (None: 1)
  const TensorDecl* x = nullptr;
  std::string head;  // the head variable; "" for the plain SpMM form
};
std::optional<TensorCoreForm> tensor_core_form(const OpSpec& s);

std::vector<GeneratedFile> emit_op_cpu(const Family& f);     // <op>_kernel.h, <op>_cpu.cpp
std::vector<GeneratedFile> emit_op_cuda(const Family& f);    // <op>_cuda.h, <op>_cuda.cu
// The kernel files of a family for its target (emit_op_cpu for cpu).
std::vector<GeneratedFile> emit_op_kernels(const Family& f);
std::vector<GeneratedFile> emit_op_registration(const Family& f);  // <op>_register.cpp
// The ATen adapters of a family compiled for the CUDA target, <op>_cuda_register.cpp (aten_cuda.cpp):
// registered at the CUDA key (or at the CPU key in the emulated library, GNNFUSE_CUDA_EMULATED).
std::vector<GeneratedFile> emit_op_cuda_registration(const Family& f);
std::vector<GeneratedFile> emit_library(const std::vector<const Family*>& fs);  // registration.cpp, include/gnnfuse/ops.h

// ---------------------------------------------------------------- the target table
// One row per target (target.cpp). Adding a target: a row here, its schedule pass and its kernel
// printer; the stages above the schedule, autodiff and the ATen layer are shared.
struct TargetInfo {
  Target target;
  const char* name;            // gnnfuse-gen --target NAME
  const char* dispatch_key;    // the ATen backend key its kernels register at
  const char* device;          // its c10::DeviceType: the family's autocast kernel registers at Autocast<device>
  const char* schedule_stage;  // the name of its schedule's snapshot (Compiled::stages, --dump)
  void (*schedule)(const Program& p, Node& root);               // nullptr: not lowered yet
  std::vector<GeneratedFile> (*emit_kernels)(const Family& f);  // nullptr: not lowered yet
  std::string (*print_cost)(const Cost& cost);                  // its spelling of a cost model
  // Its schedule variants (nullptr: none); whether the ATen layer (adapters, registration) is
  // generated for it yet (cuda: the kernels and their host launch functions only).
  std::vector<ScheduleVariant> (*variants)(const Program& p, const Node& root) = nullptr;
  bool registers = true;
};
// Every target, the ones not lowered yet included (their devices get the autocast kernels).
const std::vector<TargetInfo>& targets();
const TargetInfo& target_info(Target target);
// "cpu" -> Target::Cpu; SpecError naming the known targets otherwise.
Target parse_target(const std::string& name);
// A cost model as `target` spells it.
std::string print_cost(Target target, const Cost& cost);

}  // namespace gnnfuse::codegen
