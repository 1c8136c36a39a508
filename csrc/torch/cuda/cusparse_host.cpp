// The host cuSPARSE of the emulated library (cusparse_host.h).
#include "torch/cuda/cusparse_host.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// The opaque types of cusparse.h, defined here (the emulated library links no cuSPARSE).
struct cusparseContext {
  cudaStream_t stream = nullptr;
};
struct cusparseSpMatDescr {
  int64_t rows = 0, cols = 0, nnz = 0;
  void* rowptr = nullptr;
  void* col = nullptr;
  void* values = nullptr;
  cusparseIndexType_t row_type = CUSPARSE_INDEX_32I, col_type = CUSPARSE_INDEX_32I;
  cusparseIndexBase_t base = CUSPARSE_INDEX_BASE_ZERO;
  cudaDataType type = CUDA_R_32F;
};
struct cusparseDnMatDescr {
  int64_t rows = 0, cols = 0, ld = 0;
  void* values = nullptr;
  cudaDataType type = CUDA_R_32F;
  cusparseOrder_t order = CUSPARSE_ORDER_ROW;
};

namespace gnnfuse::cusparse_host {

namespace {

constexpr size_t kBufferBytes = 256;  // asked for by every call, so that a missing workspace shows

bool value_type_ok(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF; }
bool index_type_ok(cusparseIndexType_t t) { return t == CUSPARSE_INDEX_32I || t == CUSPARSE_INDEX_64I; }

double load(const void* p, int64_t i, cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return static_cast<const double*>(p)[i];
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store(void* p, int64_t i, cudaDataType t, double v) {
  switch (t) {
    case CUDA_R_64F: static_cast<double*>(p)[i] = v; break;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    default: static_cast<float*>(p)[i] = static_cast<float>(v); break;
  }
}

int64_t index(const void* p, int64_t i, cusparseIndexType_t t) {
  return t == CUSPARSE_INDEX_32I ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
}

int64_t offset(const cusparseDnMatDescr& m, int64_t r, int64_t c) { return m.order == CUSPARSE_ORDER_ROW ? r * m.ld + c : c * m.ld + r; }

// The compute type cuSPARSE takes for a value type: its own, float for the 16-bit types.
bool compute_ok(cudaDataType value, cudaDataType compute) {
  if (value == CUDA_R_64F) return compute == CUDA_R_64F;
  return compute == CUDA_R_32F;
}

double scalar(const void* p, cudaDataType compute) {
  return compute == CUDA_R_64F ? *static_cast<const double*>(p) : *static_cast<const float*>(p);
}

// Rounds an accumulated value to the compute type (float sums stay float sums).
double in_compute(double v, cudaDataType compute) { return compute == CUDA_R_64F ? v : static_cast<double>(static_cast<float>(v)); }

// The checks SpMM and its buffer size share: sizes, types, operations, algorithm.
cusparseStatus_t spmm_check(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
                            cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
                            cudaDataType compute, cusparseSpMMAlg_t alg) {
  if (!handle || !alpha || !beta || !a || !b || !c) return CUSPARSE_STATUS_INVALID_VALUE;
  if (opB != CUSPARSE_OPERATION_NON_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (opA != CUSPARSE_OPERATION_NON_TRANSPOSE && opA != CUSPARSE_OPERATION_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (alg != CUSPARSE_SPMM_ALG_DEFAULT && alg != CUSPARSE_SPMM_CSR_ALG1 && alg != CUSPARSE_SPMM_CSR_ALG2 && alg != CUSPARSE_SPMM_CSR_ALG3)
    return CUSPARSE_STATUS_NOT_SUPPORTED;
  const bool t = opA == CUSPARSE_OPERATION_TRANSPOSE;
  // CSR_ALG3 has no op(A) = A^T, and mixed precision (16-bit values) runs with it by default.
  const bool mixed = a->type == CUDA_R_16F || a->type == CUDA_R_16BF;
  if (t && (alg == CUSPARSE_SPMM_CSR_ALG3 || mixed)) return CUSPARSE_STATUS_NOT_SUPPORTED;
  const int64_t m = t ? a->cols : a->rows;
  const int64_t k = t ? a->rows : a->cols;
  if (b->rows != k || c->rows != m || b->cols != c->cols) return CUSPARSE_STATUS_INVALID_VALUE;
  if (a->type != b->type || b->type != c->type) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (!compute_ok(a->type, compute)) return CUSPARSE_STATUS_NOT_SUPPORTED;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t sddmm_check(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
                             cusparseConstDnMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseSpMatDescr_t c,
                             cudaDataType compute, cusparseSDDMMAlg_t alg) {
  if (!handle || !alpha || !beta || !a || !b || !c) return CUSPARSE_STATUS_INVALID_VALUE;
  if (opA != CUSPARSE_OPERATION_NON_TRANSPOSE || opB != CUSPARSE_OPERATION_NON_TRANSPOSE) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (alg != CUSPARSE_SDDMM_ALG_DEFAULT) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (a->rows != c->rows || b->cols != c->cols || a->cols != b->rows) return CUSPARSE_STATUS_INVALID_VALUE;
  if (a->type != b->type || b->type != c->type) return CUSPARSE_STATUS_NOT_SUPPORTED;
  // CSR: 32F and 64F, and 16F inputs with a 32F compute type (16BF only for BSR).
  if (c->type == CUDA_R_16BF) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (!compute_ok(c->type, compute)) return CUSPARSE_STATUS_NOT_SUPPORTED;
  return CUSPARSE_STATUS_SUCCESS;
}

// The CSR entries p of row r (base removed), as [begin, end).
void row_range(const cusparseSpMatDescr& a, int64_t r, int64_t* begin, int64_t* end) {
  const int64_t base = a.base == CUSPARSE_INDEX_BASE_ONE ? 1 : 0;
  *begin = index(a.rowptr, r, a.row_type) - base;
  *end = index(a.rowptr, r + 1, a.row_type) - base;
}

}  // namespace

cusparseStatus_t cusparseCreate(cusparseHandle_t* handle) {
  if (!handle) return CUSPARSE_STATUS_INVALID_VALUE;
  *handle = new cusparseContext;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUSPARSE_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUSPARSE_STATUS_SUCCESS;
}

const char* cusparseGetErrorString(cusparseStatus_t status) {
  switch (status) {
    case CUSPARSE_STATUS_SUCCESS: return "CUSPARSE_STATUS_SUCCESS (host cuSPARSE)";
    case CUSPARSE_STATUS_NOT_INITIALIZED: return "CUSPARSE_STATUS_NOT_INITIALIZED (host cuSPARSE)";
    case CUSPARSE_STATUS_INVALID_VALUE: return "CUSPARSE_STATUS_INVALID_VALUE (host cuSPARSE)";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "CUSPARSE_STATUS_NOT_SUPPORTED (host cuSPARSE)";
    default: return "cuSPARSE status (host cuSPARSE)";
  }
}

cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t* spMatDescr, int64_t rows, int64_t cols, int64_t nnz, void* csrRowOffsets,
                                   void* csrColInd, void* csrValues, cusparseIndexType_t csrRowOffsetsType,
                                   cusparseIndexType_t csrColIndType, cusparseIndexBase_t idxBase, cudaDataType valueType) {
  if (!spMatDescr || rows < 0 || cols < 0 || nnz < 0) return CUSPARSE_STATUS_INVALID_VALUE;
  if (!index_type_ok(csrRowOffsetsType) || !index_type_ok(csrColIndType) || !value_type_ok(valueType)) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (idxBase != CUSPARSE_INDEX_BASE_ZERO && idxBase != CUSPARSE_INDEX_BASE_ONE) return CUSPARSE_STATUS_INVALID_VALUE;
  if ((rows > 0 && !csrRowOffsets) || (nnz > 0 && (!csrColInd || !csrValues))) return CUSPARSE_STATUS_INVALID_VALUE;
  if (csrRowOffsetsType == CUSPARSE_INDEX_32I && (rows > INT32_MAX || cols > INT32_MAX || nnz > INT32_MAX)) return CUSPARSE_STATUS_INVALID_VALUE;
  *spMatDescr = new cusparseSpMatDescr{rows, cols, nnz, csrRowOffsets, csrColInd, csrValues, csrRowOffsetsType, csrColIndType, idxBase, valueType};
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t spMatDescr) {
  delete spMatDescr;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* dnMatDescr, int64_t rows, int64_t cols, int64_t ld, void* values,
                                     cudaDataType valueType, cusparseOrder_t order) {
  if (!dnMatDescr || rows < 0 || cols < 0) return CUSPARSE_STATUS_INVALID_VALUE;
  if (!value_type_ok(valueType)) return CUSPARSE_STATUS_NOT_SUPPORTED;
  if (order != CUSPARSE_ORDER_ROW && order != CUSPARSE_ORDER_COL) return CUSPARSE_STATUS_INVALID_VALUE;
  const int64_t min_ld = order == CUSPARSE_ORDER_ROW ? cols : rows;
  if (ld < min_ld || ld < 1) return CUSPARSE_STATUS_INVALID_VALUE;
  if (rows > 0 && cols > 0 && !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *dnMatDescr = new cusparseDnMatDescr{rows, cols, ld, values, valueType, order};
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t dnMatDescr) {
  delete dnMatDescr;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
                                         cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB, const void* beta,
                                         cusparseDnMatDescr_t matC, cudaDataType computeType, cusparseSpMMAlg_t alg,
                                         size_t* bufferSize) {
  if (!bufferSize) return CUSPARSE_STATUS_INVALID_VALUE;
  const cusparseStatus_t s = spmm_check(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg);
  if (s == CUSPARSE_STATUS_SUCCESS) *bufferSize = kBufferBytes;
  return s;
}

cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
                              cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB, const void* beta,
                              cusparseDnMatDescr_t matC, cudaDataType computeType, cusparseSpMMAlg_t alg, void* externalBuffer) {
  const cusparseStatus_t s = spmm_check(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg);
  if (s != CUSPARSE_STATUS_SUCCESS) return s;
  if (!externalBuffer) return CUSPARSE_STATUS_INVALID_VALUE;  // the workspace bufferSize asked for
  const cusparseSpMatDescr& a = *matA;
  const cusparseDnMatDescr& b = *matB;
  cusparseDnMatDescr& c = *matC;
  const double al = scalar(alpha, computeType), be = scalar(beta, computeType);
  const int64_t n = c.cols;
  const bool t = opA == CUSPARSE_OPERATION_TRANSPOSE;
  const int64_t base = a.base == CUSPARSE_INDEX_BASE_ONE ? 1 : 0;
  // acc[m][n] in the compute type: rows of A in order, entries in CSR order.
  std::vector<double> acc(static_cast<size_t>(c.rows * n), 0.0);
  for (int64_t r = 0; r < a.rows; ++r) {
    int64_t begin, end;
    row_range(a, r, &begin, &end);
    for (int64_t p = begin; p < end; ++p) {
      const int64_t col = index(a.col, p, a.col_type) - base;
      const double v = load(a.values, p, a.type);
      const int64_t out_row = t ? col : r, in_row = t ? r : col;
      for (int64_t f = 0; f < n; ++f) {
        double& slot = acc[static_cast<size_t>(out_row * n + f)];
        slot = in_compute(slot + in_compute(v * load(b.values, offset(b, in_row, f), b.type), computeType), computeType);
      }
    }
  }
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t f = 0; f < n; ++f) {
      // C is read whatever beta is (cuSPARSE does not document it unread for beta = 0): a NaN
      // left in an output the backend did not clear shows.
      const double y = in_compute(in_compute(al * acc[static_cast<size_t>(r * n + f)], computeType) +
                                      be * load(c.values, offset(c, r, f), c.type),
                                  computeType);
      store(c.values, offset(c, r, f), c.type, y);
    }
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t cusparseSDDMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
                                          cusparseConstDnMatDescr_t matA, cusparseConstDnMatDescr_t matB, const void* beta,
                                          cusparseSpMatDescr_t matC, cudaDataType computeType, cusparseSDDMMAlg_t alg,
                                          size_t* bufferSize) {
  if (!bufferSize) return CUSPARSE_STATUS_INVALID_VALUE;
  const cusparseStatus_t s = sddmm_check(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg);
  if (s == CUSPARSE_STATUS_SUCCESS) *bufferSize = kBufferBytes;
  return s;
}

cusparseStatus_t cusparseSDDMM(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
                               cusparseConstDnMatDescr_t matA, cusparseConstDnMatDescr_t matB, const void* beta,
                               cusparseSpMatDescr_t matC, cudaDataType computeType, cusparseSDDMMAlg_t alg, void* externalBuffer) {
  const cusparseStatus_t s = sddmm_check(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg);
  if (s != CUSPARSE_STATUS_SUCCESS) return s;
  if (!externalBuffer) return CUSPARSE_STATUS_INVALID_VALUE;
  const cusparseDnMatDescr& a = *matA;
  const cusparseDnMatDescr& b = *matB;
  cusparseSpMatDescr& c = *matC;
  const double al = scalar(alpha, computeType), be = scalar(beta, computeType);
  const int64_t base = c.base == CUSPARSE_INDEX_BASE_ONE ? 1 : 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    int64_t begin, end;
    row_range(c, r, &begin, &end);
    for (int64_t p = begin; p < end; ++p) {
      const int64_t col = index(c.col, p, c.col_type) - base;
      double dot = 0;
      for (int64_t k = 0; k < a.cols; ++k)
        dot = in_compute(dot + in_compute(load(a.values, offset(a, r, k), a.type) * load(b.values, offset(b, k, col), b.type), computeType),
                         computeType);
      const double y = in_compute(in_compute(al * dot, computeType) + be * load(c.values, p, c.type), computeType);
      store(c.values, p, c.type, y);
    }
  }
  return CUSPARSE_STATUS_SUCCESS;
}

}  // namespace gnnfuse::cusparse_host
