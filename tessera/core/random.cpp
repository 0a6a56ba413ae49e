#include "tessera/core/random.h"

namespace tessera {

Generator& default_generator() {
  thread_local Generator generator(0, 0);
  return generator;
}

}  // namespace tessera
