#include "openai/remote_rollout.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "openai/protocol.h"
#include "util/error.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const EnumTable<RolloutBackendKind>& rollout_backend_kinds() {
  static const EnumTable<RolloutBackendKind> table(
      "rollout backend",
      {{RolloutBackendKind::kNative, "native", "the built-in engine (in this process, or rollout workers under mpirun)"},
       {RolloutBackendKind::kOpenai, "openai",
        "OpenAI-compatible servers at --rollout-url (rlcpp serve): weights by /update_weights_from_disk, adapters by "
        "/v1/load_lora_adapter"},
       {RolloutBackendKind::kVllm, "vllm", "vLLM servers at --rollout-url: LoRA runs only (adapters by /v1/load_lora_adapter)"},
       {RolloutBackendKind::kSglang, "sglang",
        "SGLang servers at --rollout-url: weights by /update_weights_from_disk, adapters by /load_lora_adapter"}});
  return table;
}

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "http://host:port[/v1]" (or "host:port"): the scheme, host and port; a UserError otherwise.
std::string base_url(const std::string& given) {
  std::string url = given;
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  if (url.rfind("https://", 0) == 0) {
    throw_user_error("--rollout-url {}: https is not supported; reach the server over http (a private network, or an "
                     "ssh tunnel)", given);
  }
  if (url.rfind("http://", 0) != 0) url = "http://" + url;
  const std::string rest = url.substr(7);
  const auto colon = rest.rfind(':');
  if (rest.empty() || rest.find('/') != std::string::npos || colon == std::string::npos || colon + 1 == rest.size() ||
      rest.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    throw_user_error("--rollout-url {}: expected http://HOST:PORT (optionally ending in /v1)", given);
  }
  return url;
}

// An HTTP exchange's outcome: status -1 when no answer came (refused, reset, timed out).
struct Reply {
  int status = -1;
  std::string body;
  std::string error;  // the transport's error when status is -1
};

// A message for logs and errors from an answer: OpenAI's error.message, else the body's start.
std::string reply_message(const Reply& r) {
  if (r.status < 0) return r.error;
  const Json j = Json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message")) {
      return j["error"]["message"].is_string() ? j["error"]["message"].get<std::string>() : j["error"]["message"].dump();
    }
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
    if (j.contains("detail")) return j["detail"].is_string() ? j["detail"].get<std::string>() : j["detail"].dump();
  }
  return r.body.substr(0, 300);
}

}  // namespace

struct RemoteRollout::State {
  struct Server {
    std::string url;
    std::mutex sync_mutex;      // one weight update at a time
    std::atomic<int64_t> synced{-1};  // the version it holds (-1: unknown, brought up to date before its next request)
    std::string adapter;        // our adapter it serves ("": none)
    std::string base_model;     // its base model's served name ("": not asked yet)
    int64_t max_model_len = 0;  // from /v1/models (0: unknown)
    // Under `m`:
    int64_t in_flight = 0;
    Clock::time_point down_until{};
    double backoff_s = 0.5;
    bool down = false;
  };

  RemoteRolloutOptions options;
  std::vector<std::unique_ptr<Server>> servers;
  RemoteWeights weights;
  mutable std::mutex m;
  std::condition_variable cv;
  Clock::time_point last_answer = Clock::now();
  RemoteRolloutStats stats;

  httplib::Headers headers() const {
    httplib::Headers h;
    if (!options.api_key.empty()) h.emplace("Authorization", "Bearer " + options.api_key);
    return h;
  }

  Reply exchange(const Server& server, const std::string& method, const std::string& path, const std::string& body,
                 double timeout_s) const {
    httplib::Client client(server.url);
    client.set_connection_timeout(5, 0);
    const auto t = std::chrono::duration<double>(timeout_s);
    client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    client.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    auto result = method == "GET" ? client.Get(path.c_str(), headers())
                                  : client.Post(path.c_str(), headers(), body, "application/json");
    Reply r;
    if (!result) {
      r.error = httplib::to_string(result.error());
      return r;
    }
    r.status = result->status;
    r.body = result->body;
    return r;
  }

  // Sets a server aside after a failure; it is tried again after a pause that doubles up to 10 s.
  void mark_down(Server& s, const std::string& why) {
    std::lock_guard<std::mutex> lock(m);
    s.synced = -1;  // a server that comes back may have lost the weights it was sent
    s.down_until = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(s.backoff_s * 1e6));
    if (!s.down) spdlog::warn("rollout server {} failed ({}); its requests go to the others, retried in {:.1f} s", s.url, why, s.backoff_s);
    s.down = true;
    s.backoff_s = std::min(10.0, s.backoff_s * 2);
    ++stats.server_failures;
    cv.notify_all();
  }

  void mark_up(Server& s) {
    std::lock_guard<std::mutex> lock(m);
    if (s.down) spdlog::info("rollout server {} answers again", s.url);
    s.down = false;
    s.backoff_s = 0.5;
    last_answer = Clock::now();
  }

  // The server with the fewest requests in flight among those not set aside and below the limit;
  // waits for one. A UserError once none has answered for unavailable_timeout_s.
  Server& acquire(const std::atomic<bool>& abort) {
    std::unique_lock<std::mutex> lock(m);
    for (;;) {
      if (abort) throw_user_error("rollout generation stopped after another request failed");
      Server* best = nullptr;
      bool any_up = false;
      const auto now = Clock::now();
      for (auto& s : servers) {
        if (now < s->down_until) continue;
        any_up = true;
        if (s->in_flight >= options.max_requests_per_server) continue;
        if (best == nullptr || s->in_flight < best->in_flight) best = s.get();
      }
      if (best != nullptr) {
        ++best->in_flight;
        return *best;
      }
      if (!any_up && seconds_since(last_answer) > options.unavailable_timeout_s) {
        std::string urls;
        for (const auto& s : servers) urls += (urls.empty() ? "" : ", ") + s->url;
        throw_user_error("no rollout server has answered for {:.0f} s ({}): start them again, or check --rollout-url",
                         seconds_since(last_answer), urls);
      }
      cv.wait_for(lock, std::chrono::milliseconds(100));
    }
  }

  void release(Server& s) {
    std::lock_guard<std::mutex> lock(m);
    --s.in_flight;
    cv.notify_all();
  }

  // The served name of a weights version's adapter.
  std::string adapter_name(int64_t version) const { return fmt::format("{}-v{}", options.adapter_name, version); }

  std::string update_path(bool adapter, bool load) const {
    if (!adapter) return "/update_weights_from_disk";
    const std::string prefix = options.kind == RolloutBackendKind::kSglang ? "" : "/v1";
    return prefix + (load ? "/load_lora_adapter" : "/unload_lora_adapter");
  }

  // A 4xx to a weight update or model list: the server cannot do what the run needs.
  [[noreturn]] void refuse(const Server& s, const std::string& path, const Reply& r) const {
    std::string hint;
    if (options.kind == RolloutBackendKind::kVllm && r.status == 404) {
      hint = " (vLLM serves the adapter endpoints only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)";
    }
    throw_user_error("{}{}: answered {}: {}{}", s.url, path, r.status, reply_message(r), hint);
  }

  // Brings a server to `w` (under its sync_mutex). False when it did not answer (then set aside).
  bool sync_server(Server& s, const RemoteWeights& w) {
    std::lock_guard<std::mutex> lock(s.sync_mutex);
    if (s.synced == w.version && !s.base_model.empty()) return true;
    const auto start = Clock::now();
    if (s.base_model.empty()) {
      const Reply r = exchange(s, "GET", "/v1/models", "", 30);
      if (r.status < 0 || r.status >= 500) {
        mark_down(s, reply_message(r));
        return false;
      }
      if (r.status != 200) refuse(s, "/v1/models", r);
      const Json j = Json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
          !j["data"][0].contains("id")) {
        throw_user_error("{}/v1/models: expected {{\"data\": [{{\"id\": ...}}]}}, got {}", s.url, r.body.substr(0, 200));
      }
      std::string name = options.model;
      if (name.empty()) name = j["data"][0]["id"].get<std::string>();
      for (const auto& m : j["data"]) {
        if (m.value("id", "") == name && m.contains("max_model_len") && m["max_model_len"].is_number_integer()) {
          s.max_model_len = m["max_model_len"].get<int64_t>();
        }
      }
      s.base_model = name;
    }
    std::string loaded_adapter;
    if (!w.dir.empty()) {
      Json body;
      if (w.adapter) {
        loaded_adapter = adapter_name(w.version);
        body = {{"lora_name", loaded_adapter}, {"lora_path", fs::absolute(w.dir).string()}, {"policy_version", w.version}};
      } else {
        body = {{"model_path", fs::absolute(w.dir).string()}, {"policy_version", w.version}};
      }
      const std::string path = update_path(w.adapter, true);
      const Reply r = exchange(s, "POST", path, body.dump(), options.request_timeout_s);
      if (r.status < 0 || r.status >= 500) {
        mark_down(s, reply_message(r));
        return false;
      }
      const bool exists = r.status == 400 && reply_message(r).find("already") != std::string::npos;  // loaded before
      if (r.status != 200 && !exists) refuse(s, path, r);
      const Json j = Json::parse(r.body, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("success") && j["success"] == false) refuse(s, path, r);
    }
    // The adapter it served before goes (best effort: a server that restarted has none).
    if (!s.adapter.empty() && s.adapter != loaded_adapter) {
      exchange(s, "POST", update_path(true, false), Json({{"lora_name", s.adapter}}).dump(), 60);
    }
    s.adapter = loaded_adapter;
    s.synced = w.version;
    {
      std::lock_guard<std::mutex> lock_stats(m);
      if (!w.dir.empty()) {
        ++stats.pushes;
        stats.push_seconds += seconds_since(start);
      }
    }
    mark_up(s);
    return true;
  }

  Json request_body(const GenerationRequest& g, const Server& s, const RemoteWeights& w) const {
    return completion_request_body(g, w.adapter && !w.dir.empty() ? adapter_name(w.version) : s.base_model, s.max_model_len);
  }

  // One prompt's samples from some server: retried elsewhere until one answers in full.
  std::vector<GeneratedSample> run_one(const GenerationRequest& g, const std::atomic<bool>& abort) {
    const RemoteWeights w = weights;  // fixed while generate runs
    int64_t stale_answers = 0;
    for (;;) {
      Server& s = acquire(abort);
      struct Release {
        State* state;
        Server& server;
        ~Release() { state->release(server); }
      } release_guard{this, s};
      if (!sync_server(s, w)) {
        std::lock_guard<std::mutex> lock(m);
        ++stats.retries;
        continue;
      }
      const Reply r = exchange(s, "POST", "/v1/completions", request_body(g, s, w).dump(), options.request_timeout_s);
      if (r.status < 0 || r.status >= 500 || r.status == 408 || r.status == 429) {
        mark_down(s, r.status < 0 ? r.error : fmt::format("{}: {}", r.status, reply_message(r)));
        std::lock_guard<std::mutex> lock(m);
        ++stats.retries;
        continue;
      }
      if (r.status == 404 && w.adapter && !w.dir.empty() && stale_answers < 3) {
        // The adapter is unknown there (a restarted server): load it again.
        ++stale_answers;
        std::lock_guard<std::mutex> lock(s.sync_mutex);
        s.synced = -1;
        continue;
      }
      if (r.status != 200) {
        throw_user_error("{}/v1/completions answered {}: {}", s.url, r.status, reply_message(r));
      }
      auto samples = parse_completion_samples(r.body, g.n, w.version, s.url);
      const bool aborted = std::any_of(samples.begin(), samples.end(),
                                       [](const GeneratedSample& x) { return x.finish_reason == FinishReason::kAbort; });
      // A server that reports another version than it was sent is behind (restarted, or updated by
      // someone else); the servers' own model (no directory sent) is taken as it is.
      bool behind = false;
      for (auto& x : samples) {
        if (w.dir.empty()) x.policy_version = w.version;
        behind = behind || x.policy_version != w.version;
      }
      if (aborted || behind) {
        if (++stale_answers > 3) {
          throw_user_error("{}: answered {} times with {} (policy version {} expected); is another trainer updating it?",
                           s.url, stale_answers, aborted ? "aborted samples" : "another policy version", w.version);
        }
        {
          std::lock_guard<std::mutex> lock(s.sync_mutex);
          s.synced = -1;
        }
        std::lock_guard<std::mutex> lock(m);
        ++stats.retries;
        continue;
      }
      mark_up(s);
      std::lock_guard<std::mutex> lock(m);
      ++stats.requests;
      return samples;
    }
  }
};

RemoteRollout::RemoteRollout(RemoteRolloutOptions options) : s_(std::make_unique<State>()) {
  if (options.urls.empty()) throw_user_error("--rollout-url: give at least one server (http://HOST:PORT[,...])");
  if (options.max_requests_per_server < 1) throw_user_error("--rollout-concurrency {}: at least 1", options.max_requests_per_server);
  for (const auto& url : options.urls) {
    auto server = std::make_unique<State::Server>();
    server->url = base_url(url);
    for (const auto& other : s_->servers) {
      if (other->url == server->url) throw_user_error("--rollout-url: {} is given twice", url);
    }
    s_->servers.push_back(std::move(server));
  }
  s_->options = std::move(options);
}

RemoteRollout::~RemoteRollout() = default;

std::vector<GeneratedSample> RemoteRollout::generate(const std::vector<GenerationRequest>& requests) {
  const size_t n = requests.size();
  std::vector<std::optional<std::vector<GeneratedSample>>> results(n);
  std::atomic<bool> abort{false};
  std::mutex m;
  std::deque<size_t> todo;
  for (size_t k = 0; k < n; ++k) todo.push_back(k);
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(s_->m);
    s_->last_answer = Clock::now();
  }
  auto work = [&] {
    for (;;) {
      size_t k;
      {
        std::lock_guard<std::mutex> lock(m);
        if (todo.empty() || abort) return;
        k = todo.front();
        todo.pop_front();
      }
      try {
        results[k] = s_->run_one(requests[k], abort);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        abort = true;
        return;
      }
    }
  };
  const size_t n_threads = std::min(n, s_->servers.size() * static_cast<size_t>(s_->options.max_requests_per_server));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n_threads; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  std::vector<GeneratedSample> out;
  for (size_t k = 0; k < n; ++k) {
    for (auto& s : *results[k]) {
      s.request = static_cast<int64_t>(k);
      out.push_back(std::move(s));
    }
  }
  return out;
}

void RemoteRollout::set_weights(RemoteWeights weights) {
  std::lock_guard<std::mutex> lock(s_->m);
  s_->weights = std::move(weights);
}

void RemoteRollout::sync() {
  const RemoteWeights w = s_->weights;
  std::vector<std::thread> threads;
  std::mutex m;
  std::exception_ptr error;
  for (auto& server : s_->servers) {
    threads.emplace_back([&, s = server.get()] {
      try {
        s_->sync_server(*s, w);  // one that does not answer gets the weights when it is back
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

const RemoteWeights& RemoteRollout::weights() const { return s_->weights; }

RemoteRolloutStats RemoteRollout::stats() const {
  std::lock_guard<std::mutex> lock(s_->m);
  return s_->stats;
}

const RemoteRolloutOptions& RemoteRollout::options() const { return s_->options; }

}  // namespace rlcpp
