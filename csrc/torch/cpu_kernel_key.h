// The dispatch key the generated CPU kernels of the families with CUDA kernels are registered at
// (<fam>_register.cpp, every family: a CpuKernelRegistration), chosen when the
// library loads rather than when the file is compiled, so that one object serves both libraries:
//   libgnnfuse            c10::DispatchKey::CPU;
//   libgnnfuse_cuda_emu   PrivateUse3, a key no tensor in the tests carries: the CPU key is the
//                         CUDA adapters' there (GNNFUSE_CUDA_DISPATCH_KEY), which run the ops on
//                         CPU tensors through the SIMT emulator, while the family's schemas,
//                         Meta, Autograd, FuncTorchBatched and Autocast kernels stay at their keys.
// cpu_kernel_key() is defined once per library (csrc/torch/cpu_kernel_key.cpp, compiled into each
// with or without GNNFUSE_CUDA_EMULATED).
#pragma once

#include <cstdint>

#include <c10/core/DispatchKey.h>
#include <torch/library.h>

namespace gnnfuse::detail {

c10::DispatchKey cpu_kernel_key();

// A torch::Library block (kind IMPL, namespace gnnfuse) at cpu_kernel_key(), registered while it
// lives (a static of the registration file: from loading the library to unloading it), as
// TORCH_LIBRARY_IMPL's is.
class CpuKernelRegistration {
 public:
  CpuKernelRegistration(void (*init)(torch::Library&), const char* file, uint32_t line)
      : lib_(torch::Library::IMPL, "gnnfuse", cpu_kernel_key(), file, line) {
    init(lib_);
  }

 private:
  torch::Library lib_;
};

}  // namespace gnnfuse::detail
