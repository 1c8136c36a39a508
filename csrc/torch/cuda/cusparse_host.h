// A host implementation of the cuSPARSE generic-API functions the cuSPARSE backend calls
// (cusparse_backend.cpp), for the emulated library (GNNFUSE_CUDA_EMULATED): the same signatures as
// cusparse.h, the documented semantics over host memory, and cuSPARSE's consistency checks
// (sizes, types, layouts, leading dimensions, a workspace where one was asked for), so that the
// backend's descriptors and calls are tested in CI. It is test infrastructure: what it accepts and
// computes is what the cuSPARSE documentation describes; a lent GPU checks the real library.
//   SpMM   C = alpha op(A) B + beta C (A CSR, op(A) = A or A^T; B and C dense, row- or
//          column-major; opB non-transposed); value types 32F, 64F, and 16F/16BF with a 32F
//          compute type; op(A) = A^T is refused (NOT_SUPPORTED) with CSR_ALG3 and with 16-bit
//          values (cuSPARSE's mixed precision runs with ALG3).
//   SDDMM  C = alpha (A B) o spy(C) + beta C (A, B dense; C CSR): 32F, 64F, 16F with a 32F compute
//          type; 16BF is NOT_SUPPORTED (cuSPARSE has it for BSR only).
// Both read C whatever beta is (cuSPARSE does not document it unread for beta = 0).
#pragma once

#include <cusparse.h>

namespace gnnfuse::cusparse_host {

#define GNNFUSE_CUSPARSE_HOST_DECLARE(name) decltype(::name) name;
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseCreate)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseSetStream)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseGetErrorString)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseCreateCsr)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseDestroySpMat)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseCreateDnMat)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseDestroyDnMat)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseSpMM_bufferSize)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseSpMM)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseSDDMM_bufferSize)
GNNFUSE_CUSPARSE_HOST_DECLARE(cusparseSDDMM)
#undef GNNFUSE_CUSPARSE_HOST_DECLARE

}  // namespace gnnfuse::cusparse_host
