// The CUDA kernel printer: one schedule variant of one lowering of an op (its imperative IR,
// ScheduleVariant::kernel, lowered once by the pipeline from its CUDA-scheduled tree) printed as
// CUDA kernels over cuda/simt.cuh and cuda/device_runtime.cuh, with its host side: the shape of
// every kernel for the launch decision (runtime/cuda_launch.h) and the launch function.
//
// The variant's steps, in order: the temporaries of the whole call (the root's allocations, and
// the rows of a dense product block's operands and result) in the workspace, filled on the
// stream; then per top-level loop one kernel per phase (its children between dense product
// blocks) and, between phases, the block as a call of the matmul hook (Env::matmul: cuBLAS in
// the adapter). A phase's form follows its annotations (schedule_cuda.cpp):
//   RowSplit  a walk split over the group's lanes (LaneGroup): groups of G lanes per (row, tile
//             of feature_tile columns), row buffers in registers, shuffles after each walk;
//   PosSplit  the top loop balanced by nonzeros (balance_by): a warp per chunk of entries, a
//             segmented reduction, carries added by a fix-up kernel (Segmented) or atomics at the
//             chunk borders (Atomic); the output zeroed first (rows without entries);
//   Lanes     groups walk rows together, lanes split the loops marked Lane; row buffers in shared
//             memory or the workspace (per group where they keep the lane variable, per lane
//             otherwise); walks under the row stage their entries in shared memory;
//   Serial    a top loop that is not parallel: one group runs it (lanes as above);
//   RegLanes  (variant reg_lanes) the lanes tree with the row buffers in registers: each lane owns
//             C_ = VW_ consecutive elements of the lane variable times R_ chunks (template
//             parameters), the group walks the row's entries loaded G_ at a time and broadcast
//             by shuffles; a kernel whose buffers cannot live in registers stays Lanes;
//   PosLanes  (variants pos_lanes, pos_lanes_atomic) the pos split tree so: a group per chunk of
//             stored entries, rows cut by a chunk border added by carries or atomics.
// The register forms: cuda_kernel_lanes.cpp.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "codegen/imperative.h"

namespace gnnfuse::codegen::emit {

class CudaPrinter : public CodeWriter {
 public:
  // `fn`: the prefix of the variant's kernels and host functions.
  CudaPrinter(const Compiled& c, const ScheduleVariant& v, std::string fn);

  std::string kernels();  // the device code
  std::string host();     // <fn>_shape<scalar_t, index_t>(prm), <fn>_launch<scalar_t, index_t>(prm, cfg, env)
  const imp::Kernel& ir() const { return k_; }

 private:
  enum class Form { RowSplit, PosSplit, Lanes, Serial, RegLanes, PosLanes };
  // One kernel (a phase of a top loop) or one dense product block.
  struct Step {
    const imp::Stmt* top = nullptr;
    const MatmulBlock* matmul = nullptr;  // a block: the hook, no kernel
    std::vector<const imp::Stmt*> body;   // the phase's statements (row bounds and allocations first)
    Form form = Form::Lanes;
    std::string tile;  // RowSplit, PosSplit: the tiled variable ("" none); Lanes, Serial: the lane variable
    std::set<std::string> spill;  // temporaries whose rows the kernel stores into rows_<T> (a block's operands)
    std::set<std::string> rows;   // temporaries read from rows_<T> (a block's result)
    int kernel = -1;              // index among the variant's kernels
    std::vector<std::string> vec_reads;  // dense inputs read by tiles (their alignment allows vector loads)
    bool staged = false, staged_values = false, staged_edges = false;  // Lanes: staged walks, and what they keep
    bool entrywise = false;  // PosLanes: one walk of per-entry values (no row sums, no output zeroed)
    bool tile_loads = false;  // RowSplit, PosSplit, RegLanes, PosLanes: a tile loop loads rows by VW_ (else VW_ = 1 only)
    // Lanes without a lane variable whose row sums go to a temporary stored by positions (a
    // computed pattern's row workspace, seed 002): the walk whose entries the group's lanes take
    // one each (find_split), the temporary, and whether each lane writes only the positions of
    // its own entries (the walk is over the temporary's operand: no two lanes meet).
    const imp::Stmt* split = nullptr;
    std::string split_temp;
    bool split_free = false;
  };
  // A temporary of the whole call: the root's, or the rows of a dense product block operand.
  struct CallTemp {
    std::string name;
    std::vector<std::string> dims;
    Reduce init = Reduce::Sum;
    bool fill = true;
    // A temporary stored by the positions of a csr operand's entries (`compressed_by`): one
    // element per stored entry of that operand (prm.<by>_nnz), read and written at p_<by>; each
    // row's slots are its own, set by the group's uniform writer (lane 0).
    std::string by;
  };

  const Compiled& c_;
  const Program& p_;
  const OpSpec& s_;
  const std::string variant_;
  const std::string fn_;
  const imp::Kernel& k_;  // the variant's imperative IR (ScheduleVariant::kernel)
  std::vector<Step> steps_;
  std::vector<CallTemp> call_;
  std::set<std::string> call_names_;

  // ---- printing context of the kernel being printed
  const Step* step_ = nullptr;
  std::string row_;                 // the top loop's variable
  std::set<std::string> regs_;      // RowSplit, PosSplit: row buffers in registers (C_ columns)
  std::map<std::string, int> group_bufs_, thread_bufs_;  // Lanes: row buffers (their order)
  std::map<std::string, std::string> tiles_;  // a tile loop's preloaded rows: access text -> register array
  std::set<std::string> args_;      // RowSplit: temporaries with a position shadow (<T>_at)
  bool divergent_ = false;          // inside a split walk or a lane loop: each lane its own entries
  bool in_tile_ = false;            // inside a tile loop (k_ the column of the tile)
  std::string staged_;              // the level of the staged walk being printed
  bool pos_entry_ = false;          // PosSplit: printing the walk's body for one entry
  bool split_body_ = false;         // printing the body of a Step::split walk for one lane's entry
  std::string staged_value_ = "sv_[q_]";  // the staged walk's value of the entry being printed
  std::string kidx_ = "k_";         // a register buffer's element in a tile (RegLanes, PosLanes: of chunk r_)
  std::string regs_len_ = "C_";     // a register buffer's length

  void plan();
  void add_call_temp(const std::string& name, const std::vector<std::string>& dims, Reduce init, bool fill, const std::string& by = "");
  const CallTemp* positional(const std::string& name) const;  // the call temporary stored by positions, else null
  const imp::Stmt* find_accumulate(const imp::Stmt& s, const std::string& temp) const;

  // ---- shared pieces (cuda_kernel.cpp)
  void locals();
  void call_pointers(bool host);
  std::string offset(const std::vector<std::string>& idx) const;
  std::string ptr(const std::string& level) const;
  std::string value(const imp::Value& v) const;
  std::string read(const imp::Value& v) const;
  std::string temp_ref(const Access& a) const;
  std::string init(Reduce r) const;
  bool uniform_writer() const;
  void statement(const imp::Stmt& s);
  void assign(const imp::Stmt& s);
  void loop(const imp::Stmt& s);
  void tile_loop(const imp::Stmt& s);
  // The rows a tile loop loads a tile at a time (by VW_, or VWA_ for the accumulation type's):
  // dense inputs and call temporaries indexed last, once, by the tile's variable.
  std::vector<std::pair<Access, bool>> tile_rows(const imp::Stmt& s) const;
  void walk(const imp::Stmt& s);
  bool row_single(const imp::Stmt& w) const;
  void find_split(Step& st) const;
  void split_walk(const imp::Stmt& s);
  void strided_walk(const imp::Stmt& s);
  bool entry_writes(const imp::Stmt& s) const;
  void staged_walk(const imp::Stmt& s);
  void entry_blocks(const imp::Stmt& s);
  std::string entry_value(const imp::Stmt& s, const std::string& e) const;
  void walk_entry(const imp::Stmt& s, const std::string& p);
  void combine(const imp::Stmt& loop, const std::vector<std::string>& temps);
  void fill(const imp::Stmt& s);
  void spill();

  // ---- kernels
  void row_kernel(const Step& st);
  void lanes_kernel(const Step& st);
  void lanes_buffers(const Step& st);
  void pos_kernel(const Step& st);  // cuda_kernel_pos.cpp
  void pos_fixup(const Step& st);
  void chunks(const std::string& P, bool carries, bool read_only);
  void kernel_head(const Step& st, bool vec, bool regs = false);
  void setup_row_context(const Step& st);

  // ---- register forms (cuda_kernel_lanes.cpp)
  bool reg_ok(const Step& st) const;
  bool reg_passes(const Step& st) const;
  void reg_lanes_kernel(const Step& st);
  void pos_lanes_kernel(const Step& st);
  bool entrywise(const Step& st) const;
  void entry_lanes_kernel(const Step& st);
  void chunk_entry(const imp::Stmt& w);
  void reg_lane_loop(const imp::Stmt& s);
  void broadcast_walk(const imp::Stmt& s);
  void broadcast_entries(const imp::Stmt& s, const std::string& b);
  void reg_columns(const std::string& v, const std::string& c0, const std::function<void()>& body);
  void reg_launch(const Step& st, const std::string& dims);
  bool reg_form() const;

  // ---- host (cuda_kernel_pos.cpp)
  void shape(const Step& st);
  void launch_step(const Step& st);
  void matmul_call(const Step& st);
  std::string kernel_name(const Step& st, const std::string& suffix = "") const;
};

}  // namespace gnnfuse::codegen::emit
