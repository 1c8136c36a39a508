// gnnfuse-gen: reads op specs, writes kernels, registration and the C++ API.
//   gnnfuse-gen [--target T] --out DIR ops/*.spec   generate into DIR (files rewritten only when changed)
//   gnnfuse-gen [--target T] --dump FILE.spec ...   print the program and the index trees after every stage
// --target: the machine the kernels are for (the target table in target.cpp); cpu by default.
// cuda writes the kernel files (<op>_cuda.h, <op>_cuda.cu) and the ATen adapters at the CUDA key
// (<op>_cuda_register.cpp), beside the cpu target's files.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/imperative.h"
#include "codegen/ir.h"

namespace fs = std::filesystem;
using namespace gnnfuse::codegen;

namespace {

int usage() {
  std::cerr << "usage: gnnfuse-gen [--target T] --out DIR SPEC...\n       gnnfuse-gen [--target T] --dump SPEC...\n";
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
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string target_name = "cpu";
  if (args.size() >= 2 && args[0] == "--target") {
    target_name = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.size() < 2) return usage();
  const std::string& mode = args[0];
  try {
    const Target target = parse_target(target_name);
    if (mode == "--dump") {
      for (size_t a = 1; a < args.size(); ++a) {
        Family f = compile_family(load_spec(args[a]), target);
        for (auto& c : f.ops) {
          std::cout << "==== " << c->spec.name << (c->spec.derived() ? " (derived from " + c->spec.family + ")" : "") << " ("
                    << args[a] << ")\n";
          std::cout << "---- spec\n" << print_spec(c->spec);
          for (auto& [name, text] : c->stages) std::cout << "---- " << name << "\n" << text;
          std::cout << "---- imperative IR\n" << imp::print(*c->kernel);
          for (size_t v = 1; v < c->schedule_variants.size(); ++v)
            std::cout << "---- schedule variant " << c->schedule_variants[v].name << ": imperative IR\n"
                      << imp::print(*c->schedule_variants[v].kernel);
          if (c->assemble) std::cout << "---- imperative IR: assembling kernel\n" << imp::print(*c->assemble);
          if (c->pattern) std::cout << "---- imperative IR: pattern kernel\n" << imp::print(*c->pattern);
          for (size_t v = 0; v < c->alternatives.size(); ++v) {
            for (auto& [name, text] : c->alternatives[v]->stages)
              std::cout << "---- variant " << v + 1 << ": " << name << "\n" << text;
            std::cout << "---- variant " << v + 1 << ": imperative IR\n" << imp::print(*c->alternatives[v]->kernel);
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
    if (mode == "--out" && args.size() >= 3) {
      // Every file of every spec is generated before the first one is written: a spec refused
      // at any stage (its emission included) leaves no file of its op in DIR, not even kernels.
      fs::path out = args[1];
      std::vector<std::unique_ptr<Family>> all;
      std::vector<GeneratedFile> files;
      std::set<std::string> names;
      for (size_t a = 2; a < args.size(); ++a) {
        try {
          auto fam = std::make_unique<Family>(compile_family(load_spec(args[a]), target));
          const std::string& name = fam->ops[0]->spec.name;
          std::string stem = fs::path(args[a]).stem().string();
          if (stem != name) throw SpecError(args[a] + ": error: file name must be the op name '" + name + ".spec'");
          for (auto& c : fam->ops)
            if (!names.insert(c->spec.name).second)
              throw SpecError(args[a] + ": error: op name '" + c->spec.name + "' is defined twice (a user op clashes with a derived one)");
          for (auto& f : emit_op_kernels(*fam)) files.push_back(std::move(f));
          if (target_info(target).registers)
            for (auto& f : emit_op_registration(*fam)) files.push_back(std::move(f));
          if (target == Target::Cuda)  // the CUDA kernels' ATen adapters (the shared kernels are the cpu target's)
            for (auto& f : emit_op_cuda_registration(*fam)) files.push_back(std::move(f));
          all.push_back(std::move(fam));
        } catch (const SpecError& e) {
          // An error in an op derived from the spec (located "<op, derived from ...>") names the
          // spec file too.
          const std::string what = e.what();
          if (what.rfind("<", 0) != 0) throw;
          throw SpecError(args[a] + ": " + what);
        }
      }
      std::vector<const Family*> fams;
      for (auto& f : all) fams.push_back(f.get());
      if (target_info(target).registers)
        for (auto& f : emit_library(fams)) files.push_back(std::move(f));
      for (auto& f : files) write_if_changed(out / f.path, f.text);
      return 0;
    }
  } catch (const SpecError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return usage();
}
