// Helpers the generated autograd kernels share (torch.func support); csrc/codegen/emit_cpu.cpp
// emits calls to them.
#pragma once

#include <initializer_list>
#include <optional>

#include <ATen/core/Tensor.h>

namespace gnnfuse::detail {

// ---------------------------------------------------------------- forward-mode AD
inline const at::Tensor* ptr(const at::Tensor& t) { return &t; }
inline const at::Tensor* ptr(const std::optional<at::Tensor>& t) { return t ? &*t : nullptr; }

// The generated derivatives are adjoints (reverse mode); an input carrying a forward-mode
// tangent (torch.func.jvp, jacfwd, torch.autograd.forward_ad) would otherwise give an output
// without one, silently. A clear error instead.
inline void no_forward_ad(const char* op, std::initializer_list<const at::Tensor*> floats) {
  for (const at::Tensor* t : floats)
    TORCH_CHECK_NOT_IMPLEMENTED(!(t && t->defined() && t->_fw_grad(/*level=*/0).defined()), "gnnfuse::", op,
                                ": forward-mode AD (torch.func.jvp, torch.func.jacfwd, torch.autograd.forward_ad) is not supported: "
                                "the generated derivatives are reverse-mode adjoints (use torch.func.vjp, jacrev or grad)");
}

}  // namespace gnnfuse::detail
