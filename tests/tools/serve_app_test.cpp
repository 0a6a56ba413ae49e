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

}  // namespace
}  // namespace tessera::cli
