// `tessera serve`: a model behind an OpenAI-compatible HTTP API (cpp-httplib, Debian's
// libcpp-httplib-dev), served by continuous batching over a paged KV cache (tessera/serve).
//
//   POST /v1/completions, /v1/chat/completions   JSON, or server-sent events with "stream"
//   GET  /v1/models, /health (503 while loading), /metrics (Prometheus)
//
// Threads: httplib's pool runs the handlers, which check a request, encode it, submit it to the
// engine and wait on its channel; the main thread steps the engine, whose callbacks fill the
// channels. A handler writes to its client at least every kProbe: the next tokens, an SSE
// comment, or (non-streaming) a space before the JSON body, which JSON allows. A write that
// fails means the client hung up: the request is cancelled and its blocks freed.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/serve_app.h"
#include "cli/serve_model.h"
#include "cli/tp_group.h"
#include "cli/stop_signals.h"
#include "tessera/core/file_io.h"
#include "tessera/cuda/cuda.h"
#include "tessera/nn/completion.h"
#include "tessera/serve/chat_template.h"
#include "tessera/serve/engine.h"
#include "tessera/serve/metrics.h"
#include "tessera/serve/openai_api.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/device.h"
#include "tessera/train/detail/model_source.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kProbe = std::chrono::milliseconds(250);

// What the engine thread tells one request's handler.
struct Channel {
  Channel(const data::Tokenizer& tokenizer, nn::StopConditions stops)
      : completion(tokenizer, std::move(stops)) {}
  std::mutex mutex;
  std::condition_variable changed;
  nn::Completion completion;  // the engine thread's
  std::string pending;        // text not yet sent
  bool done = false;
  std::string finish_reason;
  int64_t generated = 0;
};

// The loaded model and what the handlers share.
struct Service {
  std::atomic<bool> ready{false};
  std::unique_ptr<train::LoadedModel> loaded;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<serve::Engine> engine;
  serve::ServerMetrics metrics;
  std::optional<serve::ChatTemplate> chat_template;
  std::string name;
  std::atomic<int64_t> next_id{1};
};

void send_error(httplib::Response& res, const serve::ApiError& e) {
  res.status = e.status();
  res.set_content(e.body(), "application/json");
}

// The chat template: the flag's, else the one a Hugging Face folder's tokenizer_config.json
// names by its markers, else none (chat requests then get a 400).
std::optional<serve::ChatTemplate> choose_chat_template(const ServeFlags& f) {
  if (!f.chat_template.empty()) {
    const auto t = serve::parse_chat_template(f.chat_template);
    TESSERA_CHECK(t, "serve: --chat-template must be chatml or llama3, got '", f.chat_template,
                  "'");
    return t;
  }
  const std::filesystem::path dir = std::filesystem::is_directory(f.model)
                                        ? std::filesystem::path(f.model)
                                        : std::filesystem::path(f.model).parent_path();
  const std::filesystem::path config = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config)) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(config.string()), nullptr, false);
  if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
    return serve::detect_chat_template(j["chat_template"].get<std::string>());
  return std::nullopt;
}

void handle_completion(Service& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  const Clock::time_point arrival = Clock::now();
  if (!s.ready) return send_error(res, serve::ApiError(503, "the model is still loading"));
  serve::CompletionRequest r;
  std::vector<int32_t> ids;
  std::shared_ptr<Channel> channel;
  int64_t id = 0;
  try {
    r = serve::parse_completion_request(req.body, chat);
    if (!r.model.empty() && r.model != s.name)
      throw serve::ApiError(
          404, "The model '" + r.model + "' does not exist; this server serves '" + s.name + "'",
          "model");
    if (r.model.empty()) r.model = s.name;
    std::vector<std::string> stops = r.stop;
    std::string text = r.prompt;
    if (chat) {
      if (!s.chat_template)
        throw serve::ApiError(400,
                              "this model has no known chat template; start the server "
                              "with --chat-template chatml or llama3",
                              "messages");
      const serve::ChatPrompt p = serve::apply_chat_template(*s.chat_template, r.messages);
      text = p.text;
      stops.insert(stops.end(), p.stops.begin(), p.stops.end());
    }
    ids = s.tokenizer->encode(text, /*allow_special=*/chat);
    if (ids.empty())
      throw serve::ApiError(400, "the prompt encodes to no tokens", chat ? "messages" : "prompt");
    const int64_t budget =
        serve::completion_budget(r, int64_t(ids.size()), s.engine->context_length());
    channel = std::make_shared<Channel>(*s.tokenizer, nn::StopConditions{!r.ignore_eos, stops});
    serve::Request request;
    request.prompt = ids;
    request.max_tokens = budget;
    request.sampling = r.sampling;
    auto first_token = std::make_shared<double>(-1.0);
    request.on_token = [channel, first_token, arrival](int32_t token) {
      if (*first_token < 0)
        *first_token = std::chrono::duration<double>(Clock::now() - arrival).count();
      std::lock_guard<std::mutex> lock(channel->mutex);
      ++channel->generated;
      const bool go = channel->completion.add(token);
      channel->pending += channel->completion.ready_text();
      channel->changed.notify_all();
      return go;
    };
    request.on_finish = [channel, first_token, arrival, &s](serve::FinishReason why) {
      std::lock_guard<std::mutex> lock(channel->mutex);
      if (why != serve::FinishReason::cancelled) {
        channel->completion.finish();
        channel->pending += channel->completion.ready_text();
      }
      channel->finish_reason =
          why == serve::FinishReason::cancelled ? "cancelled" : channel->completion.finish_reason();
      channel->done = true;
      s.metrics.record_request(*first_token,
                               std::chrono::duration<double>(Clock::now() - arrival).count(),
                               channel->generated, why);
      channel->changed.notify_all();
    };
    id = s.engine->submit(std::move(request));
  } catch (const serve::ApiError& e) {
    return send_error(res, e);
  } catch (const Error& e) {
    return send_error(res, serve::ApiError(400, e.what()));
  }

  const std::string rid = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(s.next_id++);
  const int64_t created = int64_t(std::time(nullptr));
  const int64_t prompt_tokens = int64_t(ids.size());
  serve::Engine* engine = s.engine.get();
  auto provider = [channel, engine, id, rid, created, r, prompt_tokens, first = true](
                      size_t, httplib::DataSink& sink) mutable {
    std::unique_lock<std::mutex> lock(channel->mutex);
    channel->changed.wait_for(
        lock, kProbe, [&] { return channel->done || (r.stream && !channel->pending.empty()); });
    std::string out;
    if (r.stream && (!channel->pending.empty() || channel->done)) {
      if (!channel->pending.empty() || first)
        out += serve::stream_chunk(r, rid, created, channel->pending, "", first);
      first = false;
      channel->pending.clear();
      if (channel->done)
        out += serve::stream_chunk(r, rid, created, "", channel->finish_reason, false) +
               serve::kStreamDone;
    } else if (!r.stream && channel->done) {
      out = serve::completion_response(r, rid, created, channel->pending, channel->finish_reason,
                                       {prompt_tokens, channel->generated});
    } else {
      out = r.stream ? ": waiting\n\n" : " ";  // a probe: does the client still listen?
    }
    const bool done = channel->done;
    lock.unlock();
    if (!sink.write(out.data(), out.size())) {
      engine->cancel(id);
      return false;
    }
    if (done) sink.done();
    return true;
  };
  res.set_chunked_content_provider(r.stream ? "text/event-stream" : "application/json",
                                   std::move(provider), [engine, id, channel](bool success) {
                                     // A connection that ends before the request: cancel it.
                                     if (!success) engine->cancel(id);
                                   });
}

void add_routes(httplib::Server& svr, Service& s) {
  svr.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_completion(s, req, res, false);
  });
  svr.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    handle_completion(s, req, res, true);
  });
  svr.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    res.status = s.ready ? 200 : 503;
    res.set_content(s.ready ? R"({"status":"ok"})" : R"({"status":"loading"})", "application/json");
  });
  svr.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    if (!s.ready) return send_error(res, serve::ApiError(503, "the model is still loading"));
    res.set_content(s.metrics.render(s.engine->stats()), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        nlohmann::json({{"object", "list"},
                        {"data", {{{"id", s.name}, {"object", "model"}, {"owned_by", "tessera"}}}}})
            .dump(),
        "application/json");
  });
  // Unknown paths and methods, and httplib's own refusals (413 for a body past the limit),
  // get OpenAI's JSON error shape.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404   ? "no route " + req.method + " " + req.path
                             : res.status == 413 ? "the request body is too large"
                                                 : "the request was refused";
    res.set_content(serve::ApiError(res.status, what).body(), "application/json");
  });
}

}  // namespace

struct ServeApp::State {
  ServeFlags flags;
  Service service;
  httplib::Server http;
  std::thread http_thread;
  std::atomic<bool> http_done{false};                // listen_after_bind returned
  std::shared_ptr<parallel::tp::TensorParallel> tp;  // --tp > 1: this process leads the group
};

ServeApp::ServeApp(ServeFlags flags) : state_(std::make_unique<State>()) {
  const ServeFlags& f = flags;
  check_serve_flags(f);
  require_tp_world(f.tp, "serve");
  state_->service.chat_template = choose_chat_template(f);
  state_->flags = std::move(flags);
}

ServeApp::~ServeApp() {
  // httplib's stop() does nothing until the listener has begun listening, and a model can fail
  // to load before it has (a missing path fails in a millisecond): stopped once, the join then
  // waited forever (2 of 3 `serve --model /nonexistent` hung). So stop until it has returned.
  while (state_->http_thread.joinable() && !state_->http_done.load()) {
    state_->http.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state_->http_thread.joinable()) state_->http_thread.join();
}

int ServeApp::listen() {
  const ServeFlags& f = state_->flags;
  httplib::Server& svr = state_->http;
  const size_t pool = size_t(std::max<int64_t>(16, 2 * f.max_running + 4));
  svr.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  svr.set_payload_max_length(size_t(f.max_body_bytes));
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share a port
  // that is in use instead of failing.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  add_routes(svr, state_->service);
  int port = f.port;
  const bool bound =
      f.port == 0 ? (port = svr.bind_to_any_port(f.host)) > 0 : svr.bind_to_port(f.host, f.port);
  TESSERA_CHECK(bound, "serve: cannot listen on ", f.host, ":", f.port,
                " (in use, or not an address of this machine)");
  State* state = state_.get();
  state_->http_thread = std::thread([state] {
    state->http.listen_after_bind();
    state->http_done = true;
  });
  return port;
}

void ServeApp::load() {
  const ServeFlags& f = state_->flags;
  Service& s = state_->service;
  ServedModel m = load_served_model(f);
  state_->tp = m.tp;
  s.loaded = std::move(m.loaded);
  s.tokenizer = train::model_tokenizer(*s.loaded, f.tokenizer, "serve");
  TESSERA_CHECK(s.tokenizer->vocab_size() <= s.loaded->config.vocab_size,
                "serve: the tokenizer has ", s.tokenizer->vocab_size(),
                " ids but the model's vocab_size is ", s.loaded->config.vocab_size);
  s.engine = std::make_unique<serve::Engine>(*s.loaded->model, m.options, m.followers);
  s.name = f.name.empty() ? std::filesystem::path(f.model).filename().string() : f.name;
  if (s.name.empty()) s.name = "tessera";
  s.ready = true;
}

void ServeApp::serve(const std::atomic<bool>& stop) {
  serve::Engine& engine = *state_->service.engine;
  try {
    while (!stop.load()) {
      if (engine.wait_for_work(std::chrono::milliseconds(100)))
        engine.step();
      else
        engine.idle();
    }
  } catch (...) {
    engine.release_followers();  // so that the other --tp ranks end too, rather than time out
    throw;
  }
  engine.release_followers();
}

std::string ServeApp::describe() const {
  const ServeFlags& f = state_->flags;
  const Service& s = state_->service;
  const nn::PagedKVCache one(s.loaded->config, 1, f.block_size, s.loaded->model->dtype(), f.tp);
  const int64_t blocks = s.engine->options().num_blocks;
  return str_cat(s.loaded->path, " as '", s.name, "' (",
                 nn::GPT::count_parameters(s.loaded->config), " parameters, context ",
                 s.loaded->config.block_size, ", on ", f.device,
                 f.tp > 1 ? str_cat(", tensor parallel over ", f.tp, " ranks") : std::string(),
                 "); KV cache ", blocks,
                 " blocks of ", f.block_size, " (", blocks * one.bytes_per_block() / 1024,
                 " KiB); chat template ",
                 s.chat_template ? serve::chat_template_name(*s.chat_template) : "none");
}

namespace {

void lead_serve(const ServeFlags& f) {
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a signal
  ServeApp app(f);
  const int port = app.listen();
  std::cerr << "serve: listening on http://" << f.host << ":" << port << " (loading the model)"
            << std::endl;
  StopSignals signals;
  app.load();
  std::cerr << "serve: ready: " << app.describe() << std::endl;
  app.serve(*signals.requested());
  std::cerr << "serve: stopping" << std::endl;
}

void run_serve(const ServeFlags& f) {
  run_reporting_on_rank_zero([&](int rank) { rank == 0 ? lead_serve(f) : follow_serve(f); });
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API with continuous batching");
  cmd->add_option("--model", f->model,
                  "a run directory, a checkpoint directory or Hugging Face weights")
      ->required();
  cmd->add_option("--tokenizer", f->tokenizer, "tokenizer (default: the model's own)");
  cmd->add_option("--device", f->device, "cpu (default), cuda or cuda-sim");
  cmd->add_option("--tp", f->tp,
                  "tensor-parallel ranks: run as mpiexec -n T tessera serve --tp T (CPU)");
  cmd->add_option("--host", f->host, "address to listen on");
  cmd->add_option("--port", f->port, "port (0: a free one, printed at start)");
  cmd->add_option("--served-model-name", f->name, "the model's name in the API");
  cmd->add_option("--chat-template", f->chat_template,
                  "chatml or llama3 (default: detected from tokenizer_config.json)");
  cmd->add_option("--kv-blocks", f->kv_blocks,
                  "KV-cache blocks (0: enough for --max-running full contexts)");
  cmd->add_option("--block-size", f->block_size, "positions per KV-cache block");
  cmd->add_option("--max-batch-tokens", f->max_batch_tokens, "tokens per iteration");
  cmd->add_option("--max-running", f->max_running, "sequences in the running batch");
  cmd->add_option("--batching", f->batching,
                  "continuous (default) or static (a batch runs to its end before new requests "
                  "join: the baseline of the load benchmark)");
  cmd->add_flag("--no-chunked-prefill", f->no_chunked_prefill,
                "a prompt waits until it fits whole in one iteration");
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "largest request body accepted");
  cmd->add_flag("--int8-activations", f->int8_activations,
                "W8A8: quantize the linear layers' inputs to int8 per token too (a Q8_0 model)");
  cmd->add_option("--threads", f->threads, "CPU threads (0: all)");
  cmd->callback([f] { run_serve(*f); });
}

}  // namespace tessera::cli
