// Fuzz target: the CSR validation every op runs (checks::csr through the dispatcher). The bytes
// become rowptr, col (int32 or int64) and the number of columns; the harness decides validity
// itself and requires the op to agree: a valid CSR must be accepted and give the reference
// aggregation, an invalid one must be refused with c10::Error naming the op. A crash, an
// accepted invalid CSR or a refused valid one is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <gnnfuse/gnnfuse.h>

#include "driver.h"

namespace {

long accepted = 0, refused = 0;

template <typename T>
bool valid_csr(const std::vector<T>& rowptr, const std::vector<T>& col, int64_t num_cols) {
  if (rowptr.empty() || rowptr[0] != 0 || static_cast<int64_t>(rowptr.back()) != static_cast<int64_t>(col.size())) return false;
  for (size_t i = 1; i < rowptr.size(); ++i)
    if (rowptr[i] < rowptr[i - 1]) return false;
  for (T c : col)
    if (c < 0 || c >= num_cols) return false;
  return true;
}

template <typename T>
void check(const uint8_t* data, size_t size, at::ScalarType dtype) {
  if (size < 2) return;
  const int64_t num_cols = data[0] % 9;
  const size_t n_rowptr = 1 + data[1] % 8;
  size_t pos = 2;
  auto next = [&]() -> T {
    T v = 0;
    if (pos + sizeof(T) <= size) {
      std::memcpy(&v, data + pos, sizeof(T));
      pos += sizeof(T);
    } else if (pos < size) {
      v = static_cast<T>(static_cast<int8_t>(data[pos++]));
    }
    if (v > 64 || v < -4) v = static_cast<T>(v % 12);  // mostly small values, some negative
    return v;
  };
  std::vector<T> rowptr(n_rowptr), col;
  for (auto& r : rowptr) r = next();
  while (pos < size && col.size() < 64) col.push_back(next());
  const bool ok = valid_csr(rowptr, col, num_cols);
  auto opts = at::TensorOptions().dtype(dtype);
  at::Tensor rp = at::from_blob(rowptr.data(), {static_cast<int64_t>(rowptr.size())}, opts).clone();
  at::Tensor cl = at::from_blob(col.data(), {static_cast<int64_t>(col.size())}, opts).clone();
  at::Tensor x = at::arange(num_cols * 2, at::kDouble).view({num_cols, 2});
  try {
    at::Tensor y = gnnfuse::spmm(rp, cl, std::nullopt, x);
    if (!ok) {
      std::fprintf(stderr, "fuzz_csr: an invalid CSR was accepted\n");
      std::abort();
    }
    at::Tensor ref = at::zeros({static_cast<int64_t>(rowptr.size()) - 1, 2}, at::kDouble);
    for (size_t i = 0; i + 1 < rowptr.size(); ++i)
      for (T p = rowptr[i]; p < rowptr[i + 1]; ++p) ref[static_cast<int64_t>(i)] += x[static_cast<int64_t>(col[static_cast<size_t>(p)])];
    if (!at::equal(y, ref)) {
      std::fprintf(stderr, "fuzz_csr: wrong result for a valid CSR\n");
      std::abort();
    }
    ++accepted;
  } catch (const c10::Error& e) {
    ++refused;
    if (ok) {
      std::fprintf(stderr, "fuzz_csr: a valid CSR was refused: %s\n", e.what_without_backtrace());
      std::abort();
    }
    if (std::strstr(e.what_without_backtrace(), "spmm") == nullptr) {
      std::fprintf(stderr, "fuzz_csr: error does not name the op: %s\n", e.what_without_backtrace());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 0x80)
    check<int64_t>(data + 1, size - 1, at::kLong);
  else
    check<int32_t>(data + 1, size - 1, at::kInt);
  return 0;
}

#ifndef GNNFUSE_LIBFUZZER
int main(int argc, char** argv) {
  // seeds: valid small CSRs in both index widths
  std::vector<std::string> corpus = {std::string("\x01\x04\x03", 3) + std::string("\x00\x01\x02\x03\x01\x00\x02", 7),
                                     std::string("\x81\x03\x02", 3) + std::string(8, '\0') + std::string("\x02\0\0\0\0\0\0\0", 8)};
  const std::vector<std::string> dict = {std::string("\0", 1), "\x01", "\x02", "\x03", "\xff", std::string("\0\0\0\0", 4), "\x7f"};
  const int status = gnnfuse::fuzz::run(argc, argv, corpus, dict);
  std::printf("fuzz_csr: %ld valid CSRs accepted and checked, %ld invalid ones refused\n", accepted, refused);
  return status;
}
#endif
