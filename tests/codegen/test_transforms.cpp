// The generated transform support of every op family: autograd Nodes (no
// torch::autograd::Function), vmap batching rules folding the batch into a free index derived
// from the spec, and autocast kernels with the policy derived from the expression (or the spec's
// `autocast` line), all registered.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "codegen/ir.h"

using namespace gnnfuse::codegen;

namespace {

const std::string kOps = GNNFUSE_OPS_DIR;

std::string registration(const std::string& op) {
  Family f = compile_family(load_spec(kOps + "/" + op + ".spec"));
  return emit_op_registration(f).at(0).text;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The body of the generated function `name(` (up to the next blank line).
std::string function(const std::string& text, const std::string& name) {
  size_t at = text.find(" " + name + "(");
  if (at == std::string::npos) return "";
  return text.substr(at, text.find("\n\n", at) - at);
}

}  // namespace

TEST(Transforms, EveryOpHasANodeBatchingRuleAndAutocastKernels) {
  for (auto& entry : std::filesystem::directory_iterator(kOps)) {
    if (entry.path().extension() != ".spec") continue;
    Family f = compile_family(load_spec(entry.path().string()));
    const std::string text = emit_op_registration(f).at(0).text;
    EXPECT_FALSE(has(text, "torch::autograd::Function")) << entry.path();
    for (auto& c : f.ops) {
      const std::string& op = c->spec.name;
      EXPECT_TRUE(has(text, "struct " + op + "_backward final : public torch::autograd::Node")) << op;
      for (auto suffix : {"_autograd)", "_batched)", "_autocast<c10::DeviceType::CPU>)", "_autocast<c10::DeviceType::CUDA>)"})
        EXPECT_TRUE(has(text, "m.impl(\"" + op + "\", &gnnfuse::generated::" + op + suffix)) << op << suffix;
    }
    for (auto key : {"FuncTorchBatched", "AutocastCPU", "AutocastCUDA"}) EXPECT_TRUE(has(text, std::string("TORCH_LIBRARY_IMPL(gnnfuse, ") + key + ", m)"));
  }
}

TEST(Transforms, AutocastPolicyFromTheExpression) {
  // contractions (a sum outside a denominator): the autocast dtype, like torch.mm
  for (auto op : {"spmm", "spmm_mean", "sddmm", "sddmm_heads", "sddmm_spmm", "spmm_heads", "scaled_spmm", "gat", "graph_attention", "gcn", "spgemm", "coarsen"})
    EXPECT_TRUE(has(registration(op), "autocast (lower_precision)")) << op;
  // a normalisation (sums in denominators only): float32, like softmax
  for (auto op : {"edge_softmax", "edge_softmax_heads"}) EXPECT_TRUE(has(registration(op), "autocast (fp32)")) << op;
  // element-wise per edge, max/min: the widest input dtype
  for (auto op : {"sddmm_add", "sddmm_mul", "spmm_max", "spmm_min"}) EXPECT_TRUE(has(registration(op), "autocast (promote)")) << op;
  // the derived ops follow the user op; acc row statistics are never cast
  const std::string gat = registration("gat");
  const std::string adj = function(gat, "gat_grad_x_autocast");
  ASSERT_FALSE(adj.empty());
  EXPECT_TRUE(has(adj, "detail::Autocast::LowerPrecision"));
  EXPECT_TRUE(has(adj, "detail::autocast_cast(grad, to_, D)"));
  EXPECT_FALSE(has(adj, "detail::autocast_cast(stat"));
  // the assembling op of a computed pattern too; its index tensors never
  const std::string asmb = function(registration("spgemm"), "spgemm_assemble_autocast");
  EXPECT_TRUE(has(asmb, "detail::autocast_cast(avals, to_, D)"));
  EXPECT_FALSE(has(asmb, "autocast_cast(arowptr"));
}

TEST(Transforms, AutocastLineOverridesAndRoundTrips) {
  std::string text =
      "op spmm2\nschema spmm2(Tensor rowptr, Tensor col, Tensor x) -> Tensor\nsparse A(i,j) = csr(rowptr, col)\n"
      "dense X(j,f) = x\noutput Y(i,f)\nexpr Y(i,f) = A(i,j) * X(j,f)\ndtypes float32 float64\nindex int64\nautocast fp32\n";
  OpSpec s = parse_spec(text, "<test>");
  EXPECT_EQ(s.autocast, "fp32");
  EXPECT_EQ(parse_spec(print_spec(s), "<round trip>").autocast, "fp32");
  const std::string reg = emit_op_registration(compile_family(s)).at(0).text;
  EXPECT_TRUE(has(reg, "autocast (fp32)"));
  // only the dtypes the spec admits: the mask passed to the kernel
  EXPECT_TRUE(has(function(reg, "spmm2_autocast"), "checks::kFloat32 | checks::kFloat64, {detail::ptr(x)}"));
  EXPECT_THROW(parse_spec(text + "autocast fp32\n", "<twice>"), SpecError);
  try {
    parse_spec(text.substr(0, text.size() - std::string("autocast fp32\n").size()) + "autocast half\n", "<bad>");
    ADD_FAILURE() << "autocast half was accepted";
  } catch (const SpecError& e) {
    EXPECT_TRUE(has(e.what(), "lower_precision")) << e.what();
  }
}

TEST(Transforms, BatchFoldedIntoAFreeIndex) {
  // spmm: f (x only); never the sparse indices; a batched edge weight runs element by element
  const std::string spmm = function(registration("spmm"), "spmm_batched");
  EXPECT_TRUE(has(spmm, "the batch folded into index f"));
  EXPECT_TRUE(has(spmm, "detail::fold(x_u, x_bd, 1, B_)"));
  EXPECT_TRUE(has(spmm, "if (!edge_weight_bd && detail::fold_pays({{&x_u, x_bd.has_value()}}, B_))"));
  EXPECT_TRUE(has(spmm, "if (!rowptr_bd && !col_bd && !colptr_bd && !row_bd && !perm_bd)"));
  EXPECT_FALSE(has(spmm, "folded into index i"));
  EXPECT_FALSE(has(spmm, "folded into index j"));
  // gat: f first (x alone carries it), then h (every dense operand: the others repeated)
  const std::string gat = function(registration("gat"), "gat_batched");
  EXPECT_LT(gat.find("folded into index f"), gat.find("folded into index h"));
  EXPECT_TRUE(has(gat, "detail::fold(a_dst_u, a_dst_bd, 1, B_), detail::fold(a_src_u, a_src_bd, 1, B_), detail::fold(x_u, x_bd, 1, B_)"));
  // an edge operand's extra index sits at dimension 1 of its [nnz, ...] tensor, as the output's
  const std::string heads = function(registration("edge_softmax_heads"), "edge_softmax_heads_batched");
  EXPECT_TRUE(has(heads, "detail::fold(score_u, score_bd, 1, B_)"));
  EXPECT_TRUE(has(heads, "detail::unfold(res_, 1, B_, n_), 1, level_)"));
  // contracted (sddmm's k) or no free dense index (edge_softmax): element by element only
  for (auto [fam, op] : {std::pair{"sddmm", "sddmm_batched"}, {"edge_softmax", "edge_softmax_batched"}, {"spmm", "spmm_grad_edge_weight_batched"}}) {
    const std::string body = function(registration(fam), op);
    ASSERT_FALSE(body.empty()) << op;
    EXPECT_FALSE(has(body, "folded into index")) << op;
    EXPECT_TRUE(has(body, "detail::stack_batch(")) << op;
  }
  // max/min: both results unfolded
  EXPECT_TRUE(has(function(registration("spmm_max"), "spmm_max_batched"), "detail::unfold(std::get<1>(res_), 1, B_, n_)"));
}

TEST(Transforms, NodesSaveInputsOnlyAndStopAtGradOrder) {
  const std::string gat = registration("gat");
  const std::string node = function(gat, "gat_autograd");
  EXPECT_TRUE(has(node, "torch::autograd::collect_next_edges(a_dst, a_src, x)"));
  EXPECT_TRUE(has(node, "grad_fn_->saved_x = torch::autograd::SavedVariable(x, false)"));
  EXPECT_TRUE(has(node, "grad_fn_->ext_h = e.n_h"));
  EXPECT_TRUE(has(node, "detail::no_forward_ad(\"gat\""));
  // grad_order 1: the adjoints' Nodes save nothing and raise
  const std::string adj = function(gat, "gat_grad_x_autograd");
  EXPECT_FALSE(has(adj, "SavedVariable"));
  EXPECT_TRUE(has(gat, "gnnfuse::gat_grad_x: this op is a derivative of gnnfuse::gat of the highest order generated"));
  // the statistics computed once per backward, shared by the adjoints
  EXPECT_TRUE(has(gat, "if (!stat0_memo) stat0_memo = gnnfuse::gat_stat0("));
  // max/min: the positions saved, not differentiable
  const std::string mx = function(registration("spmm_max"), "spmm_max_autograd");
  EXPECT_TRUE(has(mx, "grad_fn_->saved_selected = torch::autograd::SavedVariable(selected_, false)"));
  EXPECT_TRUE(has(mx, "torch::autograd::set_history(out_, grad_fn_)"));
  EXPECT_FALSE(has(mx, "set_history(selected_"));
}
