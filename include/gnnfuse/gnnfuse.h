// Everything gnnfuse offers to C++ (LibTorch) users: the graph-format ops and the ops
// generated from ops/*.spec. Link libgnnfuse.so; its loading registers the ops.
#pragma once

#include "gnnfuse/graph.h"
#include "gnnfuse/ops.h"  // generated: build/generated/include/gnnfuse/ops.h
