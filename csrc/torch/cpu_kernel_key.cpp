// The key of the generated CPU kernels of the families with CUDA kernels (torch/cpu_kernel_key.h):
// compiled into libgnnfuse (CPU) and into libgnnfuse_cuda_emu.so (GNNFUSE_CUDA_EMULATED: PrivateUse3).
#include "torch/cpu_kernel_key.h"

namespace gnnfuse::detail {

c10::DispatchKey cpu_kernel_key() {
#ifdef GNNFUSE_CUDA_EMULATED
  return c10::DispatchKey::PrivateUse3;
#else
  return c10::DispatchKey::CPU;
#endif
}

}  // namespace gnnfuse::detail
