// Helpers the generated batching rules (vmap: the FuncTorchBatched key) and autocast kernels
// (the AutocastCPU / AutocastCUDA keys) share; csrc/codegen/aten_transforms.cpp emits calls to them.
// Also the autograd-node pointer the generated Autograd-key kernels hold (aten_autograd.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/ops/stack.h>
#include <c10/core/SymInt.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/function.h>

#include "torch/checks.h"

namespace gnnfuse::detail {

// ---------------------------------------------------------------- autograd nodes
// torch::autograd::Node is owned through c10::intrusive_ptr from torch 2.12 on (pytorch#181782)
// and through std::shared_ptr before (torch 2.11, the GPU machines' torch). The generated
// Autograd-key kernels hold and make their nodes through these two, which follow the headers
// they are compiled against; set_history and collect_next_edges take either.
inline constexpr bool intrusive_nodes = std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>;

template <class N>
using node_ptr = std::conditional_t<intrusive_nodes, c10::intrusive_ptr<N>, std::shared_ptr<N>>;

template <class N>
node_ptr<N> make_node() {
  if constexpr (intrusive_nodes) {
    return c10::make_intrusive<N>();
  } else {
    // torch's own deleter for shared nodes (it frees long chains without deep recursion), found
    // by argument-dependent lookup so that headers without it never see the name
    return node_ptr<N>(new N(), [](N* n) { deleteNode(n); });
  }
}

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

// Whether the values of these tensors can be read here (checks that read indices): not under a
// torch.func transform (wrappers without storage), not during tracing by torch.compile or
// export (fake tensors: the Python key, no data). Where they cannot, the ops called below check
// the unwrapped or real tensors. (Meta tensors are readable here: the checks skip the values of
// tensors off the CPU, and check their devices.)
inline bool values_readable(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    if (t && t->defined() && (!t->has_storage() || t->key_set().has(c10::DispatchKey::Python))) return false;
  return true;
}

// ---------------------------------------------------------------- vmap
// (ATen/functorch/DynamicLayer.h, and PlumbingHelper.h through it, include nlohmann/json.hpp,
// which the torch wheels do not ship (pytorch/pytorch#181565): only BatchedTensorImpl.h is used.)
//
// The vmap level a batching rule runs at: the innermost level any argument is batched at. The
// rule runs when an argument is a BatchedTensor and a vmap layer is being processed; when the
// current layer batches none of them (a tensor captured from an outer vmap), computing at that
// outer level gives what redispatching down to it would.
inline int64_t vmap_level(const char* op, std::initializer_list<const at::Tensor*> tensors) {
  int64_t level = -1;
  for (const at::Tensor* t : tensors)
    if (t && t->defined())
      if (const auto* b = at::functorch::maybeGetBatchedImpl(*t)) level = std::max(level, b->level());
  TORCH_CHECK(level >= 0 && c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerBackMode), "gnnfuse::", op,
              ": called with a tensor batched by torch.func.vmap outside of its vmap (the tensor escaped the transform)");
  return level;
}

// A tensor argument at vmap level `level`: its value without that level's batching, and the
// dimension of that value holding the batch (none: the argument is the same for every element).
inline std::tuple<at::Tensor, std::optional<int64_t>> unwrap(const at::Tensor& t, int64_t level) {
  if (const auto* b = at::functorch::maybeGetBatchedImpl(t))
    if (b->level() == level) return {b->value(), b->bdim()};
  return {t, std::nullopt};
}
inline std::tuple<std::optional<at::Tensor>, std::optional<int64_t>> unwrap(const std::optional<at::Tensor>& t, int64_t level) {
  if (!t) return {std::nullopt, std::nullopt};
  auto [v, bdim] = unwrap(*t, level);
  return {std::optional<at::Tensor>(std::move(v)), bdim};
}

// A result at vmap level `level` with its batch at `bdim`.
inline at::Tensor make_batched(const at::Tensor& t, int64_t bdim, int64_t level) { return at::functorch::makeBatched(t, bdim, level); }

// The batch size, from the first batched argument (`*found` tells whether one was).
inline void batch_size(c10::SymInt* size, bool* found, const at::Tensor& t, std::optional<int64_t> bdim) {
  if (*found || !bdim) return;
  *size = t.sym_size(*bdim);
  *found = true;
}
inline void batch_size(c10::SymInt* size, bool* found, const std::optional<at::Tensor>& t, std::optional<int64_t> bdim) {
  if (t) batch_size(size, found, *t, bdim);
}

// Dimension `dim` of the unbatched (logical) tensor, read from the value with the batch at `bdim`.
inline c10::SymInt logical_size(const at::Tensor& t, std::optional<int64_t> bdim, int64_t dim) {
  return t.sym_size(bdim && *bdim <= dim ? dim + 1 : dim);
}

// Folds the batch into logical dimension `dim`: [..., n, ...] per element becomes
// [..., B * n, ...] (batch-major), one tensor for the whole batch. An argument without a batch
// is repeated B times along `dim` (its values the same for every element).
inline at::Tensor fold(const at::Tensor& t, std::optional<int64_t> bdim, int64_t dim, const c10::SymInt& B) {
  at::Tensor moved;
  if (bdim) {
    moved = t.movedim(*bdim, dim);
  } else {
    std::vector<c10::SymInt> sizes(t.sym_sizes().begin(), t.sym_sizes().end());
    sizes.insert(sizes.begin() + dim, B);
    moved = t.unsqueeze(dim).expand_symint(sizes);
  }
  return moved.flatten(dim, dim + 1).contiguous();
}
inline std::optional<at::Tensor> fold(const std::optional<at::Tensor>& t, std::optional<int64_t> bdim, int64_t dim, const c10::SymInt& B) {
  if (!t) return std::nullopt;
  return fold(*t, bdim, dim, B);
}

// Whether folding pays: the carriers of the index without a batch are copied B times by fold;
// where they hold more than the batched carriers do per batch element (the features beside a
// batch of attention logits), running the op per element, which reads them in place, is faster.
inline bool fold_pays(std::initializer_list<std::pair<const at::Tensor*, bool>> carriers, const c10::SymInt& B) {
  c10::SymInt repeated = 0, batched = 0;
  for (const auto& [t, is_batched] : carriers) (is_batched ? batched : repeated) += t->sym_numel();
  return (repeated * B).sym_le(batched).guard_bool(__FILE__, __LINE__);
}

// The inverse on a result: dimension `dim` of B * n entries becomes the batch (at `dim`) and n.
inline at::Tensor unfold(const at::Tensor& out, int64_t dim, const c10::SymInt& B, const c10::SymInt& n) {
  return out.unflatten_symint(dim, {B, n});
}

// Element b of the batch (the argument itself when it has no batch).
inline at::Tensor slice(const at::Tensor& t, std::optional<int64_t> bdim, int64_t b) { return bdim ? t.select(*bdim, b) : t; }
inline std::optional<at::Tensor> slice(const std::optional<at::Tensor>& t, std::optional<int64_t> bdim, int64_t b) {
  if (!t) return std::nullopt;
  return slice(*t, bdim, b);
}

// One result per batch element, stacked along a new leading dimension (the batch).
inline at::Tensor stack_batch(const char* op, const std::vector<at::Tensor>& outs) {
  TORCH_CHECK(!outs.empty(), "gnnfuse::", op, ": torch.func.vmap over an empty batch is not supported where the batch runs element by element");
  for (const at::Tensor& o : outs)
    TORCH_CHECK(o.sym_sizes() == outs[0].sym_sizes(), "gnnfuse::", op, ": under torch.func.vmap the batch elements give results of different shapes (",
                outs[0].sym_sizes(), " and ", o.sym_sizes(), "); a batched graph must give every element the same number of entries");
  return at::stack(outs);
}

// ---------------------------------------------------------------- autocast
// How an op runs under torch.autocast (the spec's `autocast` line, ops/README.md):
// LowerPrecision like torch.mm (floating inputs cast to the autocast dtype), Fp32 like the
// softmax of PyTorch's CUDA list (cast to float32), Promote like torch.cat (cast to the widest
// floating dtype among the inputs). float64 is never cast.
enum class Autocast { LowerPrecision, Fp32, Promote };

inline bool admits(unsigned dtypes, at::ScalarType s) {
  switch (s) {
    case at::kFloat: return dtypes & checks::kFloat32;
    case at::kDouble: return dtypes & checks::kFloat64;
    case at::kBFloat16: return dtypes & checks::kBFloat16;
    case at::kHalf: return dtypes & checks::kFloat16;
    default: return false;
  }
}

inline bool autocast_eligible(const at::Tensor* t, c10::DeviceType device) {
  return t && t->defined() && t->is_floating_point() && t->device().type() == device && t->scalar_type() != at::kDouble;
}

// The dtype the floating inputs are cast to (Undefined: none is cast). Only a dtype the op's
// spec admits (`dtypes`, the mask `dtypes` here): float32 otherwise, if admitted.
inline at::ScalarType autocast_dtype(c10::DeviceType device, Autocast policy, unsigned dtypes, std::initializer_list<const at::Tensor*> floats) {
  const at::ScalarType lower = at::autocast::get_autocast_dtype(device);
  at::ScalarType to = policy == Autocast::Fp32 ? at::kFloat : lower;
  if (policy == Autocast::Promote)
    for (const at::Tensor* t : floats)
      if (autocast_eligible(t, device) && t->scalar_type() != lower) to = at::kFloat;
  if (!admits(dtypes, to)) to = admits(dtypes, at::kFloat) ? at::kFloat : at::ScalarType::Undefined;
  return to;
}

inline at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType to, c10::DeviceType device) {
  if (to == at::ScalarType::Undefined) return t;
  return at::autocast::cached_cast(to, t, device);
}
inline std::optional<at::Tensor> autocast_cast(const std::optional<at::Tensor>& t, at::ScalarType to, c10::DeviceType device) {
  if (!t) return std::nullopt;
  return autocast_cast(*t, to, device);
}
}  // namespace gnnfuse::detail
