#pragma once
// Built-in chat templates: the conversation of a /v1/chat/completions request written out as
// the prompt text the model was tuned on. Hugging Face's Jinja templates are not interpreted;
// a model's template is recognised by its markers (detect_chat_template) or named by flag.
//
//   chatml  <|im_start|>system\n...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n
//           <|im_start|>assistant\n                       (stops at <|im_end|>)
//   llama3  <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n...<|eot_id|>
//           <|start_header_id|>assistant<|end_header_id|>\n\n   (stops at <|eot_id|>)

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/serve/openai_api.h"

namespace tessera::serve {

enum class ChatTemplate { chatml, llama3 };

// "chatml" / "llama3"; nullopt for another name.
std::optional<ChatTemplate> parse_chat_template(std::string_view name);
const char* chat_template_name(ChatTemplate t);
// The template whose markers a Hugging Face tokenizer_config.json "chat_template" (Jinja text)
// uses, or nullopt.
std::optional<ChatTemplate> detect_chat_template(std::string_view jinja);

struct ChatPrompt {
  std::string text;                // ends with the assistant's header
  std::vector<std::string> stops;  // the end-of-turn marker
};
ChatPrompt apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& messages);

}  // namespace tessera::serve
