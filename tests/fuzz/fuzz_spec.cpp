// Fuzz target: the spec parser and the whole generator behind it. Any text either parses,
// prints back to a spec that parses to the same print (round trip), compiles through every
// stage and differentiates, and emits its sources, or is refused with a SpecError. Anything
// else (another exception, a crash, a sanitizer report) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/ir.h"
#include "driver.h"

using namespace gnnfuse::codegen;

static long compiled = 0, refused = 0;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const OpSpec spec = parse_spec(text, "fuzz.spec");
    const std::string printed = print_spec(spec);
    if (print_spec(parse_spec(printed, "fuzz.spec")) != printed) {
      std::fprintf(stderr, "fuzz_spec: print/parse round trip differs for:\n%s\n", text.c_str());
      std::abort();
    }
    Family f = compile_family(spec);
    (void)emit_op_cpu(f);
    (void)emit_op_registration(f);
    ++compiled;
  } catch (const SpecError&) {
    ++refused;  // a clean refusal
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_spec: unexpected %s for:\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  return 0;
}

#ifndef GNNFUSE_LIBFUZZER
int main(int argc, char** argv) {
  std::vector<std::string> corpus;
  for (const char* dir : {GNNFUSE_OPS_DIR, GNNFUSE_TEST_SPECS_DIR})
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().extension() == ".spec") {
        std::ifstream in(entry.path());
        std::stringstream ss;
        ss << in.rdbuf();
        corpus.push_back(ss.str());
      }
  const std::vector<std::string> dict = {
      "(", ")", ",", "*", "+", "-", "/", "=", "[", "]", " ", "\n", "i", "j", "k", "f", "h", "A", "X", "Y", "S",
      "exp", "max", "detach", "leaky_relu", "sum", "csr", "csc", "dense", "output", "expr", "op", "sparse",
      "schema", "reduce", "Tensor", "Tensor?", "float", "->", "max[j2]", "A(i,j)", "X(j,f)", "Y(i,f)", "0", "1e9",
      "\nvariants auto\n", " single", "\nsymbolic S\n", "\nextent j = n\n"};
  const int status = gnnfuse::fuzz::run(argc, argv, corpus, dict);
  std::printf("fuzz_spec: %ld specs compiled and emitted, %ld refused with a SpecError\n", compiled, refused);
  return status;
}
#endif
