// The background checkpoint writer: what it writes is the state at save() time (the caller
// changes its tensors right after), saves land in order and are waited for, and a failed
// write is reported by the next call, naming the step.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tessera/nn/io/checkpoint_writer.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

namespace fs = std::filesystem;
using testing::mentions;
using testing::same_tensor;
using testing::TempDir;

CheckpointData state_at(int64_t step) {
  Generator gen(uint64_t(step) + 7);
  CheckpointData d;
  d.step = step;
  d.model = {{"wte.weight", randn({64, 32}, gen)}, {"ln.bias", randn({32}, gen, DType::bf16)}};
  d.optimizer = {{"exp_avg.wte.weight", randn({64, 32}, gen)}};
  d.state = {{"loader", {{"position", step * 10}}}};
  return d;
}

TEST(CheckpointWriter, WritesTheStateAsItWasAtSave) {
  TempDir dir;
  CheckpointData live = state_at(3);
  const CheckpointData expected = {3,
                                   {{"wte.weight", ops::clone(live.model[0].second)},
                                    {"ln.bias", ops::clone(live.model[1].second)}},
                                   {{"exp_avg.wte.weight", ops::clone(live.optimizer[0].second)}},
                                   live.state};
  CheckpointWriter writer;
  const std::string where = writer.save(dir.path(), live, 0);
  // The training loop's next update, in place, while the write may still run.
  ops::fill_(live.model[0].second, 5.0);
  ops::fill_(live.optimizer[0].second, -1.0);
  writer.wait();
  EXPECT_EQ(writer.pending_bytes(), 0);
  EXPECT_EQ(where, (fs::path(checkpoints_dir(dir.path())) / "step_00000003").string());
  const CheckpointData got = load_checkpoint(where);
  ASSERT_EQ(got.model.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_tensor(got.model[i].second, expected.model[i].second));
  EXPECT_TRUE(same_tensor(got.optimizer[0].second, expected.optimizer[0].second));
  EXPECT_EQ(got.state, expected.state);
}

TEST(CheckpointWriter, SavesInOrderAndKeepsTheNewest) {
  TempDir dir;
  CheckpointWriter writer;
  for (int64_t step : {1, 2, 3, 4}) writer.save(dir.path(), state_at(step), 2);
  writer.wait();
  EXPECT_EQ(list_checkpoints(dir.path()), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(*find_latest_checkpoint(dir.path()),
            (fs::path(checkpoints_dir(dir.path())) / "step_00000004").string());
}

TEST(CheckpointWriter, AFailedWriteIsReportedByTheNextCallNamingTheStep) {
  TempDir dir;
  // A file where the checkpoints directory should be: save_checkpoint cannot create it.
  testing::write_bytes(dir.file("run"), "x");
  CheckpointWriter writer;
  writer.save(dir.file("run"), state_at(9), 0);  // the snapshot succeeds; the write fails
  try {
    writer.wait();
    FAIL() << "wait() did not report the failed write";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e.what(), {"background save of step 9 failed", "run"}));
  }
  writer.wait();  // reported once
}

// A staged snapshot: host buffers that asynchronous copies are still filling. The thread must
// not write before `land` (run on the caller's thread by the next wait) says they are in; here
// land itself fills them, so a write that started earlier would find zeros.
TEST(CheckpointWriter, AStagedSnapshotIsWrittenOnlyOnceItHasLanded) {
  TempDir dir;
  const CheckpointData want = state_at(5);
  std::vector<ShardPiece> pieces = replicated_pieces(want.model, false, 0, 1);
  std::vector<Tensor> staged;
  for (ShardPiece& p : pieces) {
    staged.push_back(zeros(p.data.shape(), p.data.dtype()));
    std::swap(staged.back(), p.data);  // staged[i] keeps the values the copy will bring
  }
  std::vector<Tensor> buffers;
  for (const ShardPiece& p : pieces) buffers.push_back(p.data);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id landed_on;
  ShardJob job;
  job.run_dir = dir.path();
  job.step = 5;
  job.nonce = checkpoint_nonce(5);
  job.pieces = pieces;
  CheckpointWriter writer;
  writer.save_shard(
      std::move(job), CheckpointWriter::Snapshot::staged,
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the writer could run now
        for (size_t i = 0; i < buffers.size(); ++i) ops::copy_(buffers[i], staged[i]);
        landed_on = std::this_thread::get_id();
      },
      1234);
  EXPECT_EQ(writer.pending_bytes(), 1234);
  EXPECT_GE(writer.wait_for_snapshot(), 0.04);  // it lands here, not on the writer's thread
  EXPECT_EQ(landed_on, caller);
  writer.wait();
  const CheckpointData got =
      load_checkpoint((fs::path(checkpoints_dir(dir.path())) / checkpoint_name(5)).string());
  ASSERT_EQ(got.model.size(), want.model.size());
  for (size_t i = 0; i < want.model.size(); ++i)
    EXPECT_TRUE(same_tensor(got.model[i].second, want.model[i].second)) << want.model[i].first;
}

// A staged snapshot of host state (no land function): the writer thread copies the live
// tensors into its own memory, and wait_for_snapshot() returns once it has. The test changes
// the live piece's last element the moment it returns: a thread that released the state
// before its copy, or wrote from the live state, reaches that element milliseconds later (a
// 32 MB memcpy or write, against the microseconds of a wake-up) and writes the new value.
// Both paths: a shard of a sharded set, and a node-local set.
TEST(CheckpointWriter, AStagedSnapshotOfHostStateIsCopiedByTheThreadBeforeTheLoopGoesOn) {
  const int64_t n = int64_t(8) << 20;
  const nlohmann::json fingerprint = {{"test", "staged"}};
  for (const bool local : {false, true}) {
    TempDir dir;
    Generator gen(3);
    Tensor live = arange(0, double(n), 1, DType::f32);  // exact in f32: n < 2^24
    Tensor small = randn({1000}, gen);
    const Tensor want_live = ops::clone(live), want_small = ops::clone(small);
    CheckpointWriter writer;
    if (local) {
      writer.save_local(dir.file("rank"), 7, {{"w", live}, {"b", small}}, fingerprint,
                        nlohmann::json::object(), CheckpointWriter::Snapshot::staged);
    } else {
      ShardJob job;
      job.run_dir = dir.path();
      job.step = 7;
      job.nonce = checkpoint_nonce(7);
      job.pieces = replicated_pieces({{"w", live}, {"b", small}}, false, 0, 1);
      writer.save_shard(std::move(job), CheckpointWriter::Snapshot::staged);
    }
    EXPECT_EQ(writer.pending_bytes(), (n + 1000) * 4);  // the thread's copy: the whole share
    writer.wait_for_snapshot();
    live.data<float>()[n - 1] = -1.0f;  // the next update, from the end
    ops::fill_(small, 2.0);
    writer.wait();
    EXPECT_EQ(writer.last_snapshot_bytes(), (n + 1000) * 4);
    const StateDict got =
        local
            ? load_local_checkpoint(dir.file("rank"), 7, fingerprint).tensors
            : load_checkpoint((fs::path(checkpoints_dir(dir.path())) / checkpoint_name(7)).string())
                  .model;
    ASSERT_EQ(got.size(), 2u) << (local ? "local" : "shard");
    for (const auto& [name, t] : got)
      EXPECT_TRUE(same_tensor(t, name == "w" ? want_live : want_small))
          << name << (local ? " (local)" : " (shard)");
  }
}

// The thread copies with a plain memcpy: a strided host tensor is refused, naming it.
TEST(CheckpointWriter, AStagedSnapshotOfHostStateMustBeContiguous) {
  TempDir dir;
  CheckpointWriter writer;
  Generator gen(1);
  Tensor t = ops::transpose(randn({4, 3}, gen), 0, 1);
  try {
    writer.save_local(dir.file("rank_0"), 1, {{"w", t}}, {}, {},
                      CheckpointWriter::Snapshot::staged);
    FAIL() << "a strided tensor was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e.what(), {"copied by the writer thread", "'w'", "f32[3, 4]"}))
        << e.what();
  }
}

// A staging whose copies fail is not written, and the failure is reported, naming the step.
TEST(CheckpointWriter, AStagingThatFailsIsReportedAndNotWritten) {
  TempDir dir;
  ShardJob job;
  job.run_dir = dir.path();
  job.step = 6;
  job.nonce = checkpoint_nonce(6);
  job.pieces = replicated_pieces(state_at(6).model, false, 0, 1);
  CheckpointWriter writer;
  writer.save_shard(std::move(job), CheckpointWriter::Snapshot::staged,
                    [] { throw Error("the device lost the copy"); });
  try {
    writer.wait();
    FAIL() << "wait() did not report the failed staging";
  } catch (const Error& e) {
    EXPECT_TRUE(mentions(e.what(), {"background save of step 6 failed", "lost the copy"}));
  }
  EXPECT_TRUE(list_checkpoints(dir.path()).empty());
}

}  // namespace
}  // namespace tessera::nn
