#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (allow_special && text.compare(i, kEndOfText.size(), kEndOfText) == 0) {
      ids.push_back(kEot);
      i += kEndOfText.size();
      continue;
    }
    ids.push_back(int32_t(static_cast<unsigned char>(text[i])));
    ++i;
  }
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    TESSERA_CHECK(id >= 0 && id < vocab_size(), "byte tokenizer decode: id ", id, " at position ",
                  i, " is outside [0, ", vocab_size(), ")");
    if (id == kEot) {
      out.append(kEndOfText);
    } else {
      out.push_back(char(id));
    }
  }
  return out;
}

std::optional<int32_t> ByteTokenizer::special_id(std::string_view token) const {
  if (token == kEndOfText) return kEot;
  return std::nullopt;
}

}  // namespace tessera::data
