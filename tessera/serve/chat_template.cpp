#include "tessera/serve/chat_template.h"

namespace tessera::serve {

std::optional<ChatTemplate> parse_chat_template(std::string_view name) {
  if (name == "chatml") return ChatTemplate::chatml;
  if (name == "llama3") return ChatTemplate::llama3;
  return std::nullopt;
}

const char* chat_template_name(ChatTemplate t) {
  return t == ChatTemplate::chatml ? "chatml" : "llama3";
}

std::optional<ChatTemplate> detect_chat_template(std::string_view jinja) {
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplate::llama3;
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatTemplate::chatml;
  return std::nullopt;
}

ChatPrompt apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  ChatPrompt p;
  if (t == ChatTemplate::chatml) {
    for (const ChatMessage& m : messages)
      p.text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    p.text += "<|im_start|>assistant\n";
    p.stops = {"<|im_end|>"};
  } else {
    p.text = "<|begin_of_text|>";
    for (const ChatMessage& m : messages)
      p.text += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    p.text += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    p.stops = {"<|eot_id|>"};
  }
  return p;
}

}  // namespace tessera::serve
