// The cuSPARSE backend (cusparse_backend.h): the selection, cuSPARSE's entry points (dlopen on a GPU,
// the host implementation in the emulated library), and the SpMM and SDDMM calls of the
// adapters: descriptors per call over the op's own tensors (no copies), the workspace from the
// caching allocator, the current stream.
#include "torch/cuda/cusparse_backend.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "torch/checks.h"
#include "torch/cuda/adapter.h"

#if __has_include(<cusparse.h>)
#define GNNFUSE_HAVE_CUSPARSE 1
#include <cusparse.h>
#if defined(GNNFUSE_CUDA_EMULATED)
#include "torch/cuda/cusparse_host.h"
#else
#include <dlfcn.h>

#include <c10/cuda/CUDAStream.h>
#endif
#else
#define GNNFUSE_HAVE_CUSPARSE 0
#endif

namespace gnnfuse::cuda_adapter {

// ---------------------------------------------------------------- selection
namespace {

std::atomic<int> backend_flag{-1};  // -1: from GNNFUSE_CUDA_BACKEND at first use

void require_cusparse();

}  // namespace

std::string to_string(Backend b) { return b == Backend::Cusparse ? "cusparse" : "generated"; }

Backend parse_backend(const std::string& name) {
  if (name == "generated") return Backend::Generated;
  if (name == "cusparse") return Backend::Cusparse;
  throw std::invalid_argument("gnnfuse: CUDA backend '" + name + "': expected 'generated' or 'cusparse'");
}

namespace {
thread_local int backend_override = -1;  // set_thread_backend: this thread's calls only
}  // namespace

std::optional<Backend> set_thread_backend(std::optional<Backend> b) {
  const int previous = backend_override;
  if (b && *b == Backend::Cusparse) require_cusparse();
  backend_override = b ? static_cast<int>(*b) : -1;
  return previous < 0 ? std::nullopt : std::optional<Backend>(static_cast<Backend>(previous));
}

Backend backend() {
  if (backend_override >= 0) return static_cast<Backend>(backend_override);
  int v = backend_flag.load();
  if (v < 0) {
    const char* e = std::getenv("GNNFUSE_CUDA_BACKEND");
    Backend b = Backend::Generated;
    try {
      if (e && *e) b = parse_backend(e);
      if (b == Backend::Cusparse) require_cusparse();
    } catch (const std::invalid_argument& error) {
      TORCH_CHECK(false, "GNNFUSE_CUDA_BACKEND='", e, "': ", error.what());
    }
    v = static_cast<int>(b);
    backend_flag.store(v);
  }
  return static_cast<Backend>(v);
}

void set_backend(Backend b) {
  if (b == Backend::Cusparse) require_cusparse();
  backend_flag.store(static_cast<int>(b));
}

#if GNNFUSE_HAVE_CUSPARSE
// ---------------------------------------------------------------- cuSPARSE's entry points
namespace {

#define GNNFUSE_CUSPARSE_FNS(X)                                                                                     \
  X(cusparseCreate) X(cusparseSetStream) X(cusparseGetErrorString) X(cusparseCreateCsr) X(cusparseDestroySpMat)   \
      X(cusparseCreateDnMat) X(cusparseDestroyDnMat) X(cusparseSpMM_bufferSize) X(cusparseSpMM)                   \
          X(cusparseSDDMM_bufferSize) X(cusparseSDDMM)

struct Api {
#define GNNFUSE_DECLARE(name) decltype(&::name) name = nullptr;
  GNNFUSE_CUSPARSE_FNS(GNNFUSE_DECLARE)
#undef GNNFUSE_DECLARE
  std::string error;  // why it could not be opened; empty when it was
};

// Opened once; a failure is remembered (and reported by every selection of the backend).
const Api& api() {
  static const Api a = [] {
    Api r;
#if defined(GNNFUSE_CUDA_EMULATED)
#define GNNFUSE_HOST(name) r.name = &cusparse_host::name;
    GNNFUSE_CUSPARSE_FNS(GNNFUSE_HOST)
#undef GNNFUSE_HOST
#else
    void* lib = nullptr;
    std::string tried;
    for (const char* soname : {"libcusparse.so.12", "libcusparse.so"}) {
      lib = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
      if (lib) break;
      const char* e = dlerror();
      tried += std::string(" [") + soname + ": " + (e ? e : "?") + "]";
    }
    if (!lib) {
      r.error = "cuSPARSE not found; tried" + tried;
      return r;
    }
#define GNNFUSE_RESOLVE(name)                                                  \
  r.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));             \
  if (!r.name) {                                                               \
    r.error = "the cuSPARSE library opened lacks " #name;                      \
    return r;                                                                  \
  }
    GNNFUSE_CUSPARSE_FNS(GNNFUSE_RESOLVE)
#undef GNNFUSE_RESOLVE
#endif
    return r;
  }();
  return a;
}

void require_cusparse() {
  const std::string& e = api().error;
  if (!e.empty()) throw std::invalid_argument("gnnfuse: the cusparse CUDA backend is not available: " + e);
}

[[noreturn]] void fail(const char* op, const char* call, cusparseStatus_t s) {
  const char* text = api().cusparseGetErrorString ? api().cusparseGetErrorString(s) : "?";
  TORCH_CHECK(false, "gnnfuse::", op, " (cuSPARSE backend): ", call, " failed with status ", static_cast<int>(s), " (", text, ")");
  std::abort();  // not reached
}

void check(const char* op, const char* call, cusparseStatus_t s) {
  if (s != CUSPARSE_STATUS_SUCCESS) fail(op, call, s);
}

// One handle per thread and device, made at first use and kept (cuSPARSE's handles are not
// thread-safe to share; creating one per call costs far more than a call); nullptr where there is
// none yet and the stream is being captured (the call then keeps the generated kernels).
cusparseHandle_t handle(const char* op, const at::Tensor& like) {
  thread_local std::vector<cusparseHandle_t> handles;
  const size_t d = like.is_cuda() ? static_cast<size_t>(like.device().index()) : 0;
  if (handles.size() <= d) handles.resize(d + 1, nullptr);
  if (!handles[d]) {
    if (checks::capturing(like)) return nullptr;  // (creating one allocates: not while a CUDA graph is captured)
    cusparseHandle_t created = nullptr;
    check(op, "cusparseCreate", api().cusparseCreate(&created));
    handles[d] = created;
  }
#if defined(GNNFUSE_CUDA_EMULATED)
  check(op, "cusparseSetStream", api().cusparseSetStream(handles[d], nullptr));
#else
  check(op, "cusparseSetStream", api().cusparseSetStream(handles[d], c10::cuda::getCurrentCUDAStream(like.device().index()).stream()));
#endif
  return handles[d];
}

cudaDataType value_type(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return CUDA_R_64F;
    case at::kHalf: return CUDA_R_16F;
    case at::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

cusparseIndexType_t index_type(const at::Tensor& t) { return t.scalar_type() == at::kInt ? CUSPARSE_INDEX_32I : CUSPARSE_INDEX_64I; }

// Descriptors released at scope exit.
struct Descriptors {
  cusparseSpMatDescr_t sparse = nullptr;
  cusparseDnMatDescr_t a = nullptr, b = nullptr;
  ~Descriptors() {
    if (sparse) api().cusparseDestroySpMat(sparse);
    if (a) api().cusparseDestroyDnMat(a);
    if (b) api().cusparseDestroyDnMat(b);
  }
};

struct Scalars {  // alpha = 1, beta = 0 in the compute type
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool wide;
  explicit Scalars(cudaDataType compute) : wide(compute == CUDA_R_64F) {}
  const void* alpha() const { return wide ? static_cast<const void*>(&one) : static_cast<const void*>(&onef); }
  const void* beta() const { return wide ? static_cast<const void*>(&zero) : static_cast<const void*>(&zerof); }
};

void* mut(const at::Tensor& t) { return const_cast<void*>(t.const_data_ptr()); }

// A cuSPARSE call with its workspace: `size(&bytes)` (its _bufferSize), then `call(buffer)` with
// the buffer from the caching allocator on `like`'s device; false where the size query answers
// CUSPARSE_STATUS_NOT_SUPPORTED, a raise naming the op for any other failure.
template <typename Size, typename Call>
bool with_workspace(const char* op, const char* size_name, const char* call_name, const at::Tensor& like, Size size, Call call) {
  size_t bytes = 0;
  const cusparseStatus_t st = size(&bytes);
  if (st == CUSPARSE_STATUS_NOT_SUPPORTED) return false;
  check(op, size_name, st);
  const at::Tensor buffer = at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
  check(op, call_name, call(bytes ? buffer.mutable_data_ptr() : nullptr));
  return true;
}

// "<op> cusparse <algorithm> 0" (CUSPARSE_SPMM_CSR_ALG3 is 12; the defaults are 0).
void count(const char* op, int alg = 0) { count_launch(std::string(op) + " cusparse " + std::to_string(alg) + " 0"); }

bool half_type(cudaDataType t) { return t == CUDA_R_16F || t == CUDA_R_16BF; }

// The defined factors.
std::vector<at::Tensor> defined(std::initializer_list<at::Tensor> factors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& f : factors)
    if (f.defined()) out.push_back(f);
  return out;
}

// Their product (one array for cuSPARSE); undefined for none.
at::Tensor product(const std::vector<at::Tensor>& factors) {
  at::Tensor out;
  for (const at::Tensor& f : factors) out = out.defined() ? out * f : f;
  return out;
}

}  // namespace

bool cusparse_spmm(const char* op, const at::Tensor& rowptr, const at::Tensor& col, std::initializer_list<at::Tensor> values,
                   bool transpose, int64_t rows, int64_t cols, const at::Tensor& x, at::Tensor& out) {
  require_cusparse();
  const cudaDataType vt = value_type(x.scalar_type());
  const std::vector<at::Tensor> factors = defined(values);
  // cuSPARSE runs 16-bit SpMM with CUSPARSE_SPMM_CSR_ALG3, which has no op(A) = A^T; a transposed
  // product under deterministic algorithms would differ from run to run (only ALG3 repeats
  // bitwise); two 16-bit factors multiplied before cuSPARSE would round (and overflow) where the
  // generated kernels multiply in float.
  if (transpose && (deterministic() || half_type(vt))) return false;
  if (half_type(vt) && factors.size() > 1) return false;
  const int64_t nnz = col.size(0);
  const int64_t out_rows = transpose ? cols : rows;
  const int64_t in_rows = transpose ? rows : cols;
  const int64_t f = out.size(1);
  if (out.numel() == 0) return true;
  out.zero_();  // beta = 0; C is not documented as unread then
  if (nnz == 0 || in_rows == 0) return true;
  const at::Tensor vals = factors.empty() ? at::ones({nnz}, x.options()) : product(factors);
  const cudaDataType compute = vt == CUDA_R_64F ? CUDA_R_64F : CUDA_R_32F;
  const cusparseSpMMAlg_t alg = deterministic() ? CUSPARSE_SPMM_CSR_ALG3 : CUSPARSE_SPMM_ALG_DEFAULT;
  const cusparseHandle_t h = handle(op, x);
  if (!h) return false;
  Descriptors d;
  check(op, "cusparseCreateCsr",
        api().cusparseCreateCsr(&d.sparse, rows, cols, nnz, mut(rowptr), mut(col), mut(vals), index_type(rowptr), index_type(col),
                                CUSPARSE_INDEX_BASE_ZERO, vt));
  check(op, "cusparseCreateDnMat", api().cusparseCreateDnMat(&d.a, in_rows, f, f, mut(x), vt, CUSPARSE_ORDER_ROW));
  check(op, "cusparseCreateDnMat", api().cusparseCreateDnMat(&d.b, out_rows, f, f, out.mutable_data_ptr(), vt, CUSPARSE_ORDER_ROW));
  const cusparseOperation_t op_a = transpose ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto nt = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const Scalars s(compute);
  const bool ran = with_workspace(
      op, "cusparseSpMM_bufferSize", "cusparseSpMM", x,
      [&](size_t* bytes) { return api().cusparseSpMM_bufferSize(h, op_a, nt, s.alpha(), d.sparse, d.a, s.beta(), d.b, compute, alg, bytes); },
      [&](void* buffer) { return api().cusparseSpMM(h, op_a, nt, s.alpha(), d.sparse, d.a, s.beta(), d.b, compute, alg, buffer); });
  if (!ran) return false;
  count(op, static_cast<int>(alg));
  return true;
}

bool cusparse_sddmm(const char* op, const at::Tensor& rowptr, const at::Tensor& col, std::initializer_list<at::Tensor> scale,
                    int64_t rows, int64_t cols, const at::Tensor& u, const at::Tensor& v, at::Tensor& out) {
  require_cusparse();
  const cudaDataType vt = value_type(u.scalar_type());
  const std::vector<at::Tensor> factors = defined(scale);
  // A 16-bit dot product rounded (and perhaps overflowed) before its scale, where the generated
  // kernels scale in float and round once.
  if (half_type(vt) && !factors.empty()) return false;
  const int64_t nnz = col.size(0);
  const int64_t k = u.size(1);
  if (nnz == 0) return true;
  if (k == 0) {
    out.zero_();
    return true;
  }
  const cudaDataType compute = vt == CUDA_R_64F ? CUDA_R_64F : CUDA_R_32F;
  const cusparseHandle_t h = handle(op, u);
  if (!h) return false;
  out.zero_();  // beta = 0, but C's values are in/out: no uninitialised memory in them
  Descriptors d;
  check(op, "cusparseCreateCsr",
        api().cusparseCreateCsr(&d.sparse, rows, cols, nnz, mut(rowptr), mut(col), out.mutable_data_ptr(), index_type(rowptr), index_type(col),
                                CUSPARSE_INDEX_BASE_ZERO, vt));
  // U rows x k row-major; V (cols x k row-major) read as the k x cols column-major V^T.
  check(op, "cusparseCreateDnMat", api().cusparseCreateDnMat(&d.a, rows, k, k, mut(u), vt, CUSPARSE_ORDER_ROW));
  check(op, "cusparseCreateDnMat", api().cusparseCreateDnMat(&d.b, k, cols, k, mut(v), vt, CUSPARSE_ORDER_COL));
  const auto nt = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const Scalars s(compute);
  const auto alg = CUSPARSE_SDDMM_ALG_DEFAULT;
  const bool ran = with_workspace(
      op, "cusparseSDDMM_bufferSize", "cusparseSDDMM", u,
      [&](size_t* bytes) { return api().cusparseSDDMM_bufferSize(h, nt, nt, s.alpha(), d.a, d.b, s.beta(), d.sparse, compute, alg, bytes); },
      [&](void* buffer) { return api().cusparseSDDMM(h, nt, nt, s.alpha(), d.a, d.b, s.beta(), d.sparse, compute, alg, buffer); });
  if (!ran) return false;
  if (!factors.empty()) out.mul_(product(factors));
  count(op);
  return true;
}

#else  // built without cuSPARSE's header

namespace {
void require_cusparse() {
  throw std::invalid_argument("gnnfuse: the cusparse CUDA backend is not available: this build of gnnfuse found no cusparse.h");
}
}  // namespace

bool cusparse_spmm(const char*, const at::Tensor&, const at::Tensor&, std::initializer_list<at::Tensor>, bool, int64_t, int64_t,
                   const at::Tensor&, at::Tensor&) {
  require_cusparse();
  return false;
}

bool cusparse_sddmm(const char*, const at::Tensor&, const at::Tensor&, std::initializer_list<at::Tensor>, int64_t, int64_t,
                    const at::Tensor&, const at::Tensor&, at::Tensor&) {
  require_cusparse();
  return false;
}

#endif

}  // namespace gnnfuse::cuda_adapter

namespace {

void set_backend_op(const std::string& name) {
  namespace ca = gnnfuse::cuda_adapter;
  try {
    ca::set_backend(ca::parse_backend(name));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "gnnfuse::_cuda_set_backend: ", e.what());
  }
}

std::string backend_op() { return gnnfuse::cuda_adapter::to_string(gnnfuse::cuda_adapter::backend()); }

// "" for none; returns the previous choice ("" for none).
std::string set_thread_backend_op(const std::string& name) {
  namespace ca = gnnfuse::cuda_adapter;
  std::optional<ca::Backend> previous;
  try {
    previous = ca::set_thread_backend(name.empty() ? std::nullopt : std::optional<ca::Backend>(ca::parse_backend(name)));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "gnnfuse::_cuda_set_thread_backend: ", e.what());
  }
  return previous ? ca::to_string(*previous) : "";
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {
  m.def("_cuda_set_backend(str name) -> ()", &set_backend_op);
  m.def("_cuda_backend() -> str", &backend_op);
  m.def("_cuda_set_thread_backend(str name) -> str", &set_thread_backend_op);
}
