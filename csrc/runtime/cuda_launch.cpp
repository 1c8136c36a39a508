// The launch decision of the generated CUDA kernels (cuda_launch.h). The rules, from seeds 000
// and 001 (../shared/research), to be tuned on a GPU:
//   variant  a nonzero-balanced kernel (pos split) where the degrees are skewed (the longest row
//            over 32 times the mean and at least 128 entries) or the rows few and long (under
//            1024 rows of at least 256 entries on average): its atomic form unless the call must
//            be deterministic; else row split, warp-per-row (32 lanes per row) from a mean row
//            length of 64; else lanes (the only variant of some ops).
//   determinism  under deterministic algorithms no variant marked `atomic` (its result depends on
//            the order of floating-point atomics) is chosen or forced; where the op offers only
//            such, the first, with LaunchConfig::nondeterministic set for the caller to report.
//   group    row split: 4 lanes per row for short rows (mean up to 8) or narrow rows (F up to 16),
//            16 from a mean of 32, else 8 (seed 000's best static choice, 4 to 8); lanes: the
//            lane variable's extent rounded up to a power of two, at most 32.
//   sizes    256 threads per block; grid-stride kernels over at most 65535 blocks; row split and
//            pos split tile the columns (feature_tile per thread) and read them 16 bytes at a
//            time where F and the alignment allow; pos split gives each warp 256 entries and, in
//            its deterministic form, two carries per chunk in the workspace; lanes keep the
//            groups' row buffers in shared memory when a block's fit in 48 KiB, else in the
//            workspace with the grid capped to bound it.
//   reg      the register forms (RegLanes, PosLanes) first where offered: PosLanes (PosLanesAtomic
//            unless deterministic) where the degrees are skewed or the longest row would hold up
//            a row's group longer than streaming the gathered rows takes (tail_bound), with
//            chunks of 32 to 128 entries (pos_lanes_chunk), else RegLanes; a group of G =
//            min(32, ceil(F / VW)) lanes (a power of two; several rows per warp for small F), VW
//            16 bytes' worth where every lane loop's extent and the alignment allow, R = ceil(F /
//            (G VW)) register chunks (a power of two up to 8; beyond, several passes over the
//            columns where the kernel allows it, else a larger group, else the older forms).
#include "runtime/cuda_launch.h"

#include <algorithm>
#include <stdexcept>

namespace gnnfuse::runtime::cuda {

namespace {

constexpr int64_t kLanesWorkspaceCap = int64_t(64) << 20;  // bytes of row buffers of a lanes kernel

int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }
int64_t clamp_grid(int64_t blocks) { return std::max<int64_t>(1, std::min(blocks, kMaxGrid)); }

int pow2_at_least(int64_t n, int cap) {
  int g = 1;
  while (g < n && g < cap) g *= 2;
  return g;
}

// The offered variant v (none where the call must be deterministic and v is atomic).
const VariantShape* find(const Request& req, Variant v, size_t* at) {
  for (size_t k = 0; k < req.variants.size(); ++k)
    if (req.variants[k].variant == v && !(req.deterministic && req.variants[k].atomic)) {
      *at = k;
      return &req.variants[k];
    }
  return nullptr;
}

// The widest tiled or lane extent (F) over a variant's kernels, at least 1.
int64_t widest_extent(const VariantShape& v) {
  int64_t f = 1;
  for (auto& k : v.kernels) f = std::max(f, k.tile_extent);
  return f;
}

int row_split_group(const Request& req, const VariantShape& v) {
  const double mean = req.graph.mean_row();
  const int64_t f = widest_extent(v);
  if (mean >= 64) return 32;
  if (mean >= 32) return 16;
  if (mean <= 8 || f <= 16) return 4;
  return 8;
}

bool skewed(const GraphStats& g) {
  const double mean = std::max(1.0, g.mean_row());
  return (static_cast<double>(g.max_row) > 32.0 * mean && g.max_row >= 128) || (g.rows > 0 && g.rows < 1024 && mean >= 256);
}

// The register forms: a group per row (RegLanes) walks the row's entries one after another, a
// few loads in flight, so it takes at least the longest row times kEntryNs; a group per chunk of
// entries (PosLanes) does not wait on any row, but needs a second kernel (the output's fill, or
// the fix-up). PosLanes where that tail exceeds the time to stream the gathered rows (nnz + rows
// rows of F elements) at kStreamBytesPerNs by more than the extra launch: hub rows, or few rows.
// A row's entry costs kEntryNs plus its feature row at kEntryBytesPerNs (H200, runs 3 and 4:
// reg_lanes took 0.2 us per entry of the longest row at F = 32, 0.43 us at F = 256, fp32).
bool tail_bound(const Request& req, const VariantShape& v) {
  const int64_t f = widest_extent(v);
  const double stream_ns = static_cast<double>(req.graph.nnz + req.graph.rows) * static_cast<double>(f) * req.scalar_bytes / kStreamBytesPerNs;
  const double entry_ns = kEntryNs + static_cast<double>(f) * req.scalar_bytes / kEntryBytesPerNs;
  return static_cast<double>(req.graph.max_row) * entry_ns > stream_ns + kExtraLaunchNs;
}

// PosLanes' entries per chunk: about four chunks per group the GPU holds at once, a power of two
// in [kPosLanesChunkMin, kPosLanesChunkMax] (H200, run 3: chunks of 128 beat 512 and 2048 on
// R-MAT at F <= 64 and tie beyond; small graphs need the small chunks to fill the GPU).
int64_t pos_lanes_chunk(int64_t nnz, int group) {
  const int64_t resident = kResidentThreads / std::max(1, group);
  int64_t c = kPosLanesChunkMin;
  while (c < kPosLanesChunkMax && nnz / (2 * c) >= 4 * resident) c *= 2;
  return c;
}

int vector_width(const Request& req, const KernelShape& k) {
  const int vw = 16 / std::max(1, req.scalar_bytes);
  if (!k.vector_ok || k.feature_tile <= 0 || k.feature_tile % vw != 0 || k.tile_extent % vw != 0) return 1;
  return vw;
}

// The register forms' vector width, group and register chunks: {vw, group, regs}; group 0 when
// the row buffers cannot cover the lane variable in one pass and the kernel needs it.
struct RegShape {
  int vw = 1, group = 1, regs = 1;
  int64_t passes = 1;
};
RegShape reg_shape(const Request& req, const KernelShape& k) {
  RegShape r;
  const int64_t f = std::max<int64_t>(1, k.tile_extent);
  const int vw = 16 / std::max(1, req.scalar_bytes);
  const int64_t g = k.lane_gcd > 0 ? gcd_of(k.lane_gcd, f) : f;
  r.vw = k.vector_ok && g % vw == 0 ? vw : 1;
  const int64_t vecs = ceil_div(f, r.vw);
  r.group = req.force_group > 0 ? req.force_group : pow2_at_least(vecs, kWarp);
  if (!k.regs) return r;
  r.regs = pow2_at_least(ceil_div(vecs, r.group), kMaxRegs);
  while (!k.passes && int64_t(r.group) * r.regs < vecs && r.group < kWarp) {
    r.group *= 2;
    r.regs = pow2_at_least(ceil_div(vecs, r.group), kMaxRegs);
  }
  if (int64_t(r.group) * r.regs < vecs && !k.passes) r.group = 0;
  else r.passes = ceil_div(vecs, int64_t(r.group) * r.regs);
  return r;
}

// Whether every kernel of a register-form variant fits (its row buffers cover the lane variable).
bool reg_fits(const Request& req, const VariantShape& v) {
  for (auto& k : v.kernels)
    if ((k.form == Form::RegLanes || k.form == Form::PosLanes) && reg_shape(req, k).group == 0) return false;
  return true;
}

KernelLaunch size(const Request& req, const KernelShape& k, int row_group) {
  KernelLaunch l;
  l.form = k.form;
  l.block = kBlock;
  const int64_t tiles = k.feature_tile > 0 ? ceil_div(k.tile_extent, k.feature_tile) : 1;
  switch (k.form) {
    case Form::RowSplit: {
      l.group = req.force_group > 0 ? req.force_group : row_group;
      l.grid = clamp_grid(ceil_div(k.rows * tiles, kBlock / l.group));
      l.vector_width = vector_width(req, k);
      break;
    }
    case Form::PosSplit: {
      l.group = kWarp;
      l.chunk = kPosChunk;
      l.chunks = ceil_div(req.graph.nnz, l.chunk);  // the kernel reads nnz from the row pointers: the caller's must be exact
      l.grid = clamp_grid(ceil_div(l.chunks * tiles, kBlock / kWarp));
      l.vector_width = vector_width(req, k);
      l.workspace_bytes = 0;
      break;
    }
    case Form::RegLanes:
    case Form::PosLanes: {
      const RegShape r = reg_shape(req, k);
      if (r.group == 0)
        throw std::invalid_argument("cuda launch: the register chunks of a lanes kernel cannot cover its lane extent " + std::to_string(k.tile_extent));
      l.group = r.group;
      l.regs = r.regs;
      l.vector_width = r.vw;
      if (k.form == Form::RegLanes) {
        l.grid = clamp_grid(ceil_div(k.rows * r.passes, kBlock / l.group));
      } else {
        l.chunk = pos_lanes_chunk(req.graph.nnz, l.group);
        l.chunks = ceil_div(req.graph.nnz, l.chunk);  // as PosSplit: the caller's nnz must be exact
        l.grid = clamp_grid(ceil_div(l.chunks * r.passes, kBlock / l.group));
      }
      break;
    }
    case Form::Lanes:
    case Form::Serial: {
      l.group = req.force_group > 0 ? req.force_group : pow2_at_least(k.split_mean > 0 ? k.split_mean : k.tile_extent, kWarp);
      if (k.form == Form::Serial) {
        l.block = l.group;
        l.grid = 1;
      } else {
        l.grid = clamp_grid(ceil_div(k.rows, kBlock / l.group));
      }
      const int64_t groups = l.block / l.group;
      const int64_t buffers = (k.group_elems + l.group * k.thread_elems) * req.acc_bytes;  // per group
      const int64_t staged = (l.block * k.staged_bytes + 15) / 16 * 16;  // as the kernel lays it out
      if (groups * buffers + staged <= kSharedBytes) {
        l.buffers_shared = true;
        l.smem_bytes = groups * buffers + staged;
      } else {
        l.smem_bytes = staged;
        if (buffers > 0) l.grid = std::max<int64_t>(1, std::min(l.grid, kLanesWorkspaceCap / std::max<int64_t>(1, groups * buffers)));
        l.workspace_bytes = l.grid * groups * buffers;
      }
      break;
    }
  }
  return l;
}

}  // namespace

const char* to_string(Variant v) {
  switch (v) {
    case Variant::RowSplit: return "row_split";
    case Variant::WarpPerRow: return "warp_per_row";
    case Variant::PosSplit: return "pos_split";
    case Variant::PosSplitAtomic: return "pos_split_atomic";
    case Variant::Lanes: return "lanes";
    case Variant::RegLanes: return "reg_lanes";
    case Variant::PosLanes: return "pos_lanes";
    case Variant::PosLanesAtomic: return "pos_lanes_atomic";
  }
  return "?";
}

bool parse_variant(const std::string& name, Variant* out) {
  for (Variant v : {Variant::RowSplit, Variant::WarpPerRow, Variant::PosSplit, Variant::PosSplitAtomic, Variant::Lanes, Variant::RegLanes,
                    Variant::PosLanes, Variant::PosLanesAtomic})
    if (name == to_string(v)) {
      *out = v;
      return true;
    }
  return false;
}

LaunchConfig decide(const Request& req) {
  if (req.variants.empty()) throw std::invalid_argument("cuda launch: the op offers no variant");
  LaunchConfig cfg;
  cfg.lowering = req.lowering;
  const VariantShape* chosen = nullptr;
  size_t at = 0;
  int row_group = 8;
  if (req.force_variant >= 0) {
    cfg.variant = static_cast<Variant>(req.force_variant);
    const Variant kernels = cfg.variant == Variant::WarpPerRow ? Variant::RowSplit : cfg.variant;
    chosen = find(req, kernels, &at);
    if (!chosen) throw std::invalid_argument(std::string("cuda launch: variant ") + to_string(cfg.variant) + " is not offered by the op");
    if (cfg.variant == Variant::RowSplit) row_group = row_split_group(req, *chosen);
    if (cfg.variant == Variant::WarpPerRow) row_group = kWarp;
  } else {
    const VariantShape* pos = find(req, Variant::PosSplit, &at);
    size_t at_atomic = 0;
    const VariantShape* atomic = req.deterministic ? nullptr : find(req, Variant::PosSplitAtomic, &at_atomic);
    size_t at_rows = 0;
    const VariantShape* rows = find(req, Variant::RowSplit, &at_rows);
    size_t at_reg = 0, at_pl = 0, at_pla = 0;
    const VariantShape* reg = find(req, Variant::RegLanes, &at_reg);
    const VariantShape* pl = find(req, Variant::PosLanes, &at_pl);
    const VariantShape* pla = req.deterministic ? nullptr : find(req, Variant::PosLanesAtomic, &at_pla);
    if (reg && !reg_fits(req, *reg)) reg = nullptr;
    if (pl && !reg_fits(req, *pl)) pl = nullptr;
    if (pla && !reg_fits(req, *pla)) pla = nullptr;
    if ((pl || pla) && (skewed(req.graph) || (reg && tail_bound(req, *reg)))) {
      chosen = pla ? pla : pl;
      cfg.variant = pla ? Variant::PosLanesAtomic : Variant::PosLanes;
      at = pla ? at_pla : at_pl;
    } else if (reg) {
      chosen = reg;
      at = at_reg;
      cfg.variant = Variant::RegLanes;
    } else if ((pos || atomic) && skewed(req.graph)) {
      chosen = atomic ? atomic : pos;
      cfg.variant = atomic ? Variant::PosSplitAtomic : Variant::PosSplit;
      if (atomic) at = at_atomic;
    } else if (rows) {
      chosen = rows;
      at = at_rows;
      row_group = row_split_group(req, *rows);
      cfg.variant = row_group == kWarp ? Variant::WarpPerRow : Variant::RowSplit;
    } else {
      chosen = find(req, Variant::Lanes, &at);
      cfg.variant = Variant::Lanes;
      for (size_t k = 0; !chosen && k < req.variants.size(); ++k)
        if (!(req.deterministic && req.variants[k].atomic)) {
          chosen = &req.variants[k];
          at = k;
          cfg.variant = chosen->variant;
        }
      if (!chosen) {  // every variant atomic: the caller reports it (torch: alertNotDeterministic)
        chosen = &req.variants[0];
        at = 0;
        cfg.variant = chosen->variant;
        cfg.nondeterministic = true;
      }
    }
  }
  cfg.offered = at;
  int64_t offset = aligned(req.call_bytes);
  for (auto& k : chosen->kernels) {
    KernelLaunch l = size(req, k, row_group);
    if ((l.form == Form::PosSplit && cfg.variant == Variant::PosSplit) || (l.form == Form::PosLanes && cfg.variant == Variant::PosLanes && k.regs))  // carries: two per chunk, and the row of the second
      l.workspace_bytes = l.chunks * 2 * k.tile_extent * req.acc_bytes + l.chunks * static_cast<int64_t>(sizeof(int64_t));
    l.workspace_offset = offset;
    offset += aligned(l.workspace_bytes);
    cfg.kernels.push_back(l);
  }
  cfg.workspace_bytes = offset;
  return cfg;
}

}  // namespace gnnfuse::runtime::cuda
