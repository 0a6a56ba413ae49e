#include "cli/serve_model.h"

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "cli/tp_group.h"
#include "tessera/core/error.h"
#include "tessera/cuda/cuda.h"
#include "tessera/nn/module.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/device.h"

namespace tessera::cli {

void check_serve_flags(const ServeFlags& f) {
  TESSERA_CHECK(f.port >= 0 && f.port <= 65535, "serve: --port must be in [0, 65535], got ",
                f.port);
  TESSERA_CHECK(f.threads >= 0 && f.threads <= kMaxThreads, "serve: --threads must be in [0, ",
                kMaxThreads, "] (0: all), got ", f.threads);
  TESSERA_CHECK(f.block_size >= 1, "serve: --block-size must be positive, got ", f.block_size);
  TESSERA_CHECK(f.kv_blocks >= 0,
                "serve: --kv-blocks must be >= 0 (0: enough for --max-running full contexts), got ",
                f.kv_blocks);
  // A request holds one of httplib's threads while it waits or runs, and the pool is sized for
  // the running and as many waiting (ServeApp::listen: 2 x --max-running + 4): 1,024 running
  // is 2,052 threads. vLLM's default is 256.
  TESSERA_CHECK(f.max_running >= 1 && f.max_running <= kMaxRunning,
                "serve: --max-running must be in [1, ", kMaxRunning, "], got ", f.max_running);
  TESSERA_CHECK(f.max_batch_tokens >= 1, "serve: --max-batch-tokens must be positive, got ",
                f.max_batch_tokens);
  TESSERA_CHECK(f.max_body_bytes >= 1, "serve: --max-body-bytes must be positive, got ",
                f.max_body_bytes);
  TESSERA_CHECK(f.batching == "continuous" || f.batching == "static",
                "serve: --batching must be continuous or static, got '", f.batching, "'");
  TESSERA_CHECK(f.device == "cpu" || f.device == "cuda" || f.device == "cuda-sim",
                "serve: --device must be cpu, cuda or cuda-sim, got '", f.device, "'");
  TESSERA_CHECK(f.tp == 1 || f.device == "cpu", "serve: --device ", f.device, " with --tp ", f.tp,
                " is not supported (tensor-parallel serving runs on the CPU); use one of them");
}

ServedModel load_served_model(const ServeFlags& f) {
  check_serve_flags(f);  // ServeApp checked them on rank 0 before listening; followers here
  if (f.threads > 0) set_num_threads(f.threads);
  if (f.device == "cuda-sim") cuda::use_simulated_device();
  ServedModel m;
  m.tp = make_tp_group(f.tp, "serve");
  m.loaded = std::make_unique<train::LoadedModel>(train::load_model(f.model, 0, m.tp));
  if (f.int8_activations) use_int8_activations(*m.loaded->model, f.model, "serve");
  if (f.device != "cpu")
    nn::move_to_device(m.loaded->model->state_dict(),
                       train::open_train_device(f.device, 0, "serve"));
  const int64_t context = m.loaded->config.block_size;
  TESSERA_CHECK(f.block_size <= context, "serve: --block-size ", f.block_size,
                " is more than the model's context of ", context, " positions");
  const int64_t per_sequence = (context + f.block_size - 1) / f.block_size;
  m.options = {.num_blocks = f.kv_blocks > 0 ? f.kv_blocks : f.max_running * per_sequence,
               .block_size = f.block_size,
               .limits = {.max_batch_tokens = f.max_batch_tokens,
                          .max_running = f.max_running,
                          .chunked_prefill = !f.no_chunked_prefill,
                          .static_batching = f.batching == "static"}};
  if (m.tp && m.tp->group()->rank() == 0) {
    std::shared_ptr<parallel::Communicator> group = m.tp->group();
    m.followers = std::make_shared<serve::BroadcastPlanChannel>(
        [group](const Tensor& t) { group->broadcast(t, 0); });
  }
  return m;
}

void follow_serve(const ServeFlags& f) {
  StopSignals signals;  // the leader decides when to stop; a signal here must not kill the rank
  ServedModel m = load_served_model(f);
  TESSERA_CHECK(m.tp && m.tp->group()->rank() != 0, "serve: follow_serve runs on ranks 1.. of --tp");
  std::shared_ptr<parallel::Communicator> group = m.tp->group();
  serve::BroadcastPlanChannel leader([group](const Tensor& t) { group->broadcast(t, 0); });
  serve::Engine engine(*m.loaded->model, m.options);
  engine.follow(leader);
}

}  // namespace tessera::cli
