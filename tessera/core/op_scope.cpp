#include "tessera/core/detail/op_scope.h"

#include <vector>

namespace tessera {

thread_local const OpScope* OpScope::top_ = nullptr;

std::string OpScope::current() {
  std::vector<const OpScope*> chain;
  for (const OpScope* s = top_; s != nullptr; s = s->outer_) chain.push_back(s);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (!out.empty()) out += " > ";
    out += (*it)->name_;
    if ((*it)->phase_ != nullptr) out += std::string(" (") + (*it)->phase_ + ")";
  }
  return out;
}

}  // namespace tessera
