#include "tessera/nn/completion.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::nn {

namespace {

// Bytes at the end of `s` that begin a UTF-8 character not yet complete.
size_t unfinished_utf8(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

Completion::Completion(const data::Tokenizer& tokenizer, StopConditions conditions)
    : tokenizer_(tokenizer), conditions_(std::move(conditions)) {
  for (size_t i = 0; i < conditions_.stop.size(); ++i)
    TESSERA_CHECK(!conditions_.stop[i].empty(), "completion: stop string ", i, " is empty");
}

bool Completion::add(int64_t token) {
  if (done_) return false;
  if (conditions_.at_end_of_text && token == tokenizer_.eot_id()) {
    done_ = true;
    reason_ = "stop";
    return false;
  }
  TESSERA_CHECK(token >= 0 && token < tokenizer_.vocab_size(), "completion: token ", token,
                " is outside the tokenizer's ", tokenizer_.vocab_size(), " ids");
  tokens_.push_back(int32_t(token));
  text_ = tokenizer_.decode(tokens_);
  // The earliest stop string wins; nothing after it was ever handed out (ready_text).
  size_t cut = std::string::npos;
  for (const std::string& s : conditions_.stop) cut = std::min(cut, text_.find(s));
  if (cut != std::string::npos) {
    text_.resize(cut);
    done_ = true;
    reason_ = "stop";
    return false;
  }
  return true;
}

void Completion::finish() {
  if (done_) return;
  done_ = true;
  reason_ = "length";
}

std::string Completion::ready_text() {
  size_t end = text_.size();
  if (!done_) {
    // Hold back what a stop string could still start with, and an unfinished character.
    size_t hold = unfinished_utf8(text_);
    for (const std::string& s : conditions_.stop)
      for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k)
        if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    end = text_.size() - hold;
  }
  if (end <= sent_) return "";
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

}  // namespace tessera::nn
