// `rlcpp serve`: the OpenAI-compatible HTTP server over one engine (openai/protocol.h). Requests
// from any number of connections batch continuously in the engine (GenerationLoop), stepped by one
// engine thread; answers are whole JSON bodies or server-sent events. Weights change while serving
// (a model directory from disk, LoRA adapters loaded and unloaded by name): an update waits until
// the requests running finish (new ones wait for it), so every answer comes from one version of
// the weights, which it reports.
//
// Endpoints: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics (Prometheus),
// POST /update_weights_from_disk (SGLang's), /v1/load_lora_adapter and /v1/unload_lora_adapter
// (vLLM's). With an API key every endpoint but /health and /metrics needs "Authorization: Bearer KEY".
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"

namespace rlcpp {

class Tokenizer;

struct ServeOptions {
  std::string host = "127.0.0.1";  // loopback unless given; another address needs api_key
  int port = 8000;                 // 0: a free port, chosen at start
  std::string api_key;             // "" : no authentication (loopback only)
  std::string model_name;          // the base model's name in requests and /v1/models
  int64_t max_prompt_tokens = 0;   // longer prompts get 413 (0: the model's positions less one)
  int64_t default_max_tokens = 16; // completions without max_tokens (OpenAI's 16); chat: up to the positions
  int max_connections = 256;       // open at once, each served by its thread; more are answered 503
  double request_timeout = 60;     // seconds a connection has to send a whole request (from its accept or last answer)
  int64_t max_body_mb = 64;        // longer request bodies get 413, judged from Content-Length before they are read
  int64_t max_request_tokens = 0;  // n x (prompt + max_tokens) summed over a request's prompts (0: the KV cache's tokens)
  int64_t policy_version = 0;      // of the weights at start
};

class Server {
 public:
  // The engine generates with `model`'s weights (and its adapters); `model_dir` names it.
  Server(std::shared_ptr<Transformer> model, std::shared_ptr<const Tokenizer> tokenizer, EngineConfig engine,
         ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // An adapter served under `name` (a PEFT directory), as POST /v1/load_lora_adapter does.
  void load_adapter(const std::string& name, const std::filesystem::path& dir);

  // Binds (a UserError names the address when it cannot) and serves until stop(); `on_listening`
  // gets the port once requests are accepted.
  void serve(const std::function<void(int port)>& on_listening = {});
  void stop();  // from any thread (a signal handler's thread too)

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace rlcpp
