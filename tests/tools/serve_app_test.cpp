// `tessera serve` before its model is in: the server answers at once, /health and every API
// route say 503 in JSON, and a model that fails to load leaves it answering so.

#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/serve_app.h"
#include "tessera/core/error.h"

namespace tessera::cli {
namespace {

TEST(ServeApp, AnswersLoadingUntilTheModelIsIn) {
  ServeFlags flags;
  flags.model = "/nonexistent/run";
  flags.port = 0;
  ServeApp app(flags);
  const int port = app.listen();
  ASSERT_GT(port, 0);
  httplib::Client client("127.0.0.1", port);
  auto expect_loading = [&] {
    auto health = client.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 503);
    EXPECT_EQ(nlohmann::json::parse(health->body)["status"], "loading");
    auto completion = client.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
    ASSERT_TRUE(completion);
    EXPECT_EQ(completion->status, 503);
    EXPECT_EQ(nlohmann::json::parse(completion->body)["error"]["message"],
              "the model is still loading");
    auto metrics = client.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->status, 503);
  };
  expect_loading();
  try {
    app.load();
    ADD_FAILURE() << "a missing model loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run"), std::string::npos) << e.what();
  }
  expect_loading();
}

TEST(ServeApp, RefusesFlagsThatCannotApply) {
  ServeFlags flags;
  flags.model = "run";
  flags.tp = 2;
  EXPECT_THROW(ServeApp{flags}, Error);
  flags.tp = 1;
  flags.port = 70000;
  EXPECT_THROW(ServeApp{flags}, Error);
  flags.port = 0;
  flags.chat_template = "vicuna";
  EXPECT_THROW(ServeApp{flags}, Error);
}

// Sizes out of range are refused by name before the server listens. Before, --kv-blocks -5 and
// --threads -3 were taken as their defaults, --max-running 0 was refused as "PagedKVCache: the
// number of blocks must be positive", and --max-running 1000000000 asked the HTTP server for
// two billion threads.
TEST(ServeApp, RefusesSizesOutOfRangeByName) {
  auto refused = [](void (*set)(ServeFlags&), const std::string& says) {
    ServeFlags flags;
    flags.model = "run";
    flags.port = 0;
    set(flags);
    try {
      ServeApp app{flags};
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused([](ServeFlags& f) { f.kv_blocks = -5; }, "serve: --kv-blocks must be >= 0");
  refused([](ServeFlags& f) { f.threads = -3; },
          "serve: --threads must be in [0, 1024] (0: all), got -3");
  refused([](ServeFlags& f) { f.threads = 100000; },  // libgomp crashed creating them (SIGSEGV)
          "serve: --threads must be in [0, 1024] (0: all), got 100000");
  refused([](ServeFlags& f) { f.max_running = 0; }, "--max-running must be in [1, 1024], got 0");
  refused([](ServeFlags& f) { f.max_running = 1000000000; },
          "--max-running must be in [1, 1024], got 1000000000");
  refused([](ServeFlags& f) { f.max_batch_tokens = -1; }, "--max-batch-tokens must be positive");
  refused([](ServeFlags& f) { f.block_size = 0; }, "--block-size must be positive, got 0");
  refused([](ServeFlags& f) { f.batching = "dynamic"; }, "--batching must be continuous or static");
}

}  // namespace
}  // namespace tessera::cli
