// The description of the fake (Meta) kernels of the ops with a computed output pattern
// (`symbolic S`: <op>_symbolic, <op>_assemble), emitted into the op's registration and read by
// gnnfuse._library, which registers generic fake kernels from it (see emit_fake_info.cpp).
#pragma once

#include <string>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

// The reference floating argument of an op: its outputs take its dtype and options (emit_cpu.cpp).
std::string ref_arg(const OpSpec& s);

// The TORCH_LIBRARY_FRAGMENT that defines gnnfuse::_generated_fake_info.<op>() -> str for a
// family whose user op has `symbolic S`; empty for the others. Appended to <op>_register.cpp.
std::string emit_fake_info(const Family& f);

}  // namespace gnnfuse::codegen
