// libgnnfuse_cuda_emu.so only (CMakeLists.txt: gnnfuse_cuda_emu): the CPU registration file
// <fam>_register.cpp of a family with CUDA kernels is compiled through a wrapper that includes
// this header first. Its kernels at the CPU key move to PrivateUse3, a key no tensor in the
// tests carries, so that the family's CUDA adapters, registered at the CPU key in the emulated
// library (GNNFUSE_CUDA_DISPATCH_KEY), run the ops on CPU tensors through the SIMT emulator.
// Everything else the file registers (schemas, Meta, Autograd, FuncTorchBatched, Autocast*) stays
// at its key, and the generated text is the one libgnnfuse compiles. A key not listed below is a
// compile error (GNNFUSE_EMU_KEY_<key> undeclared): list it when the registration grows one.
#pragma once

#include <torch/library.h>

#define GNNFUSE_EMU_KEY_CPU PrivateUse3
#define GNNFUSE_EMU_KEY_Meta Meta
#define GNNFUSE_EMU_KEY_Autograd Autograd
#define GNNFUSE_EMU_KEY_FuncTorchBatched FuncTorchBatched
#define GNNFUSE_EMU_KEY_AutocastCPU AutocastCPU
#define GNNFUSE_EMU_KEY_AutocastCUDA AutocastCUDA

#undef TORCH_LIBRARY_IMPL
#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(ns, GNNFUSE_EMU_KEY_##k, m, C10_UID)
