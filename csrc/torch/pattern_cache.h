// The cache of results computed from integer tensors (sparsity patterns) shared by the symbolic
// passes of generated ops with a computed output pattern and by the CSR value checks (an entry
// without a value: "already checked"): a WeakKeyedCache (torch/weak_cache.h: keyed by the
// tensors' identity and version, plus integer arguments; entries of freed tensors dropped;
// inference and Meta tensors never cached) of 32 entries, whose results also miss once one of
// them has been changed in place.
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
