// Fake kernels of the pattern-building ops, from the specs. The results of <op>_symbolic
// (rowptr, col) and <op>_assemble (rowptr, col, values) have a data-dependent number of stored
// entries, which a C++ Meta kernel cannot express: a fake kernel gives it an unbacked size
// (torch.library.get_ctx().new_dynamic_size()), and only a Python one can. So the generator
// describes those results, and gnnfuse._library registers one generic fake kernel per op from
// the description when the library loads: a new spec with `symbolic` gets its fake kernels
// with no Python edit.
//
// The description is a private op per family, gnnfuse::_generated_fake_info.<op>() -> str (one
// overload per family, so that every library of generated ops, the test ops' included, adds
// its own), returning a JSON list with one object per op:
//   "op":     the op's name;
//   "rows":   where its number of result rows comes from: {"arg": <schema argument>, "from":
//             "rowptr"} (that csr operand's rows: rowptr.size(0) - 1) or {"arg": ..., "from":
//             "extent"} (an int argument), as the adapter reads it; null when nothing gives it;
//   "index":  the argument whose dtype and device the row pointers and columns take;
//   "values": the argument whose dtype and device the values take, the op's reference floating
//             argument (ref_arg; null: no values returned).
#include "codegen/emit_fake_info.h"

#include <sstream>
#include <vector>

#include "codegen/emit.h"

namespace gnnfuse::codegen {

namespace {

// The argument giving S's row count in the adapters: an `extent` of S's row index, else the
// first input csr operand over it (their other bindings are checked equal to it).
std::string rows_json(const Compiled& c) {
  const OpSpec& s = c.spec;
  const std::string v = c.program.outer_var(s.symbolic);
  for (auto& [var, arg] : s.extents)
    if (var == v) return "{\"arg\": \"" + arg + "\", \"from\": \"extent\"}";
  for (auto* t : emit::symbolic_inputs(s))
    if (t->vars[0] == v) return "{\"arg\": \"" + t->rowptr + "\", \"from\": \"rowptr\"}";
  return "null";
}

}  // namespace

std::string emit_fake_info(const Family& f) {
  const Compiled& c = *f.ops.at(0);
  const OpSpec& s = c.spec;
  if (s.symbolic.empty()) return std::string();
  const std::string rows = rows_json(c);
  const std::string index = emit::symbolic_inputs(s).at(0)->rowptr;
  std::ostringstream json;
  json << "[{\"op\": \"" << s.name << "_symbolic\", \"rows\": " << rows << ", \"index\": \"" << index << "\", \"values\": null}, "
       << "{\"op\": \"" << s.name << "_assemble\", \"rows\": " << rows << ", \"index\": \"" << index << "\", \"values\": \""
       << emit::ref_arg(s) << "\"}]";
  std::ostringstream r;
  r << "\n// ---------------------------------------------------------------- fake kernels\n";
  r << "// The results of " << s.name << "_symbolic and " << s.name << "_assemble, for their fake kernels, which\n";
  r << "// gnnfuse._library registers from this description (their number of entries is data-dependent).\n";
  r << "TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {\n";
  r << "  m.def(\"_generated_fake_info." << s.name << "() -> str\", []() -> std::string {\n";
  r << "    return R\"json(" << json.str() << ")json\";\n";
  r << "  });\n}\n";
  return r.str();
}

}  // namespace gnnfuse::codegen
