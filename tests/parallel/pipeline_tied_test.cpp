// The tied-embedding gradient all-reduce between the first and the last pipeline stage, over
// DeviceMesh::embedding(). Values are small integers, so sums are exact.

#include <gtest/gtest.h>

#include "parallel/rank_test.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/pipeline/executor.h"
#include "tessera/parallel/pipeline/detail/tied_gradients.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

Tensor param_with_grad(std::vector<float> grad) {
  Tensor p = zeros({int64_t(grad.size())});
  p.set_requires_grad(true);
  p.set_grad(from_vector<float>(grad, {int64_t(grad.size())}));
  return p;
}

// Each rank's tied copy holds a gradient naming its mesh position; the first and last stage
// of each pipeline end with the sum of their two; middle stages keep theirs.
void sums_first_and_last_stage(const MeshShape& shape) {
  DeviceMesh mesh(testing::test_world(), shape);
  const float mine = float(100 * mesh.dp_rank() + mesh.pp_rank() + 1);
  Tensor wte = param_with_grad({mine, 2 * mine});
  Tensor unused = zeros({3});  // no gradient yet on this copy: contributes zeros
  unused.set_requires_grad(true);
  all_reduce_tied_gradients(mesh, {wte, unused});
  const bool end = mesh.is_first_stage() || mesh.is_last_stage();
  const float first = float(100 * mesh.dp_rank() + 1), last = first + float(shape.size("pp") - 1);
  std::vector<float> want = end ? std::vector<float>{first + last, 2 * (first + last)}
                                : std::vector<float>{mine, 2 * mine};
  EXPECT_EQ(to_vector<float>(wte.grad()), want);
  if (end)
    EXPECT_EQ(to_vector<float>(unused.grad()), std::vector<float>(3, 0.f));
  else
    EXPECT_FALSE(unused.grad().defined()) << "middle stages are left alone";
}

RANK_TEST(PipelineTiedN2, SumsBetweenFirstAndLastStage) {
  sums_first_and_last_stage({1, 2, 1});
}
RANK_TEST(PipelineTiedN4, SumsBetweenFirstAndLastStage) {
  sums_first_and_last_stage({1, 4, 1});
}
RANK_TEST(PipelineTiedN4, EachDataParallelReplicaSumsItsOwn) {
  sums_first_and_last_stage({2, 2, 1});
}

RANK_TEST(PipelineTiedN2, MismatchedParameterListsThrowOnBothRanks) {
  DeviceMesh mesh(testing::test_world(), {1, 2, 1});
  std::vector<Tensor> params = {param_with_grad({1, 2})};
  if (mesh.pp_rank() == 1) params.push_back(param_with_grad({3}));
  try {
    all_reduce_tied_gradients(mesh, params);
    ADD_FAILURE() << "ranks passing different tied parameters must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks disagree (between 1 and 2 parameters, 2 "
                                         "and 3 elements)"),
              std::string::npos)
        << e.what();
  }
}

class NoStage final : public PipelineStage {
 public:
  Tensor forward(int, int, const Tensor&) override { return Tensor(); }
  ActivationSpec activation_spec(int, int) const override { return {{1}}; }
};

RANK_TEST(PipelineTiedN2, ExecutorNeedsTheEmbeddingGroupBeforeItStarts) {
  DeviceMesh mesh(testing::test_world(), {1, 2, 1});
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 2, {.tied_embedding = true});
  NoStage stage;
  try {
    run_pipeline(s, stage, mesh.pp());
    ADD_FAILURE() << "a tied schedule without the embedding group must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not set"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::parallel
