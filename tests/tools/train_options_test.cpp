// The training options: each bad value, and each option set where nothing reads it, refused in
// one line naming the option, before the run starts.

#include "support/error_of.h"
#include "tessera/core/threads.h"
#include "tessera/cuda/cuda.h"
#include "tessera/train/trainer.h"
#include "tools/tools_test_util.h"

namespace tessera::cli::testing {
namespace {

TEST(Trainer, OptionErrorsNameTheField) {
  ScratchDir dir;
  TrainOptions o = tiny_options(dir, "run");
  o.batch_size = 0;
  EXPECT_THROW(o.validate(), Error);
  o = tiny_options(dir, "run");
  o.seq_len = 64;  // block_size is 32
  try {
    o.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq-len"), std::string::npos) << e.what();
  }
  EXPECT_THROW(o.update_from_json({{"no_such_option", 1}}), Error);
  EXPECT_THROW(o.update_from_json({{"lr", "fast"}}), Error);
  EXPECT_THROW(o.update_from_json({{"model", {{"n_layers", 2}}}}), Error) << "typo in a model key";
}

// Options a run reads only late, or only under another optimizer or schedule, are checked
// before it starts: --sample-temperature -1 trained to the end and then failed at the sample,
// and --momentum -1, --decay-fraction nan under the defaults (AdamW, cosine) were never read.
TEST(Trainer, OptionsReadLateOrElsewhereAreCheckedBeforeTheRun) {
  ScratchDir dir;
  using tessera::testing::error_of;
  auto says = [&](void (*set)(TrainOptions&), const std::string& what) {
    TrainOptions o = tiny_options(dir, "run");
    set(o);
    EXPECT_NE(error_of([&] { o.validate(); }).find(what), std::string::npos) << what;
  };
  says([](TrainOptions& o) { o.sample_temperature = -1; },
       "--sample-temperature must be finite and >= 0 (0: greedy), got -1");
  says([](TrainOptions& o) { o.sample_temperature = NAN; }, "--sample-temperature must be");
  says([](TrainOptions& o) { o.sample_top_k = -1; }, "--sample-top-k must be >= 0");
  says([](TrainOptions& o) { o.momentum = -1; }, "--momentum (sgd) must be in [0, 1), got -1");
  says([](TrainOptions& o) { o.momentum = 1; }, "--momentum (sgd) must be in [0, 1), got 1");
  says([](TrainOptions& o) { o.decay_fraction = NAN; }, "--decay-fraction (wsd) must be in (0, 1]");
  says([](TrainOptions& o) { o.decay_fraction = 2; }, "--decay-fraction (wsd) must be in (0, 1]");
  says([](TrainOptions& o) { o.lr = INFINITY; },
       "--lr must be positive and within float32's range, got inf");
  says([](TrainOptions& o) { o.lr = 1e300; },  // inf in the float32 optimizer: NaN norms
       "--lr must be positive and within float32's range, got 1e+300");
  // JSON holds no inf or NaN: these trained until the first save failed to record them.
  says([](TrainOptions& o) { o.peak_gflops = INFINITY; },
       "--peak-gflops must be a finite number, got inf");
  says([](TrainOptions& o) { o.grad_clip = NAN; }, "--grad-clip must be a finite number, got nan");
  says([](TrainOptions& o) { o.loss_scale_init = 1e300; },
       "--loss-scale-init must be in [1, 2^127], got 1e+300");
  TrainOptions o = tiny_options(dir, "run");
  o.precision = "fp16";
  o.loss_scale_init = 0x1p127;  // the end of the range
  o.sample_tokens = 4;
  o.sample_temperature = 0;
  o.optimizer = "sgd";
  o.momentum = 0;
  o.validate();
}

// Each option that only some settings read, set where none reads it: refused naming the
// option, what it needs and what the run has. Set where it is read, each passes.
TEST(Trainer, OptionsNothingReadsAreRefused) {
  ScratchDir dir;
  using tessera::testing::error_of;
  struct Case {
    void (*set)(TrainOptions&);
    const char* error;
  };
  const Case cases[] = {
      {[](TrainOptions& o) { o.momentum = 0.5; },
       "--momentum applies only with --optimizer sgd; this run has --optimizer adamw"},
      {[](TrainOptions& o) { o.optimizer = "sgd", o.beta1 = 0.5; },
       "--beta1 applies only with --optimizer adamw; this run has --optimizer sgd"},
      {[](TrainOptions& o) { o.optimizer = "sgd", o.beta2 = 0.5; }, "--beta2 applies only"},
      {[](TrainOptions& o) { o.optimizer = "sgd", o.eps = 1e-6; }, "--eps applies only"},
      {[](TrainOptions& o) { o.decay_fraction = 0.5; },
       "--decay-fraction applies only with --lr-schedule wsd; this run has --lr-schedule cosine"},
      {[](TrainOptions& o) { o.lr_schedule_kind = "constant", o.min_lr_ratio = 0.5; },
       "--min-lr-ratio applies only with --lr-schedule cosine or wsd"},
      {[](TrainOptions& o) { o.loss_scale_init = 1024; },
       "--loss-scale-init applies only with --precision fp16; this run has --precision fp32"},
      {[](TrainOptions& o) { o.precision = "bf16", o.loss_scale_window = 10; },
       "--loss-scale-window applies only with --precision fp16; this run has --precision bf16"},
      {[](TrainOptions& o) { o.val_data.clear(); },  // tiny_options sets eval_every 4
       "--eval-every applies only with --val-data; this run has no --val-data"},
      {[](TrainOptions& o) { o.val_data.clear(), o.eval_every = 0, o.eval_batches = 3; },
       "--eval-batches applies only with --val-data"},
      {[](TrainOptions& o) { o.sample_prompt = "Tensor"; },
       "--sample-prompt applies only with --sample-tokens > 0; this run has --sample-tokens 0"},
      {[](TrainOptions& o) { o.sample_temperature = 0; }, "--sample-temperature applies only"},
      {[](TrainOptions& o) { o.sample_top_k = 0; }, "--sample-top-k applies only"},
      {[](TrainOptions& o) { o.sample_tokens = 8, o.sample_temperature = 0, o.sample_top_k = 5; },
       "--sample-top-k applies only with --sample-tokens > 0 and --sample-temperature > 0; this "
       "run has --sample-temperature 0 (greedy)"},
      {[](TrainOptions& o) { o.num_samples = 2; }, "--num-samples applies only"},
  };
  for (const Case& c : cases) {
    TrainOptions o = tiny_options(dir, "run");
    c.set(o);
    EXPECT_NE(error_of([&] { o.validate(); }).find(c.error), std::string::npos) << c.error;
  }
  // Where they are read.
  TrainOptions o = tiny_options(dir, "run");
  o.optimizer = "sgd";
  o.momentum = 0.5;
  o.lr_schedule_kind = "wsd";
  o.decay_fraction = 0.5;
  o.min_lr_ratio = 0.5;
  o.precision = "fp16";
  o.loss_scale_init = 1024;
  o.loss_scale_window = 10;
  o.eval_batches = 3;
  o.sample_tokens = 4;
  o.sample_prompt = "Tensor";
  o.sample_top_k = 0;
  o.num_samples = 2;
  o.validate();
  o = tiny_options(dir, "run");
  o.beta1 = 0.8, o.beta2 = 0.99, o.eps = 1e-6;
  o.validate();
  // A run's config.json carries every field at its default: it passes as is.
  TrainOptions from_file;
  from_file.update_from_json(TrainOptions().to_config_file());
  from_file.train_data = "x.bin";
  from_file.validate();
}

TEST(Trainer, ThreadsBeyondAnyMachineAreRefused) {
  ScratchDir dir;
  TrainOptions o = tiny_options(dir, "run");
  o.threads = 100000;  // libgomp crashed (SIGSEGV) creating these
  const std::string train = tessera::testing::error_of([&] { o.validate(); });
  EXPECT_NE(train.find("--threads must be in [0, 1024] (0: all cores), got 100000"),
            std::string::npos)
      << train;
  const std::string core = tessera::testing::error_of([] { set_num_threads(1025); });
  EXPECT_NE(core.find("set_num_threads: expected 1 to 1024 threads, got 1025"), std::string::npos)
      << core;
}

TEST(Trainer, RecomputeFlagsAreChecked) {
  ScratchDir dir;
  using tessera::testing::error_of;
  TrainOptions o = tiny_options(dir, "run");
  o.recompute = "some";
  EXPECT_NE(error_of([&] { o.validate(); }).find("--recompute must be"), std::string::npos);
  o.recompute = "selective";
  o.recompute_layers = 1;
  EXPECT_NE(error_of([&] { o.validate(); }).find("--recompute-layers 1"), std::string::npos);
}

TEST(Trainer, GradCompressionFlagsAreChecked) {
  ScratchDir dir;
  using tessera::testing::error_of;
  TrainOptions o = tiny_options(dir, "run");
  o.grad_compression = "fp8";
  EXPECT_NE(error_of([&] { o.validate(); }).find("is not a gradient compression"),
            std::string::npos);
  o.grad_compression = "powersgd:0";
  EXPECT_NE(error_of([&] { o.validate(); }).find("rank must be an integer in 1..1024"),
            std::string::npos);
  o.grad_compression = "bf16";
  o.compression_warmup = 5;
  EXPECT_NE(error_of([&] { o.validate(); }).find("--compression-warmup 5 counts the uncompressed"),
            std::string::npos);
  o.grad_compression = "powersgd:4";
  o.validate();
  EXPECT_EQ(o.grad_compression_policy().rank, 4);
  EXPECT_EQ(o.grad_compression_policy().warmup_steps, 5);
  // One process has no reduction to compress.
  EXPECT_NE(error_of([&] { Trainer t(o); }).find("--grad-compression applies to a parallel"),
            std::string::npos);
}

// --offload: its values, and the layouts it cannot apply to, each refused in one line naming
// why (the runs that apply are in tests/parallel/offload_test.cpp and train_parallel_test.sh).
TEST(Trainer, OffloadFlagIsChecked) {
  ScratchDir dir;
  using tessera::testing::error_of;
  TrainOptions o = tiny_options(dir, "run");
  o.offload = "disk";
  EXPECT_NE(error_of([&] { o.validate(); }).find("--offload must be none or optimizer, got 'disk'"),
            std::string::npos);
  o.offload = "optimizer";
  o.optimizer = "sgd";
  EXPECT_NE(error_of([&] { o.validate(); }).find("needs --optimizer adamw"), std::string::npos);
  o.optimizer = "adamw";
  o.precision = "bf16";
  EXPECT_NE(error_of([&] { Trainer t(o); }).find("on cpu it is in host memory already"),
            std::string::npos);
  cuda::use_simulated_device();  // as cuda_train_test.cpp: Device::cuda() on the simulator
  o.device = "cuda";
  o.precision = "fp32";
  const std::string fp32 = error_of([&] { Trainer t(o); });
  EXPECT_NE(fp32.find("optimizer offload needs bf16 or fp16"), std::string::npos) << fp32;
  // ZeRO 0 at dp > 1 is refused under mpiexec (train_parallel_test.sh); one GPU runs it.
}

// --checkpoint-snapshot and --checkpoint-chunk-mb: each mode where it cannot apply, and a
// chunk without a GPU stream to size, refused in one line naming why (the runs that apply are
// in train_parallel_test.sh).
TEST(Trainer, SnapshotFlagsAreChecked) {
  ScratchDir dir;
  using tessera::testing::error_of;
  TrainOptions o = tiny_options(dir, "run");
  o.checkpoint_snapshot = "mmap";
  EXPECT_NE(error_of([&] { o.validate(); }).find("must be auto, copy, stream or staged"),
            std::string::npos);
  o.checkpoint_snapshot = "staged";
  o.validate();  // on the CPU the writer thread copies the state
  o.checkpoint_snapshot = "stream";
  o.checkpoint_chunk_mb = 64;  // the size used on a GPU when none is given; still refused here
  EXPECT_NE(error_of([&] { o.validate(); })
                .find("needs --checkpoint-snapshot stream and a GPU device (--checkpoint-snapshot "
                      "is stream, --device cpu)"),
            std::string::npos);
  o.device = "cuda";
  o.checkpoint_snapshot = "staged";
  EXPECT_NE(error_of([&] { o.validate(); }).find("--checkpoint-snapshot is staged"),
            std::string::npos);
  o.checkpoint_snapshot = "stream";
  o.checkpoint_chunk_mb = 1e-7;  // under 8 bytes
  EXPECT_NE(
      error_of([&] { o.validate(); }).find("between 8 bytes and 1 TiB (0: 64 MiB), got 1e-07"),
      std::string::npos);
  o.checkpoint_chunk_mb = 0.5;
  o.validate();  // a GPU stream's chunk applies
  EXPECT_EQ(o.checkpoint_chunk_bytes(), 524288);
  o.checkpoint_chunk_mb = 0;
  EXPECT_EQ(o.checkpoint_chunk_bytes(), int64_t(64) << 20);
}

}  // namespace
}  // namespace tessera::cli::testing
