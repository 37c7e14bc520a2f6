// `rlcpp serve`: an OpenAI-compatible HTTP server over one engine (openai/server.h), for clients
// that speak the OpenAI API, for trainers that generate through it (`rlcpp train -b openai`), and
// for talking to a policy while it trains (its weights updated over HTTP).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <iostream>

#include "app/commands.h"
#include "app/setting_flags.h"
#include "openai/server.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/threads.h"

namespace rlcpp {

namespace {

struct ServeArgs {
  std::string model;
  std::vector<std::string> adapters;  // NAME=DIR or DIR (named by its folder)
  ServeOptions options;
  EngineFlags engine;
};

// SIGINT/SIGTERM only set a flag (all a signal handler may safely do); a watcher thread stops the server.
std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested = true; }

void run_serve(ServeArgs args) {
  // Each connection holds a socket and a thread: said at the start, not at the 1,000th client.
  const int64_t n = args.options.max_connections;
  ensure_process_limits(n + 64, n + 64, fmt::format("rlcpp serve --max-connections {}", n));
  auto tokenizer = Tokenizer::from_dir(args.model);
  auto model = Transformer::from_pretrained(args.model, args.engine.model_options());
  model->eval();
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  if (args.options.model_name.empty()) {
    args.options.model_name = std::filesystem::path(args.model).lexically_normal().filename().string();
    if (args.options.model_name.empty()) args.options.model_name = "rlcpp";
  }
  Server server(model, tokenizer, args.engine.engine_config(), args.options);
  for (const auto& a : args.adapters) {
    const auto eq = a.find('=');
    const std::string dir = eq == std::string::npos ? a : a.substr(eq + 1);
    std::string name = eq == std::string::npos ? std::filesystem::path(dir).lexically_normal().filename().string() : a.substr(0, eq);
    if (name.empty() || name == args.options.model_name) {
      throw_user_error("--adapter {}: give it a name other than the base model's, as NAME=DIR", a);
    }
    server.load_adapter(name, dir);
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (!served) {
      if (stop_requested) server.stop();  // again until serve returns: a signal may come before it listens
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct JoinWatcher {
    std::atomic<bool>& served;
    std::thread& watcher;
    ~JoinWatcher() {
      served = true;
      watcher.join();
    }
  } join_watcher{served, watcher};
  server.serve([&](int port) {
    // One line a launcher can wait for (tests, scripts); stdout, flushed.
    std::cout << fmt::format("rlcpp serve: listening on http://{}:{} (model {})", args.options.host, port,
                             args.options.model_name)
              << std::endl;
  });
  spdlog::info("rlcpp serve: stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "an OpenAI-compatible HTTP server of a model (completions, chat, streaming, "
                                          "weight and LoRA updates while serving)");
  auto args = std::make_shared<ServeArgs>();
  add_setting_flag(cmd, "model.path", args->model)->required();
  cmd->add_option("--adapter", args->adapters, "a LoRA adapter (PEFT directory) served as a model of its own: NAME=DIR, "
                                               "or DIR (named by its folder)");
  cmd->add_option("--host", args->options.host, "address to listen on; other than loopback it needs --api-key")
      ->capture_default_str();
  cmd->add_option("--port", args->options.port, "port (0: a free one, printed)")->capture_default_str();
  cmd->add_option("--api-key", args->options.api_key, "clients must send Authorization: Bearer KEY");
  cmd->add_option("--served-model-name", args->options.model_name, "the base model's name (default: its folder)");
  cmd->add_option("--max-prompt-tokens", args->options.max_prompt_tokens,
                  "longer prompts are refused with 413 (0: the model's positions less one)")->capture_default_str();
  cmd->add_option("--default-max-tokens", args->options.default_max_tokens,
                  "completions without max_tokens (OpenAI's 16); chats default to the positions left")->capture_default_str();
  cmd->add_option("--max-connections", args->options.max_connections, "connections open at once, each served by its own "
                  "thread (a streaming client holds one); more are answered 503")->capture_default_str();
  cmd->add_option("--http-threads", args->options.max_connections, "the same as --max-connections (its old name)")->group("");
  cmd->add_option("--request-timeout", args->options.request_timeout, "seconds a connection has to send a whole request, "
                  "from its accept or its last answer; a slower one is closed")->capture_default_str();
  cmd->add_option("--max-body-mb", args->options.max_body_mb, "request bodies over this many MiB are refused with 413 "
                  "before they are read")->capture_default_str();
  cmd->add_option("--max-request-tokens", args->options.max_request_tokens, "a request's n x (prompt + max_tokens), summed "
                  "over its prompts, above this is refused with 413 (0: the KV cache's tokens)")->capture_default_str();
  cmd->add_option("--policy-version", args->options.policy_version, "version of the weights at start (reported with "
                                                                    "every answer; updates count on from it)")
      ->capture_default_str();
  add_engine_flags(cmd, args->engine);
  cmd->callback([args] { run_serve(*args); });
}

}  // namespace rlcpp
