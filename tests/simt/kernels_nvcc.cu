// kernels.cuh compiled by nvcc (the ctest simt_nvcc_gate, tests/simt/nvcc_gate.cmake): the
// same text the emulator runs in test_simt.cpp. Taking every launcher's address instantiates
// every kernel; nothing here runs.
#include "kernels.cuh"

namespace simt_test {

void* launchers[] = {
    reinterpret_cast<void*>(&launch_reverse_in_block),
    reinterpret_cast<void*>(&launch_dynamic_shared_sum),
    reinterpret_cast<void*>(&launch_read_before_write),
    reinterpret_cast<void*>(&launch_missing_barrier),
    reinterpret_cast<void*>(&launch_barrier_predicates),
    reinterpret_cast<void*>(&launch_divergent_barrier),
    reinterpret_cast<void*>(&launch_two_barriers),
    reinterpret_cast<void*>(&launch_shuffle<int>),
    reinterpret_cast<void*>(&launch_shuffle<float>),
    reinterpret_cast<void*>(&launch_shuffle<double>),
    reinterpret_cast<void*>(&launch_shuffle<long long>),
    reinterpret_cast<void*>(&launch_shuffle<__half>),
    reinterpret_cast<void*>(&launch_shuffle<__nv_bfloat16>),
    reinterpret_cast<void*>(&launch_vote),
    reinterpret_cast<void*>(&launch_active_masks),
    reinterpret_cast<void*>(&launch_syncwarp_exchange),
    reinterpret_cast<void*>(&launch_shuffle_barrier_deadlock),
    reinterpret_cast<void*>(&launch_shuffle_exited_lanes),
    reinterpret_cast<void*>(&launch_mismatched_collectives),
    reinterpret_cast<void*>(&launch_mask_without_caller),
    reinterpret_cast<void*>(&launch_atomics),
    reinterpret_cast<void*>(&launch_checked_gather),
    reinterpret_cast<void*>(&launch_ldmatrix_rows),
    reinterpret_cast<void*>(&launch_cp_async_groups),
    reinterpret_cast<void*>(&launch_cp_async_ldmatrix),
    reinterpret_cast<void*>(&launch_cp_async_staged_load),
    reinterpret_cast<void*>(&launch_staged_strided),
    reinterpret_cast<void*>(&launch_staged_misaligned),
    reinterpret_cast<void*>(&launch_ldmatrix_strided),
    reinterpret_cast<void*>(&launch_low_precision),
    reinterpret_cast<void*>(&launch_mma_fragments),
    reinterpret_cast<void*>(&launch_mma_divergent_sites),
    reinterpret_cast<void*>(&launch_cvt_tf32),
    reinterpret_cast<void*>(&launch_spmm),
};

}  // namespace simt_test
