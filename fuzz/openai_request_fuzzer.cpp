// Fuzzes what `tessera serve` does with a request body before the engine sees it
// (serve/openai_api.h): parse_completion_request, then the token budget, the chat template and
// the response bodies built from the request. The first byte picks the endpoint (odd: chat);
// the rest is the body. The body is network input, so the contract is the server's: a request
// parses or is refused with an ApiError of status 400 whose body is OpenAI's error object.
// Anything else escaping (a tessera::Error, nlohmann's type_error), a crash or a sanitizer
// report is a finding, as is a response body that is not one valid JSON document.

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/serve/chat_template.h"
#include "tessera/serve/openai_api.h"

namespace {

using nlohmann::json;

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// One JSON document, as a client's parser needs it.
void expect_json(const std::string& text, const char* what) {
  if (!json::accept(text)) finding(what, "not valid JSON: " + text.substr(0, 200));
}

void exercise(const tessera::serve::CompletionRequest& r) {
  using namespace tessera::serve;
  std::string prompt = r.prompt;
  if (r.chat) {
    for (const ChatTemplate t : {ChatTemplate::chatml, ChatTemplate::llama3}) {
      const ChatPrompt p = apply_chat_template(t, r.messages);
      if (p.stops.empty()) finding("apply_chat_template", "no end-of-turn stop");
      prompt = p.text;
    }
  }
  // A byte a token, against a small and a large context: the budget fits or is a 400.
  for (const int64_t context : {int64_t(64), int64_t(1) << 20}) {
    try {
      const int64_t budget = completion_budget(r, int64_t(prompt.size()), context);
      if (budget < 1 || budget > context - int64_t(prompt.size()))
        finding("completion_budget",
                std::to_string(budget) + " tokens in a context of " + std::to_string(context));
    } catch (const ApiError& e) {
      if (e.status() != 400) finding("completion_budget", e.what());
      expect_json(e.body(), "ApiError::body");
    }
  }
  // The prompt stands in for generated text: any bytes, invalid UTF-8 included.
  expect_json(completion_response(r, "cmpl-1", 0, prompt, "stop", Usage{1, 2}),
              "completion_response");
  for (const bool first : {true, false}) {
    const std::string chunk = stream_chunk(r, "cmpl-1", 0, prompt, first ? "" : "length", first);
    if (chunk.rfind("data: ", 0) != 0 || chunk.size() < 8 ||
        chunk.compare(chunk.size() - 2, 2, "\n\n") != 0)
      finding("stream_chunk", "not one server-sent event: " + chunk.substr(0, 200));
    expect_json(chunk.substr(6, chunk.size() - 8), "stream_chunk");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  tessera::serve::CompletionRequest request;
  try {
    request = tessera::serve::parse_completion_request(body, chat);
  } catch (const tessera::serve::ApiError& e) {
    if (e.status() != 400) finding("parse_completion_request", e.what());
    expect_json(e.body(), "ApiError::body");
    if (std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr)
      std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
    return 0;
  }
  if (std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "fuzz: loaded\n");
  exercise(request);
  return 0;
}
