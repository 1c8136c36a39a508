// gnnfuse-gen: reads op specs, writes kernels, registration and the C++ API.
//   gnnfuse-gen --out DIR ops/*.spec     generate into DIR (files rewritten only when changed)
//   gnnfuse-gen --dump FILE.spec ...     print the program and the index trees after every stage
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "codegen/ir.h"

namespace fs = std::filesystem;
using namespace gnnfuse::codegen;

namespace {

int usage() {
  std::cerr << "usage: gnnfuse-gen --out DIR SPEC...\n       gnnfuse-gen --dump SPEC...\n";
  return 2;
}

// Writes only when the content differs, so unchanged outputs do not trigger rebuilds.
void write_if_changed(const fs::path& path, const std::string& text) {
  std::ifstream in(path);
  if (in) {
    std::stringstream old;
    old << in.rdbuf();
    if (old.str() == text) return;
  }
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << text;
  if (!out) throw SpecError("cannot write " + path.string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string mode = argv[1];
  try {
    if (mode == "--dump") {
      for (int a = 2; a < argc; ++a) {
        auto c = compile(load_spec(argv[a]));
        std::cout << "==== " << c->spec.name << " (" << argv[a] << ")\n";
        std::cout << "---- spec\n" << print_spec(c->spec);
        for (auto& [name, text] : c->stages) std::cout << "---- " << name << "\n" << text;
      }
      return 0;
    }
    if (mode == "--out" && argc >= 4) {
      fs::path out = argv[2];
      std::vector<std::unique_ptr<Compiled>> all;
      for (int a = 3; a < argc; ++a) {
        auto c = compile(load_spec(argv[a]));
        std::string stem = fs::path(argv[a]).stem().string();
        if (stem != c->spec.name) throw SpecError(std::string(argv[a]) + ": error: file name must be the op name '" + c->spec.name + ".spec'");
        for (auto& f : emit_op_cpu(*c)) write_if_changed(out / f.path, f.text);
        all.push_back(std::move(c));
      }
      std::vector<const Compiled*> ops;
      for (auto& c : all) ops.push_back(c.get());
      for (auto& f : emit_registration(ops)) write_if_changed(out / f.path, f.text);
      return 0;
    }
  } catch (const SpecError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return usage();
}
