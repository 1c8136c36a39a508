// Below the scheduled index tree, for every target: the lowering that decides what the trees
// leave to the printers. Stored-entry semantics: what a statement yields for a sparse row
// without entries (an empty sum is 0, not 0 / 0; a max / min over no entry stores 0), decided
// once here from the tree, not by each target's printer.
#pragma once

#include <string>
#include <vector>

#include "codegen/ir.h"

namespace gnnfuse::codegen {

struct EntryRule {
  // Div: the quotient is taken only where the current row of this sparse operand (open in an
  // enclosing loop, not being walked) has entries, 0 elsewhere: a sum over its walk divided by a
  // row statistic (a softmax-weighted sum, the division taken out of the sum) is an empty sum,
  // 0, not 0 / 0; a statistic divided by such a sum (1 / sum exp) is 0, not inf (which would
  // turn an empty sum times it into NaN).
  std::string div_nonempty;
  // The store into the output of a reduce max / min op: a row of this operand (the reduced one)
  // without entries stores 0 (its position stays -1); `row` is its row variable.
  std::string store_empty_zero;
  std::string row;
};

// Per statement id (the tree holds each statement once): its stored-entry rules.
std::vector<EntryRule> entry_semantics(const Program& p, const Node& root);

}  // namespace gnnfuse::codegen
