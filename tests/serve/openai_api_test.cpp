// The OpenAI request layer: what parses, what is refused and how the refusal reads; the budget
// against the context; response shapes; chat templates; the Prometheus exposition.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/serve/chat_template.h"
#include "tessera/serve/metrics.h"
#include "tessera/serve/openai_api.h"

namespace tessera::serve {
namespace {

using nlohmann::json;

void expect_refused(const std::string& body, bool chat, const std::string& says,
                    const std::string& param) {
  try {
    parse_completion_request(body, chat);
    ADD_FAILURE() << "accepted: " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    EXPECT_EQ(e.param(), param) << body;
    const json j = json::parse(e.body());
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["message"], e.what());
  }
}

TEST(OpenAiApi, ParsesACompletionRequest) {
  const CompletionRequest r = parse_completion_request(
      R"({"prompt": "Hello", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": -1,
          "stop": ["\n", "END"], "seed": 42, "stream": true, "model": "m", "user": "u",
          "n": 1, "echo": false, "logprobs": null, "whatever": {"x": 1}})",
      false);
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.model, "m");
  const CompletionRequest d = parse_completion_request(R"({"prompt": ""})", false);
  EXPECT_FALSE(d.max_tokens.has_value());
  EXPECT_EQ(d.sampling.temperature, 1.0);  // OpenAI's default
  EXPECT_FALSE(d.stream);
}

TEST(OpenAiApi, ParsesAChatRequest) {
  const CompletionRequest r = parse_completion_request(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Hi"}], "max_completion_tokens": 5})",
      true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hi");
  EXPECT_EQ(r.max_tokens, 5);
}

TEST(OpenAiApi, RefusesBadBodiesByName) {
  expect_refused("{\"prompt\": ", false, "not valid JSON", "");
  expect_refused("[1, 2]", false, "must be a JSON object", "");
  expect_refused("{}", false, "'prompt' is required", "prompt");
  expect_refused(R"({"prompt": ["a", "b"]})", false, "lists of prompts", "prompt");
  expect_refused(R"({"prompt": "a", "max_tokens": "10"})", false, "must be an integer",
                 "max_tokens");
  expect_refused(R"({"prompt": "a", "max_tokens": 1e12})", false, "must be an integer",
                 "max_tokens");
  expect_refused(R"({"prompt": "a", "max_tokens": 0})", false, "must be in [1, ", "max_tokens");
  expect_refused(R"({"prompt": "a", "max_tokens": 99999999999999999999})", false, "", "max_tokens");
  expect_refused(R"({"prompt": "a", "temperature": 3})", false, "'temperature' must be in [0, 2]",
                 "temperature");
  expect_refused(R"({"prompt": "a", "temperature": true})", false, "must be a number",
                 "temperature");
  expect_refused(R"({"prompt": "a", "top_p": 0})", false, "'top_p' must be in (0, 1]", "top_p");
  expect_refused(R"({"prompt": "a", "stop": 5})", false, "'stop' must be a string or a list",
                 "stop");
  expect_refused(R"({"prompt": "a", "stop": ["a","b","c","d","e"]})", false, "up to 4", "stop");
  expect_refused(R"({"prompt": "a", "stop": [""]})", false, "must not be empty", "stop");
  expect_refused(R"({"prompt": "a", "stream": "yes"})", false, "'stream' must be true or false",
                 "stream");
  expect_refused(R"({"prompt": "a", "ignore_eos": 1})", false, "'ignore_eos' must be true or false",
                 "ignore_eos");
  expect_refused(R"({"prompt": "a", "n": 2})", false, "'n' = 2 is not supported", "n");
  expect_refused(R"({"prompt": "a", "logprobs": 3})", false, "log-probabilities", "logprobs");
  expect_refused(R"({"prompt": "a", "presence_penalty": 0.5})", false, "no penalties",
                 "presence_penalty");
  expect_refused(R"({"prompt": "a", "seed": "x"})", false, "must be an integer", "seed");
  expect_refused(R"({"messages": []})", true, "non-empty array", "messages");
  expect_refused(R"({"messages": [{"role": "robot", "content": "x"}]})", true,
                 "messages[0].role must be system, user or assistant", "messages[0].role");
  expect_refused(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", true,
                 "content parts", "messages[0].content");
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                     "max_completion_tokens": 4})",
                 true, "disagree", "max_completion_tokens");
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", true,
                 "no tool calls", "tools");
}

// A request body is network input: a value nested past any real request, in a field whose
// refusal prints it, recursed once per level in the printer and overflowed the server thread's
// stack (the default 1 MiB body holds 500,000 levels). It is refused by its depth, before parsing.
TEST(OpenAiApi, RefusesBodiesNestedPastAnyRealRequest) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string head = R"({"prompt": "a", "stream": )";
  // The body's own brace is level 1, so the 64th '[' (byte offset head.size() + 63) opens 65.
  expect_refused(head + deep + "}", false,
                 "nests arrays and objects deeper than 64 levels (at byte offset " +
                     std::to_string(head.size() + 63) + ")",
                 "");
  for (const char* field : {"n", "user", "messages"})
    expect_refused(std::string(R"({"prompt": "a", ")") + field + "\": " + deep + "}", false,
                   "deeper than 64 levels", "");
  // Every real request, a chat with a list of content parts included, nests a few levels.
  const CompletionRequest r = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "x"}], "whatever": [[[[{"a": [1]}]]]]})", true);
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(OpenAiApi, BudgetFitsTheContext) {
  CompletionRequest r = parse_completion_request(R"({"prompt": "a"})", false);
  EXPECT_EQ(completion_budget(r, 10, 64), 16);  // the default
  EXPECT_EQ(completion_budget(r, 60, 64), 4);   // the default, cut to the context
  r.max_tokens = 54;
  EXPECT_EQ(completion_budget(r, 10, 64), 54);
  r.max_tokens = 55;
  try {
    completion_budget(r, 10, 64);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(std::string(e.what()),
              "This model's maximum context length is 64 tokens. However, you requested 10 + 55 "
              "tokens (10 in the prompt, 55 for the completion)");
  }
  EXPECT_THROW(completion_budget(r, 64, 64), ApiError);
  CompletionRequest chat =
      parse_completion_request(R"({"messages": [{"role": "user", "content": "x"}]})", true);
  EXPECT_EQ(completion_budget(chat, 10, 64), 54);  // chat: the rest of the context
}

TEST(OpenAiApi, ResponseShapes) {
  CompletionRequest r = parse_completion_request(R"({"prompt": "a", "model": "m"})", false);
  json j = json::parse(completion_response(r, "cmpl-1", 5, "xyz", "length", {3, 4}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "xyz");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  const std::string chunk = stream_chunk(r, "cmpl-1", 5, "x", "", true);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  EXPECT_TRUE(json::parse(chunk.substr(6))["choices"][0]["finish_reason"].is_null());
  CompletionRequest c = parse_completion_request(R"({"messages": [{"role": "user",
                                                    "content": "x"}]})",
                                                 true);
  j = json::parse(completion_response(c, "chatcmpl-1", 5, "hi", "stop", {3, 1}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hi");
  j = json::parse(stream_chunk(c, "chatcmpl-1", 5, "h", "", true).substr(6));
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "h");
}

TEST(ChatTemplates, WriteTheConversationAndStopAtTheTurnEnd) {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U"}};
  const ChatPrompt chatml = apply_chat_template(ChatTemplate::chatml, m);
  EXPECT_EQ(chatml.text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(chatml.stops, (std::vector<std::string>{"<|im_end|>"}));
  const ChatPrompt llama = apply_chat_template(ChatTemplate::llama3, m);
  EXPECT_EQ(llama.text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}"),
            ChatTemplate::chatml);
  EXPECT_EQ(detect_chat_template("<|start_header_id|>' + message['role']"), ChatTemplate::llama3);
  EXPECT_FALSE(detect_chat_template("{{ bos_token }}{{ messages }}").has_value());
  EXPECT_FALSE(parse_chat_template("vicuna").has_value());
}

TEST(Metrics, RenderPrometheusText) {
  ServerMetrics m;
  m.record_request(0.03, 0.5, 11, FinishReason::length);
  m.record_request(-1, 0.2, 0, FinishReason::cancelled);
  EngineStats stats;
  stats.running = 2;
  stats.waiting = 3;
  stats.kv_blocks_used = 5;
  stats.kv_blocks_total = 20;
  stats.prompt_tokens = 40;
  stats.generated_tokens = 11;
  const std::string text = m.render(stats);
  for (const char* line : {"# TYPE tessera:time_to_first_token_seconds histogram",
                           "tessera:time_to_first_token_seconds_bucket{le=\"0.02\"} 0",
                           "tessera:time_to_first_token_seconds_bucket{le=\"0.04\"} 1",
                           "tessera:time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
                           "tessera:time_to_first_token_seconds_count 1",
                           "tessera:time_per_output_token_seconds_sum 0.047",  // (0.5 - 0.03) / 10
                           "tessera:e2e_request_latency_seconds_count 2",
                           "tessera:prompt_tokens_total 40", "tessera:generation_tokens_total 11",
                           "tessera:request_success_total{finished_reason=\"cancelled\"} 1",
                           "tessera:request_success_total{finished_reason=\"length\"} 1",
                           "tessera:num_requests_running 2", "tessera:num_requests_waiting 3",
                           "tessera:kv_cache_usage_perc 0.25"})
    EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << text;
}

}  // namespace
}  // namespace tessera::serve
