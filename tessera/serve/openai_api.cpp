#include "tessera/serve/openai_api.h"

#include <charconv>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "tessera/core/json_depth.h"

namespace tessera::serve {

using nlohmann::json;

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, param);
}

// The body's text as JSON, invalid UTF-8 replaced rather than thrown.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string shortest(double x) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
}

int64_t integer_field(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json& v = j.at(name);
  if (!v.is_number_integer())
    throw bad(name, std::string("'") + name + "' must be an integer, got " + dump(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw bad(name, std::string("'") + name + "' is out of range: " + dump(v));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}

double number_field(const json& j, const char* name, double lo, double hi, bool open_lo) {
  const json& v = j.at(name);
  if (!v.is_number())
    throw bad(name, std::string("'") + name + "' must be a number, got " + dump(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (open_lo && x == lo))
    throw bad(name, std::string("'") + name + "' must be in " + (open_lo ? "(" : "[") +
                        shortest(lo) + ", " + shortest(hi) + "], got " + dump(v));
  return x;
}

// A field Tessera cannot honour is refused unless it holds its default (or null).
void refuse_unless(const json& j, const char* name, const json& allowed, const char* why) {
  if (!j.contains(name) || j.at(name).is_null() || j.at(name) == allowed) return;
  throw bad(name,
            std::string("'") + name + "' = " + dump(j.at(name)) + " is not supported: " + why);
}

std::vector<ChatMessage> parse_messages(const json& v) {
  if (!v.is_array() || v.empty())
    throw bad("messages", "'messages' must be a non-empty array of {role, content}");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad(at, at + " must be an object with a string 'role'");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      throw bad(at + ".role", at + ".role must be system, user or assistant, got '" + role + "'");
    if (!m.contains("content") || !m["content"].is_string())
      throw bad(at + ".content",
                at + ".content must be a string (content parts are not supported)");
    out.push_back({role, m["content"].get<std::string>()});
  }
  return out;
}

std::vector<std::string> parse_stop(const json& v) {
  std::vector<std::string> stop;
  if (v.is_null()) return stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else if (v.is_array() && v.size() <= 4) {
    for (const json& s : v) {
      if (!s.is_string()) throw bad("stop", "'stop' entries must be strings, got " + dump(s));
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw bad("stop", "'stop' must be a string or a list of up to 4 strings, got " + dump(v));
  }
  for (const std::string& s : stop)
    if (s.empty()) throw bad("stop", "'stop' strings must not be empty");
  return stop;
}

}  // namespace

std::string ApiError::body() const {
  const char* type = status_ == 404   ? "not_found_error"
                     : status_ == 503 ? "service_unavailable"
                     : status_ >= 500 ? "server_error"
                                      : "invalid_request_error";
  return dump({{"error",
                {{"message", what()},
                 {"type", type},
                 {"param", param_.empty() ? json(nullptr) : json(param_)},
                 {"code", nullptr}}}});
}

CompletionRequest parse_completion_request(const std::string& body, bool chat) {
  // Printing a value in a refusal recurses once per level: a 1 MiB body of '[' overflowed the
  // server thread's stack. A real request nests 4 levels (messages, a message, content parts).
  if (const std::optional<size_t> at = json_too_deep_at(body, kMaxJsonDepth))
    throw bad("", "the request body nests arrays and objects deeper than " +
                      std::to_string(kMaxJsonDepth) + " levels (at byte offset " +
                      std::to_string(*at) + ")");
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad("", "the request body is not valid JSON");
  if (!j.is_object()) throw bad("", "the request body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  if (chat) {
    if (!j.contains("messages")) throw bad("messages", "'messages' is required");
    r.messages = parse_messages(j["messages"]);
  } else {
    if (!j.contains("prompt")) throw bad("prompt", "'prompt' is required");
    if (!j["prompt"].is_string())
      throw bad("prompt",
                "'prompt' must be a string (lists of prompts and token ids are not "
                "supported), got a " +
                    std::string(j["prompt"].type_name()));
    r.prompt = j["prompt"].get<std::string>();
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (j.contains("max_tokens") && !j["max_tokens"].is_null())
    r.max_tokens = integer_field(j, "max_tokens", 1, kMax);
  if (chat && j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()) {
    const int64_t m = integer_field(j, "max_completion_tokens", 1, kMax);
    if (r.max_tokens && *r.max_tokens != m)
      throw bad("max_completion_tokens", "'max_tokens' and 'max_completion_tokens' disagree");
    r.max_tokens = m;
  }
  if (j.contains("temperature") && !j["temperature"].is_null())
    r.sampling.temperature = number_field(j, "temperature", 0.0, 2.0, false);
  if (j.contains("top_p") && !j["top_p"].is_null())
    r.sampling.top_p = number_field(j, "top_p", 0.0, 1.0, true);
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const int64_t k = integer_field(j, "top_k", -1, kMax);
    r.sampling.top_k = k < 0 ? 0 : k;  // vLLM's -1: every token
  }
  if (j.contains("seed") && !j["seed"].is_null())
    r.sampling.seed = uint64_t(integer_field(j, "seed", std::numeric_limits<int64_t>::min(), kMax));
  if (j.contains("stop")) r.stop = parse_stop(j["stop"]);
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean())
      throw bad("ignore_eos", "'ignore_eos' must be true or false, got " + dump(j["ignore_eos"]));
    r.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean())
      throw bad("stream", "'stream' must be true or false, got " + dump(j["stream"]));
    r.stream = j["stream"].get<bool>();
  }
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw bad("model", "'model' must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null())
    throw bad("stream_options", "'stream_options' is not supported");
  refuse_unless(j, "n", 1, "one choice per request");
  refuse_unless(j, "best_of", 1, "one choice per request");
  refuse_unless(j, "echo", false, "the prompt is not echoed");
  refuse_unless(j, "logprobs", chat ? json(false) : json(0), "log-probabilities are not returned");
  refuse_unless(j, "top_logprobs", 0, "log-probabilities are not returned");
  refuse_unless(j, "presence_penalty", 0, "no penalties are applied");
  refuse_unless(j, "frequency_penalty", 0, "no penalties are applied");
  refuse_unless(j, "logit_bias", json::object(), "no logit bias is applied");
  refuse_unless(j, "suffix", "", "no insertion");
  refuse_unless(j, "tools", json::array(), "no tool calls");
  refuse_unless(j, "tool_choice", "none", "no tool calls");
  refuse_unless(j, "response_format", json{{"type", "text"}}, "plain text only");
  return r;
}

int64_t completion_budget(const CompletionRequest& request, int64_t prompt_tokens,
                          int64_t context) {
  if (prompt_tokens >= context)
    throw bad(request.chat ? "messages" : "prompt",
              "This model's maximum context length is " + std::to_string(context) +
                  " tokens; the prompt has " + std::to_string(prompt_tokens) +
                  ", leaving no room to generate");
  const int64_t room = context - prompt_tokens;
  if (!request.max_tokens) return request.chat ? room : std::min<int64_t>(16, room);
  if (*request.max_tokens > room)
    throw bad("max_tokens", "This model's maximum context length is " + std::to_string(context) +
                                " tokens. However, you requested " + std::to_string(prompt_tokens) +
                                " + " + std::to_string(*request.max_tokens) + " tokens (" +
                                std::to_string(prompt_tokens) + " in the prompt, " +
                                std::to_string(*request.max_tokens) + " for the completion)");
  return *request.max_tokens;
}

std::string completion_response(const CompletionRequest& request, const std::string& id,
                                int64_t created, const std::string& text,
                                const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (request.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return dump({{"id", id},
               {"object", request.chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", request.model},
               {"choices", json::array({choice})},
               {"usage",
                {{"prompt_tokens", usage.prompt_tokens},
                 {"completion_tokens", usage.completion_tokens},
                 {"total_tokens", usage.prompt_tokens + usage.completion_tokens}}}});
}

std::string stream_chunk(const CompletionRequest& request, const std::string& id, int64_t created,
                         const std::string& text, const std::string& finish_reason, bool first) {
  json choice = {{"index", 0},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)},
                 {"logprobs", nullptr}};
  if (request.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return "data: " +
         dump({{"id", id},
               {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
               {"created", created},
               {"model", request.model},
               {"choices", json::array({choice})}}) +
         "\n\n";
}

}  // namespace tessera::serve
