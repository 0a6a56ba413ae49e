// Resuming from a sharded set under another layout, each rank reading only the part it holds
// (ParallelTrainer::load_checkpoint_set over nn::read_pieces), and from a single-process
// checkpoint read by range (load_checkpoint_source over nn::TensorSource). Layout A trains two
// steps and writes a set as `tessera train` does (every rank its checkpoint_pieces(), rank 0 the
// manifest); layout B then loads it twice, in two fresh trainers:
//  - through the pieces, the path under test;
//  - through the single-process state (the set read whole, load_full_state and
//    load_full_optimizer_state), the path that was there before.
// Both copy the same stored floats into the same places, so the gathered weights, moments and
// scalars, and the losses of two more steps, must be equal bit for bit: no tolerance.
//
// Memory: while the pieces load, the allocator's live bytes may rise by no more than an eighth
// of the single-process state (model + two moments). Reading into the live state needs none;
// the eighth is room for the fp32 layouts' small buffers. The single-process path allocates
// the whole state at least once (the set read whole), which the same bound refuses: it is
// checked as the control, so the bound is shown able to fail.
//
// The same holds for Hugging Face Llama weights (ParallelTrainer::load_model_source over
// nn::hf_llama_source, what `tessera train --init-from` runs): bf16 shards load into any layout
// by range, against the folder read whole, cast and loaded as the control.

#include <unistd.h>

#include <filesystem>
#include <string>

#include "nn/hf_llama_folder.h"
#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"
#include "tessera/core/allocator.h"
#include "tessera/core/ops/compare.h"
#include "tessera/nn/io/sharded_checkpoint.h"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;
using testing::Batch;
using testing::case_config;
using testing::case_model;
using testing::global_batch;
using testing::LayoutCase;

// A folder every rank names alike (rank 0's pid, broadcast), emptied by rank 0.
std::string shared_dir(const std::string& name) {
  auto world = testing::test_world();
  Tensor pid = from_vector<int64_t>({int64_t(::getpid())}, {1});
  world->broadcast(pid, 0);
  const fs::path dir = fs::temp_directory_path() /
                       str_cat("tessera_sharded_resume_", name, "_", pid.item<int64_t>());
  if (world->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world->barrier();
  return dir.string();
}

void train_two_steps(ParallelTrainer& trainer, const LayoutCase& a) {
  const ParallelConfig p = case_config(a);
  for (int64_t step = 0; step < 2; ++step) {
    const Batch b = global_batch(step, p.batch_size, p.seq_len, case_model(a).vocab_size);
    trainer.step(b.inputs, b.targets);
  }
}

// Layout a's state after two steps, written as a sharded set of step 2 in run_dir.
std::string write_set(const LayoutCase& a, const std::string& run_dir) {
  auto world = testing::test_world();
  ParallelTrainer trainer(world, case_model(a), case_config(a));
  train_two_steps(trainer, a);
  nn::ShardJob job;
  job.run_dir = run_dir;
  job.step = 2;
  job.rank = world->rank();
  job.ranks = world->size();
  job.nonce = nn::checkpoint_nonce(2);
  job.pieces = trainer.checkpoint_pieces();
  if (job.rank == 0) job.state = {{"optimizer", trainer.optimizer_scalars()}};
  const std::string dir = nn::write_shard(job);
  world->barrier();  // rank 0 has published the manifest
  return dir;
}

// Layout a's state after two steps, written by rank 0 as a single-process (gathered)
// checkpoint of step 2 in run_dir, as `tessera train --checkpoint-format gathered` does.
std::string write_gathered(const LayoutCase& a, const std::string& run_dir) {
  auto world = testing::test_world();
  ParallelTrainer trainer(world, case_model(a), case_config(a));
  train_two_steps(trainer, a);
  nn::CheckpointData data;
  data.step = 2;
  data.model = trainer.gather_full_state();
  nn::OptimizerState optimizer = trainer.gather_full_optimizer_state();
  data.optimizer = std::move(optimizer.tensors);
  data.state = {{"optimizer", optimizer.scalars}};
  if (world->rank() == 0) nn::save_checkpoint(run_dir, data);
  world->barrier();
  return (fs::path(nn::checkpoints_dir(run_dir)) / nn::checkpoint_name(2)).string();
}

int64_t state_bytes(const nn::GPTConfig& model) {
  nn::GPT gpt(model);
  int64_t n = 0;
  for (const auto& [name, t] : gpt.named_parameters()) n += t.numel();
  return 3 * n * int64_t(sizeof(float));  // weights and two AdamW moments, fp32
}

// The rise of the CPU allocator's live bytes while `load` runs on every rank.
template <typename Load>
int64_t load_rise(Load&& load) {
  auto world = testing::test_world();
  Allocator& cpu = allocator_for(Device::cpu());
  world->barrier();
  cpu.reset_peak();  // each rank is a process: its own allocator
  const int64_t before = cpu.stats().live_bytes;
  load();
  world->barrier();
  return cpu.stats().peak_bytes - before;
}

void expect_same_state(ParallelTrainer& x, ParallelTrainer& y, const std::string& what) {
  const nn::StateDict wx = x.gather_full_state(), wy = y.gather_full_state();
  ASSERT_EQ(wx.size(), wy.size()) << what;
  for (size_t i = 0; i < wx.size(); ++i)
    EXPECT_TRUE(tessera::equal(wx[i].second, wy[i].second)) << what << " " << wx[i].first;
  const nn::OptimizerState ox = x.gather_full_optimizer_state(),
                           oy = y.gather_full_optimizer_state();
  EXPECT_EQ(ox.scalars, oy.scalars) << what;
  ASSERT_EQ(ox.tensors.size(), oy.tensors.size()) << what;
  for (size_t i = 0; i < ox.tensors.size(); ++i)
    EXPECT_TRUE(tessera::equal(ox.tensors[i].second, oy.tensors[i].second))
        << what << " " << ox.tensors[i].first;
}

// Layout a writes two steps' state as a sharded set (or, gathered, as a single-process
// checkpoint); layout b loads it by part and whole, and the two must agree.
void resume_sharded(const LayoutCase& a, const LayoutCase& b, const std::string& name,
                    bool gathered = false) {
  nn::testing::OneThread one_thread;
  auto world = testing::test_world();
  const nn::GPTConfig model = case_model(a);
  const ParallelConfig pb = case_config(b);
  const std::string what =
      case_config(a).describe() + " -> " + pb.describe() + (gathered ? " (gathered)" : "");
  const std::string dir =
      gathered ? write_gathered(a, shared_dir(name)) : write_set(a, shared_dir(name));

  // By part: a set's pieces (ParallelTrainer::load_checkpoint_set), or a single-process
  // checkpoint's files by range (load_checkpoint_source). Whole: the state read whole and
  // loaded through the single-process format, the path that was there before.
  const nn::LoadedCheckpoint opened = nn::open_checkpoint(dir, /*open_gathered=*/true);
  const nlohmann::json scalars = opened.data.state["optimizer"];
  ParallelTrainer pieces(world, model, pb), whole(world, model, pb);
  const int64_t pieces_rise = load_rise([&] {
    if (gathered)
      pieces.load_checkpoint_source(*opened.model_files, opened.optimizer_files.get(), &scalars);
    else
      pieces.load_checkpoint_set(*opened.set, &scalars);
  });
  const int64_t whole_rise = load_rise([&] {
    nn::CheckpointData data =
        gathered ? nn::load_checkpoint(dir) : nn::read_sharded_checkpoint(*opened.set);
    whole.load_full_state(data.model);
    whole.load_full_optimizer_state({data.optimizer, scalars});
  });
  const int64_t bound = state_bytes(model) / 8;
  EXPECT_LE(pieces_rise, bound) << what;
  EXPECT_GT(whole_rise, bound) << what << ": the control no longer allocates the whole state";
  if (world->rank() == world->size() - 1)
    std::printf("  %-70s live rise: pieces %lld B, whole %lld B (state %lld B)\n", what.c_str(),
                (long long)pieces_rise, (long long)whole_rise, (long long)state_bytes(model));

  expect_same_state(pieces, whole, what);
  pieces.set_step(2);
  whole.set_step(2);
  for (int64_t step = 2; step < 4; ++step) {
    const Batch batch = global_batch(step, pb.batch_size, pb.seq_len, model.vocab_size);
    EXPECT_EQ(pieces.step(batch.inputs, batch.targets).loss,
              whole.step(batch.inputs, batch.targets).loss)
        << what << ": step " << step + 1;
  }
  expect_same_state(pieces, whole, what + " after two more steps");
  world->barrier();
  if (world->rank() == 0) fs::remove_all(fs::path(dir).parent_path().parent_path());
}

constexpr auto kInterleaved = ScheduleKind::interleaved;

// ZeRO-1's moment shards into tensor parallelism (vocab 61 padded to 64: rank 1's rows 61-63
// are padding, read as zeros) with sequence parallelism.
RANK_TEST(ShardedResumeN2, DataParallelZero1ToTensorParallel) {
  resume_sharded({MeshShape{2, 1, 1}, 1}, {MeshShape{1, 1, 2}, 0, {}, 1, 1, true}, "dp_tp");
}

// Column and row slices into ZeRO-3's master shards.
RANK_TEST(ShardedResumeN2, TensorParallelToZero3) {
  resume_sharded({MeshShape{1, 1, 2}, 0, {}, 1, 1, false, true},
                 {MeshShape{2, 1, 1}, 3, {}, 1, 2, false, true}, "tp_zero3");
}

// The tied head: written once by the first stage, read by both stages of the new pipeline
// (the last one's tied copy), and from an interleaved pipeline into ZeRO 0's whole moments.
RANK_TEST(ShardedResumeN2, TiedPipelineToZero0AndBack) {
  resume_sharded({MeshShape{1, 2, 1}, 0, kInterleaved, 2, 2, false, true},
                 {MeshShape{2, 1, 1}, 0, {}, 1, 2, false, true}, "pp_dp");
  resume_sharded({MeshShape{2, 1, 1}, 2, {}, 1, 2, false, true},
                 {MeshShape{1, 2, 1}, 0, {}, 1, 2, false, true}, "dp_pp");
}

RANK_TEST(ShardedResumeN4, DataTensorToPipelineZero3) {
  resume_sharded({MeshShape{2, 1, 2}, 2}, {MeshShape{2, 2, 1}, 3, {}, 1, 2}, "dptp_pp");
}

// A single-process (gathered) checkpoint read by range into layouts, each rank its part: ZeRO-3
// shards of tensor-parallel slices with their padding, and a tied pipeline's two copies of wte.
RANK_TEST(ShardedResumeN4, GatheredCheckpointsLoadByRangeIntoEachLayout) {
  resume_sharded({MeshShape{2, 1, 2}, 2}, {MeshShape{2, 1, 2}, 3}, "gathered_dptp", true);
  resume_sharded({MeshShape{4, 1, 1}, 1, {}, 1, 1, false, true},
                 {MeshShape{1, 2, 2}, 0, {}, 1, 2, false, true}, "gathered_pp_tied", true);
}

// A Hugging Face Llama folder (bf16, three shards and an index) into layout c: each rank reads
// only its ZeRO shard of its tensor-parallel slice of its stage, cast from bf16 through one
// buffer, so the live bytes rise by that buffer at most. The control reads the folder whole,
// casts it to f32 and loads the single-process state (the path --init-from took): it holds the
// folder twice over and fails the bound. Both give the single-process weights rounded to bf16
// (the padded vocabulary rows zero), bit for bit.
void load_hf_llama(const LayoutCase& c, const std::string& name,
                   nn::Precision precision = nn::Precision::fp32, bool tied = false) {
  nn::testing::OneThread one_thread;
  auto world = testing::test_world();
  nn::GPTConfig model = case_model(c);
  model.n_embd = 64;  // the folder, 0.4 MB in bf16, well above the cast buffer
  model.tie_embeddings = tied;
  ParallelConfig p = case_config(c);
  p.precision = precision;
  const std::string what = p.describe();
  const std::string dir = shared_dir(name) + "/hf";
  nn::GPT single(model);
  if (world->rank() == 0)
    nn::testing::write_hf_llama_shards(dir, single.state_dict(), model, 3, DType::bf16);
  world->barrier();

  const std::shared_ptr<const nn::TensorSource> source = nn::hf_llama_source(dir, nullptr);
  ParallelTrainer ranged(world, model, p), whole(world, model, p);
  const int64_t ranged_rise = load_rise([&] { ranged.load_model_source(*source); });
  const int64_t whole_rise = load_rise([&] {
    nn::StateDict full = source->read_all();
    for (auto& [n, t] : full) t = ops::cast(t, DType::f32);
    whole.load_full_state(full);
  });
  const int64_t bound = nn::SafetensorsReader::kCastChunkElements * 2 + 4096;  // one buffer
  EXPECT_LE(ranged_rise, bound) << what;
  EXPECT_GT(whole_rise, bound) << what << ": the control no longer reads the folder whole";
  if (world->rank() == world->size() - 1)
    std::printf("  %-60s live rise: by range %lld B, whole %lld B\n", what.c_str(),
                (long long)ranged_rise, (long long)whole_rise);

  const nn::StateDict got = ranged.gather_full_state(), control = whole.gather_full_state();
  ASSERT_EQ(got.size(), control.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const Tensor want = ops::cast(
        ops::cast(nn::find_tensor(single.state_dict(), got[i].first), DType::bf16), DType::f32);
    EXPECT_TRUE(tessera::equal(got[i].second, want)) << what << " " << got[i].first;
    EXPECT_TRUE(tessera::equal(got[i].second, control[i].second)) << what << " " << got[i].first;
  }
  // What the gathered state leaves out (the last stage's tied copy of wte) reads alike too.
  const Batch batch = global_batch(0, p.batch_size, p.seq_len, model.vocab_size);
  EXPECT_EQ(ranged.step(batch.inputs, batch.targets).loss,
            whole.step(batch.inputs, batch.targets).loss)
      << what;
  world->barrier();
  if (world->rank() == 0) fs::remove_all(fs::path(dir).parent_path());
}

// ZeRO-3's shards of tensor-parallel slices (vocab 61 padded to 64: rank 1's padding rows are
// zero, in no run); ZeRO-1 over a pipeline's stages, with a bf16 compute copy rounded from
// them; a tied head, whose last-stage copy of wte reads the same rows as the first stage's.
RANK_TEST(ShardedResumeN4, HuggingFaceLlamaShardsLoadByRangeIntoEachLayout) {
  load_hf_llama({MeshShape{2, 1, 2}, 3}, "hf_dptp");
  load_hf_llama({MeshShape{2, 2, 1}, 1, {}, 1, 2}, "hf_dppp", nn::Precision::bf16);
  load_hf_llama({MeshShape{1, 2, 2}, 0, {}, 1, 2}, "hf_pptp_tied", nn::Precision::fp32, true);
}

}  // namespace
}  // namespace tessera::parallel
