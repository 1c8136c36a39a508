# ctest simt_nvcc_gate: nvcc compiles tests/simt/kernels_nvcc.cu (the kernels the emulator runs
# in test_simt) for sm_80 and sm_90a. Fails on a compile error, on a ptxas warning (spills and
# local memory are warnings, made errors by -Werror) and, in case a toolkit reports them only
# in -v's summary, on any non-zero spill, stack-frame or local-memory figure there.
#   cmake -DNVCC=<nvcc> -DSOURCE=<.cu> -DINCLUDE=<csrc> -DOUTPUT=<.o> -P nvcc_gate.cmake
foreach(var NVCC SOURCE INCLUDE OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "nvcc_gate.cmake: -D${var}=... is missing")
  endif()
endforeach()
execute_process(
  COMMAND "${NVCC}" -std=c++17 "-I${INCLUDE}" -c "${SOURCE}" -o "${OUTPUT}"
          -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
          -Xptxas -v,-warn-spills,-warn-lmem-usage,-Werror
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
set(log "${out}${err}")
if(NOT rc EQUAL 0)
  message("${log}")
  message(FATAL_ERROR "nvcc failed (exit ${rc})")
endif()
string(REGEX MATCHALL "[1-9][0-9]* bytes (spill stores|spill loads|stack frame|lmem)|Local memory[^\n]*|spilled[^\n]*"
       findings "${log}")
if(findings)
  message("${log}")
  message(FATAL_ERROR "local memory or spills: ${findings}")
endif()
string(REGEX MATCHALL "Compiling entry function" entries "${log}")
list(LENGTH entries n)
message(STATUS "nvcc: ${n} kernel compilations (sm_80, sm_90a), no spills, no local memory")
