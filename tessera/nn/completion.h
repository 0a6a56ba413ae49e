#pragma once
// Completion: one prompt's continuation as tokens arrive, and when it ends. It ends at the
// tokenizer's end-of-text token (unless told not to) or when its text contains a stop string,
// the text then cut before it, as OpenAI's API does; otherwise the caller's token limit ends
// it ("length"). For streaming, ready_text() hands out only text that can no longer change: it
// holds back an unfinished UTF-8 character and any tail that could still grow into a stop
// string, so a client never sees bytes that the stop would have cut.
//
//   nn::Completion c(tokenizer, {.at_end_of_text = true, .stop = {"\n\n"}});
//   for each token: if (!c.add(token)) break;  send(c.ready_text());
//   c.finish();  send(c.ready_text());           // c.text(), c.finish_reason()

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::nn {

struct StopConditions {
  bool at_end_of_text = true;
  std::vector<std::string> stop;  // non-empty strings
};

class Completion {
 public:
  // Throws naming the index of an empty stop string.
  Completion(const data::Tokenizer& tokenizer, StopConditions conditions);

  // Adds the next token; returns false once the completion has ended (further tokens are
  // ignored).
  bool add(int64_t token);
  // Ends it at the caller's limit (finish_reason "length") unless it already stopped.
  void finish();

  bool done() const { return done_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // end-of-text left out
  const std::string& text() const { return text_; }               // cut before a stop string
  // "stop" (end-of-text or a stop string), "length" (finish()), or "" while running.
  const char* finish_reason() const { return reason_; }
  // The text not yet handed out that can no longer change (all of it once done).
  std::string ready_text();

 private:
  const data::Tokenizer& tokenizer_;
  StopConditions conditions_;
  std::vector<int32_t> tokens_;
  std::string text_;
  size_t sent_ = 0;
  bool done_ = false;
  const char* reason_ = "";
};

}  // namespace tessera::nn
