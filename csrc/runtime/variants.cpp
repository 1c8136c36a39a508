#include "runtime/variants.h"

namespace gnnfuse::runtime {

std::vector<Variants*>& variant_registry() {
  static std::vector<Variants*> all;
  return all;
}

Variants::Variants(const char* op_, int count_, int (*last_)()) : op(op_), count(count_), last(last_) {
  variant_registry().push_back(this);
}

}  // namespace gnnfuse::runtime
