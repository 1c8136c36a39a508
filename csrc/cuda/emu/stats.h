// The SIMT emulator's counts of shared-memory bank conflicts (performance facts, not errors: tests
// assert that a kernel's tiles are laid out without them). Plain C++, no emulator macros: the
// emulated library's host code (torch/cuda/adapter.cpp) includes it to expose them as ops.
#pragma once

#include <cstdint>

namespace gnnfuse::simt {

// ldmatrix since the library loaded: for each 8 x 8 matrix (8 rows of 16 bytes, one 128-byte
// wavefront when free of conflicts), the wavefronts its rows need beyond one, i.e. the most
// distinct 4-byte words one of the 32 banks (word offset in the block's shared memory mod 32)
// holds, minus 1. Plain loads and stores are not seen.
std::uint64_t ldmatrix_bank_conflicts();

// The same for the staged loads (gnnfuse_ld_staged[16]) since the library loaded: load
// instructions and their extra wavefronts. An instruction is the k-th call at one call site of
// the lanes of one warp (so the count is exact where a warp's lanes call a site together; a lane
// that skips a call there is grouped with the others' later calls); its lanes are served in
// phases of 128 bytes (32 lanes of up to 4 bytes, 16 of 8, 8 of 16), each needing as many
// wavefronts as the most distinct words one bank holds among its lanes' bytes.
struct StagedLoadStats {
  std::uint64_t loads = 0, extra_wavefronts = 0;
};
StagedLoadStats staged_load_stats();

}  // namespace gnnfuse::simt
