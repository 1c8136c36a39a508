// The (dtype, index dtype) pairs a generated <family>_cuda.cu instantiates, in its dispatch
// (`#if GNNFUSE_CUDA_INSTANTIATES(Float32, Int32)`): every pair, or, where
// GNNFUSE_CUDA_TYPE_SUBSET is defined, the pairs defined as GNNFUSE_CUDA_TYPES_<dtype>_<itype>
// (an undefined one reads 0 in #if). Only the compile gates use a subset (scripts/check_cuda.sh
// --types: CI compiles the pairs that bound the kernels' register pressure and cover each load
// width); the library, its emulated twin and the GPU build instantiate every pair.
#pragma once

#ifdef GNNFUSE_CUDA_TYPE_SUBSET
#define GNNFUSE_CUDA_INSTANTIATES(dtype, itype) GNNFUSE_CUDA_TYPES_##dtype##_##itype
#else
#define GNNFUSE_CUDA_INSTANTIATES(dtype, itype) 1
#endif
