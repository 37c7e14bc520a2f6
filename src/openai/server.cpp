#include "openai/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <sys/socket.h>

#include "engine/async_engine.h"
#include "io/checkpoint.h"
#include "openai/connections.h"
#include "openai/protocol.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/failpoint.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

// What an HTTP handler waits on: the events of a stream, or the whole answer.
struct Channel {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> events;  // server-sent events ready to go out
  bool done = false;
  int status = 200;
  std::string body;                // the answer (not streamed), or an error's
  std::atomic<bool> gone{false};   // the client went away: the engine cancels the request

  void push(std::string event) {
    std::lock_guard<std::mutex> lock(m);
    events.push_back(std::move(event));
    cv.notify_all();
  }
  void finish(int code, std::string text) {
    std::lock_guard<std::mutex> lock(m);
    status = code;
    body = std::move(text);
    done = true;
    cv.notify_all();
  }
};

// One API request on its way through the engine (the engine thread fills the answer's parts).
struct Job {
  ApiRequest request;
  std::string id;
  int64_t created = 0;
  std::shared_ptr<Channel> channel;
  std::vector<ApiStreamState> streams;  // per choice
  int64_t version = 0;
};

// A change of the weights (POST /update_weights_from_disk, /v1/load_lora_adapter, /v1/unload_lora_adapter).
struct WeightOp {
  enum class Kind { kDisk, kLoadAdapter, kUnloadAdapter } kind = Kind::kDisk;
  std::string name, path;
  std::optional<int64_t> version;
};

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}-{:016x}{:08x}", prefix, salt, counter++);
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool loopback(const std::string& host) { return host == "127.0.0.1" || host == "localhost" || host == "::1"; }

void json_reply(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

}  // namespace

struct Server::State {
  ServeOptions options;
  std::shared_ptr<Transformer> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<PromptBuilder> prompts;  // chats; guarded by parse_mutex
  std::mutex parse_mutex;
  ApiLimits limits;
  httplib::Server http;
  int port = 0, listen_fd = -1;              // once bound
  Connections* connections = nullptr;        // cpp-httplib's task queue, while listening

  std::mutex m;
  std::map<std::string, fs::path> adapters;  // served name -> PEFT directory
  std::unique_ptr<AsyncEngine> async;        // the engine thread: made at serve()
  bool stopping = false;                     // stop() came (guarded by m)
  int64_t start_version = 0;

  // Figures for /metrics.
  std::atomic<int64_t> requests{0}, failed{0};

  State(std::shared_ptr<Transformer> m_, std::shared_ptr<const Tokenizer> t, EngineConfig e, ServeOptions o)
      : options(std::move(o)), model(std::move(m_)), tokenizer(std::move(t)) {
    engine = std::make_unique<Engine>(model, e, tokenizer);
    PromptOptions p;
    p.context_tokens = 0;  // length checks are the parser's, with 413
    prompts = std::make_unique<PromptBuilder>(*tokenizer, p);
    limits.max_positions = model->config().max_position_embeddings;
    limits.max_prompt_tokens = options.max_prompt_tokens;
    limits.default_max_tokens = options.default_max_tokens;
    limits.vocab_size = model->config().vocab_size;
    limits.stop_token_ids = default_stop_tokens(model->config(), *tokenizer);
    limits.tool_format = template_tool_format(*tokenizer);
    limits.max_request_tokens = options.max_request_tokens > 0 ? options.max_request_tokens : GenerationLoop(*engine).kv_blocks() * e.block_size;
    start_version = options.policy_version;
  }

  int64_t version() const { return async ? async->version() : start_version; }

  std::vector<std::string> model_names() {
    std::lock_guard<std::mutex> lock(m);
    std::vector<std::string> out{options.model_name};
    for (const auto& [name, dir] : adapters) out.push_back(name);
    return out;
  }

  bool model_has_adapter(const std::string& name) {
    std::lock_guard<std::mutex> lock(m);
    return adapters.count(name) != 0;
  }

  // --- on the engine thread ------------------------------------------------------------------

  // The weights a loop runs: `name`'s adapter on ("": the base model), read from its directory as
  // it is now (a trainer may rewrite it between loads).
  void activate(const std::string& name) {
    if (name.empty()) {
      engine->set_adapters_enabled(false);
      return;
    }
    fs::path dir;
    {
      std::lock_guard<std::mutex> lock(m);
      auto it = adapters.find(name);
      if (it == adapters.end()) {
        throw ApiError(404, fmt::format("The model `{}` does not exist (its adapter was unloaded)", name), "model",
                       "model_not_found");
      }
      dir = it->second;
    }
    model->load_adapter(dir);
    engine->set_adapters_enabled(true);
  }

  // A weight change; its HTTP status and message. A new model or adapter is a new version;
  // removing an adapter changes no weights that answer.
  std::pair<int, std::string> apply(const WeightOp& op) {
    std::string message;
    switch (op.kind) {
      case WeightOp::Kind::kDisk: {
        if (!fs::is_directory(op.path)) throw ApiError(400, fmt::format("model_path {}: no such directory", op.path), "model_path");
        CheckpointReader reader(op.path);
        model->load_weights(reader, op.path);
        message = fmt::format("weights loaded from {}", op.path);
        break;
      }
      case WeightOp::Kind::kLoadAdapter: {
        if (!is_peft_adapter_dir(op.path)) {
          throw ApiError(400, fmt::format("lora_path {}: not a PEFT adapter directory (no adapter_config.json)", op.path),
                         "lora_path");
        }
        read_peft_adapter(op.path);  // a malformed adapter is refused here, not at its first request
        std::lock_guard<std::mutex> lock(m);
        adapters[op.name] = op.path;
        message = fmt::format("Success: LoRA adapter '{}' added successfully.", op.name);
        break;
      }
      case WeightOp::Kind::kUnloadAdapter: {
        std::lock_guard<std::mutex> lock(m);
        if (adapters.erase(op.name) == 0) {
          throw ApiError(404, fmt::format("The lora adapter '{}' cannot be found", op.name), "lora_name");
        }
        message = fmt::format("Success: LoRA adapter '{}' removed successfully.", op.name);
        break;
      }
    }
    if (op.version) {
      async->set_version(*op.version);
    } else if (op.kind != WeightOp::Kind::kUnloadAdapter) {
      async->set_version(async->version() + 1);
    }
    return {200, message};
  }

  // --- HTTP ----------------------------------------------------------------------------------

  // The engine's job for an API request: its prompts' samples, streamed as events or answered whole.
  std::shared_ptr<EngineJob> engine_job(const std::shared_ptr<Job>& job) {
    const ApiRequest& r = job->request;
    auto e = std::make_shared<EngineJob>();
    // Sample s of prompt k draws from the seed (seed + k, s), as `rlcpp generate --seed` does.
    const uint64_t seed = r.seeded ? r.seed : std::random_device{}();
    for (size_t k = 0; k < r.prompts.size(); ++k) {
      GenerationRequest g;
      g.prompt_ids = r.prompts[k];
      g.params = r.params;
      g.n = r.n;
      g.seed = seed + k;
      e->requests.push_back(std::move(g));
    }
    e->adapter = r.model == options.model_name ? "" : r.model;
    job->streams.assign(r.prompts.size() * static_cast<size_t>(r.n), ApiStreamState{});
    e->on_start = [job](int64_t version) { job->version = version; };
    e->on_token = [job, this](size_t prompt, const StepToken& t, const GeneratedSample* finished) {
      if (!job->request.stream || job->channel->gone) return;
      const int64_t index = static_cast<int64_t>(prompt) * job->request.n + t.sample;
      job->channel->push(api_stream_event(job->request, job->streams[static_cast<size_t>(index)], index,
                                          static_cast<int64_t>(prompt), t, finished, job->id, job->created, job->version,
                                          *tokenizer));
    };
    e->on_done = [job, this](std::vector<std::vector<GeneratedSample>> samples) {
      std::vector<ApiChoice> choices;
      for (size_t k = 0; k < samples.size(); ++k) {
        for (auto& s : samples[k]) {
          const int64_t index = static_cast<int64_t>(k) * job->request.n + s.sample;
          choices.push_back({index, static_cast<int64_t>(k), std::move(s)});
        }
      }
      if (job->request.stream) {
        job->channel->push(api_stream_end(job->request, choices, job->id, job->created, job->version));
        job->channel->finish(200, "");
      } else {
        job->channel->finish(200, api_response(job->request, choices, job->id, job->created, job->version, *tokenizer)
                                      .dump(-1, ' ', false, Json::error_handler_t::replace));
      }
    };
    e->on_error = [job, this](EngineJob::Failure why, const std::exception& error) {
      if (why == EngineJob::Failure::kRejected) ++failed;
      const auto* api = dynamic_cast<const ApiError*>(&error);
      if (api != nullptr) return job->channel->finish(api->status, api->body());
      switch (why) {
        case EngineJob::Failure::kRejected: return job->channel->finish(400, ApiError(400, error.what()).body());
        case EngineJob::Failure::kEngineFailed: return job->channel->finish(500, ApiError(500, error.what()).body());
        case EngineJob::Failure::kStopping:
          return job->channel->finish(503, ApiError(503, "the server is shutting down").body());
      }
    };
    return e;
  }

  void submit_job(ApiEndpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    ++requests;
    failpoint("http");  // a request received, not yet answered
    auto job = std::make_shared<Job>();
    try {
      ApiLimits limits_now = limits;
      limits_now.models = model_names();
      std::lock_guard<std::mutex> lock(parse_mutex);
      job->request = parse_api_request(endpoint, req.body, limits_now, *tokenizer, *prompts);
    } catch (const ApiError& e) {
      ++failed;
      return json_reply(res, e.status, e.body());
    } catch (const nlohmann::json::exception& e) {  // a field of a type the parser did not expect
      ++failed;
      return json_reply(res, 400, ApiError(400, fmt::format("a field has the wrong type: {}", e.what())).body());
    }
    job->id = random_id(endpoint == ApiEndpoint::kChat ? "chatcmpl" : "cmpl");
    job->created = unix_time();
    job->channel = std::make_shared<Channel>();
    auto engine_side = engine_job(job);
    if (async == nullptr || !async->submit(engine_side)) {
      return json_reply(res, 503, ApiError(503, "the server is shutting down").body());
    }
    auto channel = job->channel;
    // A client that goes away cancels its job (the engine ends its samples at the next step).
    auto gone = [channel, engine_side] {
      channel->gone = true;
      engine_side->cancelled = true;
    };
    if (!job->request.stream) {
      std::unique_lock<std::mutex> lock(channel->m);
      channel->cv.wait(lock, [&] { return channel->done; });
      return json_reply(res, channel->status, channel->body);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [channel, gone](size_t, httplib::DataSink& sink) {
          std::unique_lock<std::mutex> lock(channel->m);
          channel->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return channel->done || !channel->events.empty(); });
          while (!channel->events.empty()) {
            const std::string event = std::move(channel->events.front());
            channel->events.pop_front();
            lock.unlock();
            if (!sink.write(event.data(), event.size())) {
              gone();
              return false;
            }
            lock.lock();
          }
          if (channel->done) {
            if (channel->status != 200) {  // an error after the stream began: one event saying it
              const std::string event = "data: " + channel->body + "\n\n";
              sink.write(event.data(), event.size());
            }
            sink.done();
            return true;
          }
          if (sink.is_writable && !sink.is_writable()) {
            gone();
            return false;
          }
          return true;
        },
        [gone](bool success) {
          if (!success) gone();
        });
  }

  // A weight change, run by the engine thread once the requests running have finished, waited for.
  std::pair<int, std::string> submit_op(const WeightOp& op) {
    if (async == nullptr) return {503, "the server is not serving"};
    std::pair<int, std::string> result{200, ""};
    auto done = async->change_weights([&] { result = apply(op); });
    try {
      done.get();
    } catch (const ApiError& e) {
      result = {e.status, e.message};
    } catch (const UserError& e) {
      result = {400, e.what()};
    } catch (const std::exception& e) {
      result = {500, e.what()};
    }
    return result;
  }

  std::string metrics_text() {
    const AsyncEngineStats e = async ? async->stats() : AsyncEngineStats{};
    const double kv = e.kv_blocks > 0 ? static_cast<double>(e.kv_blocks_used) / static_cast<double>(e.kv_blocks) : 0.0;
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    metric("rlcpp_requests_total", "counter", "API requests received", static_cast<double>(requests));
    metric("rlcpp_requests_failed_total", "counter", "API requests answered with an error", static_cast<double>(failed));
    metric("rlcpp_prompt_tokens_total", "counter", "prompt tokens admitted", static_cast<double>(e.prompt_tokens));
    metric("rlcpp_generation_tokens_total", "counter", "tokens generated", static_cast<double>(e.generated_tokens));
    metric("rlcpp_generation_tokens_per_second", "gauge", "tokens generated per second over the last 10 s", e.tokens_per_second);
    metric("rlcpp_sequences_running", "gauge", "sequences waiting or decoding in the engine", static_cast<double>(e.running_sequences));
    metric("rlcpp_requests_waiting", "gauge", "requests queued for the engine (the queue depth)", static_cast<double>(e.waiting_jobs));
    metric("rlcpp_kv_cache_usage_ratio", "gauge", "KV cache blocks in use, of all", kv);
    metric("rlcpp_policy_version", "gauge", "version of the weights new requests generate with", static_cast<double>(version()));
    const auto c = connections->counts();
    metric("rlcpp_connections_open", "gauge", "HTTP connections open", static_cast<double>(c.open));
    metric("rlcpp_connections_refused_total", "counter", "connections refused past --max-connections", static_cast<double>(c.refused));
    metric("rlcpp_connections_timed_out_total", "counter", "connections closed for sending no whole request in "
           "--request-timeout", static_cast<double>(c.timed_out));
    return out;
  }

  void routes() {
    http.new_task_queue = [this] {
      connections = new Connections(options.max_connections, options.request_timeout, port, listen_fd);
      return connections;
    };
    // A request reaching its handler stops its connection's --request-timeout clock; its answer,
    // written whole (a stream's last event too), starts it again.
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      connections->handling(req.remote_addr, req.remote_port, false);
      if (res.get_header_value("Connection") == "close") connections->close(req.remote_addr, req.remote_port);
    });
    // Without it a keep-alive connection's answer waited ~40 ms for the client's delayed ACK (Nagle).
    http.set_tcp_nodelay(true);
    // cpp-httplib closes a keep-alive connection after 5 requests: under load its clients then
    // reconnect all the time, and a new connection can find the old one's place not yet free (256
    // clients against --max-connections 256 got a 503 in 6,403 requests). nginx's default is 1,000.
    http.set_keep_alive_max_count(1000);
    const auto max_body = static_cast<size_t>(options.max_body_mb) << 20;
    http.set_payload_max_length(max_body);
    http.set_pre_routing_handler([this, max_body](const httplib::Request& req, httplib::Response& res) {
      if (connections->refused(req.remote_addr, req.remote_port)) {
        res.set_header("Connection", "close");
        res.set_header("Retry-After", "1");
        json_reply(res, 503, ApiError(503, fmt::format("the server has {} connections open, its most (--max-connections); "
                                                       "try again later", options.max_connections)).body());
        return httplib::Server::HandlerResponse::Handled;
      }
      // A body's size is judged from its headers, before it is read: too long is 413 at once.
      if (req.method == "POST") {
        if (!req.has_header("Content-Length") && req.has_header("Transfer-Encoding")) {
          res.set_header("Connection", "close");
          json_reply(res, 411, ApiError(411, "send the request body with a Content-Length").body());
          return httplib::Server::HandlerResponse::Handled;
        }
        const uint64_t length = req.get_header_value<uint64_t>("Content-Length");
        if (length > max_body) {
          res.set_header("Connection", "close");
          json_reply(res, 413, ApiError(413, fmt::format("the request body has {} bytes, more than this server's {} MiB "
                                                         "(--max-body-mb)", length, options.max_body_mb)).body());
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (options.api_key.empty() || req.path == "/health" || req.path == "/metrics") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return httplib::Server::HandlerResponse::Unhandled;
      json_reply(res, 401, ApiError(401, "a valid API key is required (Authorization: Bearer KEY)").body());
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      json_reply(res, 500, ApiError(500, what).body());
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404) json_reply(res, 404, ApiError(404, fmt::format("no route {} {}", req.method, req.path)).body());
      if (res.status == 413) json_reply(res, 413, ApiError(413, "the request body is too large").body());
    });
    auto handled = [this](httplib::Server::Handler handler) {
      return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        connections->handling(req.remote_addr, req.remote_port, true);
        handler(req, res);
      };
    };
    http.Post("/v1/completions", handled([this](const httplib::Request& req, httplib::Response& res) {
      submit_job(ApiEndpoint::kCompletions, req, res);
    }));
    http.Post("/v1/chat/completions", handled([this](const httplib::Request& req, httplib::Response& res) {
      submit_job(ApiEndpoint::kChat, req, res);
    }));
    http.Get("/v1/models", handled([this](const httplib::Request&, httplib::Response& res) {
      Json data = Json::array();
      const auto names = model_names();
      for (size_t k = 0; k < names.size(); ++k) {
        data.push_back({{"id", names[k]}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "rlcpp"},
                        {"root", names.front()}, {"parent", k == 0 ? Json(nullptr) : Json(names.front())},
                        {"max_model_len", limits.max_positions}});
      }
      json_reply(res, 200, Json({{"object", "list"}, {"data", data}}).dump());
    }));
    http.Get("/health", handled([this](const httplib::Request&, httplib::Response& res) {
      json_reply(res, 200, Json({{"status", "ok"}, {"policy_version", version()}}).dump());
    }));
    http.Get("/metrics", handled([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    }));
    auto body_of = [](const httplib::Request& req) {
      auto j = nlohmann::json::parse(req.body, nullptr, false);
      if (j.is_discarded() || !j.is_object()) throw ApiError(400, "the request body must be a JSON object");
      return j;
    };
    auto string_field = [](const nlohmann::json& j, const char* name) {
      if (!j.contains(name) || !j[name].is_string() || j[name].get<std::string>().empty()) {
        throw ApiError(400, fmt::format("{}: required, a non-empty string", name), name);
      }
      return j[name].get<std::string>();
    };
    auto version_field = [](const nlohmann::json& j) -> std::optional<int64_t> {
      if (!j.contains("policy_version") || j["policy_version"].is_null()) return std::nullopt;
      if (!j["policy_version"].is_number_integer()) throw ApiError(400, "policy_version: expected an integer", "policy_version");
      return j["policy_version"].get<int64_t>();
    };
    http.Post("/update_weights_from_disk", handled([=, this](const httplib::Request& req, httplib::Response& res) {
      try {
        const auto j = body_of(req);
        WeightOp op;
        op.kind = WeightOp::Kind::kDisk;
        failpoint("sync");  // a weight update received, not yet applied
        op.path = string_field(j, "model_path");
        op.version = version_field(j);
        const auto [status, message] = submit_op(op);
        json_reply(res, status, Json({{"success", status == 200}, {"message", message}, {"policy_version", version()}}).dump());
      } catch (const ApiError& e) {
        json_reply(res, e.status, e.body());
      }
    }));
    auto adapter_op = [=, this](WeightOp::Kind kind) {
      return [=, this](const httplib::Request& req, httplib::Response& res) {
        try {
          const auto j = body_of(req);
          WeightOp op;
          op.kind = kind;
          op.name = string_field(j, "lora_name");
          if (op.name == options.model_name) throw ApiError(400, "lora_name: the base model's name", "lora_name");
          if (kind == WeightOp::Kind::kLoadAdapter) op.path = string_field(j, "lora_path");
          op.version = version_field(j);
          const auto [status, message] = submit_op(op);
          if (status == 200) {
            res.status = 200;
            res.set_content(message, "text/plain");
          } else {
            json_reply(res, status, ApiError(status, message).body());
          }
        } catch (const ApiError& e) {
          json_reply(res, e.status, e.body());
        }
      };
    };
    http.Post("/v1/load_lora_adapter", handled(adapter_op(WeightOp::Kind::kLoadAdapter)));
    http.Post("/v1/unload_lora_adapter", handled(adapter_op(WeightOp::Kind::kUnloadAdapter)));
  }
};

Server::Server(std::shared_ptr<Transformer> model, std::shared_ptr<const Tokenizer> tokenizer, EngineConfig engine,
               ServeOptions options) {
  if (!loopback(options.host) && options.api_key.empty()) {
    throw_user_error("--host {}: serving beyond this machine needs --api-key KEY (clients send Authorization: Bearer KEY)",
                     options.host);
  }
  if (options.max_connections < 1) throw_user_error("--max-connections {}: at least 1", options.max_connections);
  if (!(options.request_timeout > 0)) throw_user_error("--request-timeout {}: must be above 0 seconds", options.request_timeout);
  if (options.max_body_mb < 1) throw_user_error("--max-body-mb {}: at least 1", options.max_body_mb);
  if (options.max_request_tokens < 0) throw_user_error("--max-request-tokens {}: 0 (the KV cache's tokens) or more", options.max_request_tokens);
  s_ = std::make_unique<State>(std::move(model), std::move(tokenizer), engine, std::move(options));
  s_->routes();
}

Server::~Server() { stop(); }

void Server::load_adapter(const std::string& name, const fs::path& dir) {
  if (!is_peft_adapter_dir(dir)) throw_user_error("--adapter {}: not a PEFT adapter directory (no adapter_config.json)", dir.string());
  read_peft_adapter(dir);
  std::lock_guard<std::mutex> lock(s_->m);
  s_->adapters[name] = dir;
}

void Server::serve(const std::function<void(int port)>& on_listening) {
  auto& http = s_->http;
  // cpp-httplib listens with a backlog of 5: a burst of clients (200 streams opening at once)
  // overflows it and some connections stall or fail. The socket is listened on again with the
  // system's maximum once bound (Linux takes a second listen as a new backlog).
  int socket_fd = -1;
  // SO_REUSEADDR (a restarted server binds while old connections linger) but not cpp-httplib's
  // SO_REUSEPORT, with which a second server on a port in use started and took half its requests.
  http.set_socket_options([&socket_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    socket_fd = sock;
  });
  int port = s_->options.port;
  if (port == 0) {
    port = http.bind_to_any_port(s_->options.host);
    if (port <= 0) throw_user_error("--host {}: cannot listen there", s_->options.host);
  } else if (!http.bind_to_port(s_->options.host, port)) {
    throw_user_error("--host {} --port {}: cannot listen there (is the port in use?)", s_->options.host, port);
  }
  if (socket_fd >= 0) ::listen(socket_fd, SOMAXCONN);
  s_->port = port;
  s_->listen_fd = socket_fd;
  {
    std::lock_guard<std::mutex> lock(s_->m);
    if (s_->stopping) return;  // stopped before it began
    s_->async = std::make_unique<AsyncEngine>(*s_->engine, [this](const std::string& name) { s_->activate(name); },
                                              s_->start_version);
  }
  if (on_listening) on_listening(port);
  http.listen_after_bind();
  s_->async->stop();  // the requests still waiting hear that the server is shutting down
}

void Server::stop() {
  {
    std::lock_guard<std::mutex> lock(s_->m);
    s_->stopping = true;
    if (s_->async) s_->async->stop();
  }
  s_->http.stop();
}

}  // namespace rlcpp
