#pragma once
// The OpenAI-compatible request and response bodies of `tessera serve`: /v1/completions and
// /v1/chat/completions, parsed and checked here so that every bad request becomes an ApiError
// (a 4xx status and a message naming the field) and never reaches the engine.
//
// Accepted fields: prompt (a string) or messages, max_tokens, temperature, top_p, top_k and
// ignore_eos (vLLM's extensions), stop (a string or a list of up to 4), seed, stream, model, user.
// Fields whose non-default value Tessera cannot honour (n > 1, logprobs, echo, best_of > 1,
// tools, nonzero presence/frequency penalties, logit_bias) are refused with a 400 naming them,
// never ignored; fields nobody defined are ignored, as OpenAI does.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/nn/generate.h"

namespace tessera::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // {"error": {"message", "type", "param", "code"}}, OpenAI's shape.
  std::string body() const;

 private:
  int status_;
  std::string param_;
};

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

struct CompletionRequest {
  bool chat = false;
  std::string prompt;                 // /v1/completions
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::optional<int64_t>
      max_tokens;                // absent: 16 for completions, the rest of the context for chat
  nn::SamplingOptions sampling;  // OpenAI's defaults: temperature 1, top_p 1, no top_k
  std::vector<std::string> stop;
  bool ignore_eos = false;  // vLLM's extension: generate past the end-of-text token
  bool stream = false;
  std::string model;
};

// Parses a request body; throws ApiError(400) for malformed JSON, a wrong type or range, or a
// field that cannot apply.
CompletionRequest parse_completion_request(const std::string& body, bool chat);

// The token limit of a request with `prompt_tokens` tokens in a context of `context`: its
// max_tokens, or the default; throws ApiError(400) when the two do not fit together.
int64_t completion_budget(const CompletionRequest& request, int64_t prompt_tokens, int64_t context);

// Response bodies. `id` is "cmpl-N" / "chatcmpl-N"; finish_reason "stop" or "length".
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
std::string completion_response(const CompletionRequest& request, const std::string& id,
                                int64_t created, const std::string& text,
                                const std::string& finish_reason, const Usage& usage);
// One server-sent event ("data: {...}\n\n") carrying a piece of text (the first chunk of a chat
// also carries the assistant role); finish_reason empty until the last chunk.
std::string stream_chunk(const CompletionRequest& request, const std::string& id, int64_t created,
                         const std::string& text, const std::string& finish_reason, bool first);
inline constexpr const char* kStreamDone = "data: [DONE]\n\n";

}  // namespace tessera::serve
