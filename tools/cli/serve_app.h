#pragma once
// The server behind `tessera serve`, in steps a test can drive: listen() binds and answers
// at once (/health is 503 until the model is in), load() builds the model, tokenizer and
// engine, serve() steps the engine until asked to stop. serve_command.cpp has the routes.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tessera::cli {

// The most sequences --max-running admits (serve_model.cpp says why).
inline constexpr int64_t kMaxRunning = 1024;

struct ServeFlags {
  std::string model, tokenizer, device = "cpu", host = "127.0.0.1", chat_template, name;
  std::string batching = "continuous";
  int port = 8000, tp = 1, threads = 0;
  int64_t kv_blocks = 0, block_size = 16, max_batch_tokens = 512, max_running = 32;
  int64_t max_body_bytes = 1 << 20;
  bool no_chunked_prefill = false, int8_activations = false;
};

class ServeApp {
 public:
  // Checks the flags that need no file; throws naming the flag.
  explicit ServeApp(ServeFlags flags);
  ~ServeApp();  // stops the HTTP server
  ServeApp(const ServeApp&) = delete;
  ServeApp& operator=(const ServeApp&) = delete;

  // Binds --host:--port (0: a free port) and starts answering; returns the port.
  int listen();
  // Loads the model and opens the engine; the server is ready after it.
  void load();
  // Steps the engine until `stop` is set (returns then) or a step throws (rethrown).
  void serve(const std::atomic<bool>& stop);
  // One line for the log: the model, the cache and the chat template.
  std::string describe() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tessera::cli
