// A small cache of results computed from integer tensors (sparsity patterns), keyed by the
// tensors' identity and contents version: a graph reused call after call (every layer, every
// epoch) hits it. An entry holds weak references to the key tensors' TensorImpls (their memory
// cannot be reused for another tensor while the entry lives), their version counters (an
// in-place change bumps them), data pointers and sizes, plus integer arguments; any difference
// is a miss. An entry whose key tensor has been freed is dropped, with its result, at the next
// lookup or store. Tensors without a version counter (inference mode) and Meta tensors are never
// cached; tensors on other devices are keyed like CPU ones (their device data pointers). Used by the symbolic passes of generated ops with a computed output pattern and by
// the CSR value checks (an entry without a value: "already checked").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace gnnfuse::cache {

// The cached result for (op, keys, ints), if any.
std::optional<std::vector<at::Tensor>> lookup(const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints);
// Stores a result (a few most recent entries are kept); it replaces an entry of the same key.
void store(const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints, const std::vector<at::Tensor>& value);
// Drops every entry (tests; memory).
void clear();
// How many lookups of `op` have hit since the library was loaded (tests and benchmarks; the op
// `pattern_cache_hits`).
int64_t hits(const std::string& op);

}  // namespace gnnfuse::cache
