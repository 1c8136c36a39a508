// gnnfuse-gen: reads op specs, writes kernels, registration and the C++ API.
//   gnnfuse-gen --out DIR ops/*.spec     generate into DIR (files rewritten only when changed)
//   gnnfuse-gen --dump FILE.spec ...     print the program and the index trees after every stage
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "codegen/imperative.h"
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
        Family f = compile_family(load_spec(argv[a]));
        for (auto& c : f.ops) {
          std::cout << "==== " << c->spec.name << (c->spec.derived() ? " (derived from " + c->spec.family + ")" : "") << " ("
                    << argv[a] << ")\n";
          std::cout << "---- spec\n" << print_spec(c->spec);
          for (auto& [name, text] : c->stages) std::cout << "---- " << name << "\n" << text;
          std::cout << "---- imperative IR\n" << imp::print(imp::lower(*c));
          for (size_t v = 0; v < c->alternatives.size(); ++v) {
            for (auto& [name, text] : c->alternatives[v]->stages)
              std::cout << "---- variant " << v + 1 << ": " << name << "\n" << text;
            std::cout << "---- variant " << v + 1 << ": imperative IR\n" << imp::print(imp::lower(*c->alternatives[v]));
          }
          auto it = f.adjoints.find(c->spec.name);
          if (it == f.adjoints.end()) continue;
          std::cout << "---- adjoints\n";
          for (auto& adj : it->second)
            std::cout << "d/d" << adj.input << ": " << (adj.zero ? "0" : adj.spec.name + ": " + adj.spec.expr.lhs + "(...) = " + to_string(adj.spec.expr.rhs)) << "\n";
        }
      }
      return 0;
    }
    if (mode == "--out" && argc >= 4) {
      fs::path out = argv[2];
      std::vector<std::unique_ptr<Family>> all;
      std::set<std::string> names;
      for (int a = 3; a < argc; ++a) {
        auto fam = std::make_unique<Family>(compile_family(load_spec(argv[a])));
        const std::string& name = fam->ops[0]->spec.name;
        std::string stem = fs::path(argv[a]).stem().string();
        if (stem != name) throw SpecError(std::string(argv[a]) + ": error: file name must be the op name '" + name + ".spec'");
        for (auto& c : fam->ops)
          if (!names.insert(c->spec.name).second)
            throw SpecError(std::string(argv[a]) + ": error: op name '" + c->spec.name + "' is defined twice (a user op clashes with a derived one)");
        for (auto& f : emit_op_cpu(*fam)) write_if_changed(out / f.path, f.text);
        for (auto& f : emit_op_registration(*fam)) write_if_changed(out / f.path, f.text);
        all.push_back(std::move(fam));
      }
      std::vector<const Family*> fams;
      for (auto& f : all) fams.push_back(f.get());
      for (auto& f : emit_library(fams)) write_if_changed(out / f.path, f.text);
      return 0;
    }
  } catch (const SpecError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return usage();
}
