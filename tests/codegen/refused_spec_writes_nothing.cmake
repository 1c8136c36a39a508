# ctest refused_spec_writes_nothing: gnnfuse-gen refuses a spec (here at emission, after the
# kernels of its op were generated) and leaves no file in the output folder, not of that op and
# not of the valid spec given before it; the error names the spec and the rule.
#   cmake -DGEN=<gnnfuse-gen> -DWORK=<scratch folder> -DVALID=<a valid spec> -P refused_spec_writes_nothing.cmake
foreach(v GEN WORK VALID)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "refused_spec_writes_nothing: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# Every csr value optional and nothing else floating: no tensor every call gives to take the
# result's dtype from.
file(WRITE "${WORK}/weighted_degree.spec" [=[
op      weighted_degree
doc     the sum of each row's values (ones when values is None)
schema  weighted_degree(Tensor rowptr, Tensor col, Tensor? values) -> Tensor
sparse  A(i,j) = csr(rowptr, col, values)
output  Y(i)
expr    Y(i) = A(i,j)
dtypes  float32 float64
index   int64
]=])
# The same rule met by an op derived from a spec (the row statistic 1 / rowsum(A) of a weighted
# mean with optional values reads nothing else).
file(WRITE "${WORK}/optional_mean.spec" [=[
op      optional_mean
doc     (A X) / rowsum(A) with optional values
schema  optional_mean(Tensor rowptr, Tensor col, Tensor? values, Tensor x) -> Tensor
sparse  A(i,j) = csr(rowptr, col, values)
dense   X(j,f) = x
output  Y(i,f)
expr    Y(i,f) = A(i,j) * X(j,f) / A(i,j2)
order   i j j2 f
dtypes  float32 float64
index   int64
]=])

function(expect_refusal name out)
  execute_process(COMMAND "${GEN}" --out "${out}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "${name}: gnnfuse-gen exited with ${rc}, not 1 (a refusal)\n${stdout}${stderr}")
  endif()
  foreach(part IN LISTS EXPECT)
    string(FIND "${stderr}" "${part}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: '${part}' is not in the error:\n${stderr}")
    endif()
  endforeach()
  file(GLOB_RECURSE left LIST_DIRECTORIES false "${out}/*")
  if(left)
    message(FATAL_ERROR "${name}: a refused spec left files in ${out}:\n${left}")
  endif()
  message(STATUS "${name}: refused, nothing written: ${stderr}")
endfunction()

set(EXPECT "weighted_degree.spec:1:1: error: weighted_degree reads no floating tensor that every call gives"
           "csr values declared `Tensor` (not `Tensor?`)")
expect_refusal(alone "${WORK}/out1" "${WORK}/weighted_degree.spec")
expect_refusal(after_a_valid_spec "${WORK}/out2" "${VALID}" "${WORK}/weighted_degree.spec")
set(EXPECT "optional_mean.spec: <optional_mean_stat0, derived from optional_mean>:1:1: error: optional_mean_stat0 reads no floating tensor"
           "declare the csr values of optional_mean `Tensor`")
expect_refusal(derived "${WORK}/out3" "${WORK}/optional_mean.spec")

# The valid spec alone is written (so the checks above would see files).
execute_process(COMMAND "${GEN}" --out "${WORK}/out4" "${VALID}" RESULT_VARIABLE rc ERROR_VARIABLE stderr)
get_filename_component(op "${VALID}" NAME_WE)
if(NOT rc EQUAL 0 OR NOT EXISTS "${WORK}/out4/${op}_cpu.cpp" OR NOT EXISTS "${WORK}/out4/registration.cpp")
  message(FATAL_ERROR "the valid spec ${VALID} was not generated (exit ${rc}): ${stderr}")
endif()
file(REMOVE_RECURSE "${WORK}")
