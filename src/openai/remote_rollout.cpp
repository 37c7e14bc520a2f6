#include "openai/remote_rollout.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "openai/protocol.h"
#include "openai/server_pool.h"
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

}  // namespace

struct RemoteRollout::State {
  // What a server holds, beside the pool's view of it (same index).
  struct Server {
    std::mutex sync_mutex;      // one weight update at a time
    std::atomic<int64_t> synced{-1};  // the version it holds (-1: unknown, brought up to date before its next request)
    std::string adapter;        // our adapter it serves ("": none)
    std::string base_model;     // its base model's served name ("": not asked yet)
    int64_t max_model_len = 0;  // from /v1/models (0: unknown)
  };

  explicit State(RemoteRolloutOptions o)
      : options(std::move(o)),
        pool({options.urls, options.api_key, options.max_requests_per_server, options.unavailable_timeout_s,
              "rollout server", "--rollout-url"}) {
    for (size_t k = 0; k < pool.size(); ++k) servers.push_back(std::make_unique<Server>());
  }

  RemoteRolloutOptions options;
  ServerPool pool;
  std::vector<std::unique_ptr<Server>> servers;
  RemoteWeights weights;
  mutable std::mutex m;  // stats
  RemoteRolloutStats stats;

  // Sets a server aside after a failure; a server that comes back may have lost the weights it was sent.
  void mark_down(size_t k, const std::string& why) {
    servers[k]->synced = -1;
    pool.mark_down(k, why);
  }

  // The served name of a weights version's adapter.
  std::string adapter_name(int64_t version) const { return fmt::format("{}-v{}", options.adapter_name, version); }

  std::string update_path(bool adapter, bool load) const {
    if (!adapter) return "/update_weights_from_disk";
    const std::string prefix = options.kind == RolloutBackendKind::kSglang ? "" : "/v1";
    return prefix + (load ? "/load_lora_adapter" : "/unload_lora_adapter");
  }

  // A 4xx to a weight update or model list: the server cannot do what the run needs.
  [[noreturn]] void refuse(size_t k, const std::string& path, const HttpReply& r) const {
    std::string hint;
    if (options.kind == RolloutBackendKind::kVllm && r.status == 404) {
      hint = " (vLLM serves the adapter endpoints only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)";
    }
    throw_user_error("{}{}: answered {}: {}{}", pool.url(k), path, r.status, reply_message(r), hint);
  }

  // A server that reports a policy version other than 0 (rlcpp serve does, on /health; vLLM and
  // SGLang say none) holds weights some run pushed since it started: it loads the run's starting
  // model again, as version 0. False when it did not answer (then set aside).
  bool restore_start(size_t k) {
    if (options.start_dir.empty()) return true;
    const HttpReply health = pool.exchange(k, "GET", "/health", "", 30);
    if (health.status < 0 || health.status >= 500) {
      mark_down(k, reply_message(health));
      return false;
    }
    const Json j = Json::parse(health.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("policy_version") || !j["policy_version"].is_number_integer() ||
        j["policy_version"].get<int64_t>() == 0) {
      return true;
    }
    spdlog::info("{} serves policy version {} (weights pushed since it started): loading this run's model {} back into it",
             pool.url(k), j["policy_version"].get<int64_t>(), options.start_dir.string());
    const Json body = {{"model_path", fs::absolute(options.start_dir).string()}, {"policy_version", 0}};
    const HttpReply r = pool.exchange(k, "POST", update_path(false, true), body.dump(), options.request_timeout_s);
    if (r.status < 0 || r.status >= 500) {
      mark_down(k, reply_message(r));
      return false;
    }
    if (r.status != 200) refuse(k, update_path(false, true), r);
    std::lock_guard<std::mutex> lock(m);
    ++stats.pushes;
    return true;
  }

  // Brings server k to `w` (under its sync_mutex). False when it did not answer (then set aside).
  bool sync_server(size_t k, const RemoteWeights& w) {
    Server& s = *servers[k];
    std::lock_guard<std::mutex> lock(s.sync_mutex);
    if (s.synced == w.version && !s.base_model.empty()) return true;
    const auto start = Clock::now();
    if (s.base_model.empty()) {
      const HttpReply r = pool.exchange(k, "GET", "/v1/models", "", 30);
      if (r.status < 0 || r.status >= 500) {
        mark_down(k, reply_message(r));
        return false;
      }
      if (r.status != 200) refuse(k, "/v1/models", r);
      const Json j = Json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
          !j["data"][0].contains("id")) {
        throw_user_error("{}/v1/models: expected {{\"data\": [{{\"id\": ...}}]}}, got {}", pool.url(k), r.body.substr(0, 200));
      }
      std::string name = options.model;
      if (name.empty()) name = j["data"][0]["id"].get<std::string>();
      for (const auto& m : j["data"]) {
        if (m.value("id", "") == name && m.contains("max_model_len") && m["max_model_len"].is_number_integer()) {
          s.max_model_len = m["max_model_len"].get<int64_t>();
        }
      }
      s.base_model = name;
      // The starting weights (no directory) are the model each server started with, and an
      // adapter goes on its base: a server an earlier run updated gets the run's model back.
      if ((w.dir.empty() || w.adapter) && !restore_start(k)) return false;
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
      const HttpReply r = pool.exchange(k, "POST", path, body.dump(), options.request_timeout_s);
      if (r.status < 0 || r.status >= 500) {
        mark_down(k, reply_message(r));
        return false;
      }
      const bool exists = r.status == 400 && reply_message(r).find("already") != std::string::npos;  // loaded before
      if (r.status != 200 && !exists) refuse(k, path, r);
      const Json j = Json::parse(r.body, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("success") && j["success"] == false) refuse(k, path, r);
    }
    // The adapter it served before goes (best effort: a server that restarted has none).
    if (!s.adapter.empty() && s.adapter != loaded_adapter) {
      pool.exchange(k, "POST", update_path(true, false), Json({{"lora_name", s.adapter}}).dump(), 60);
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
    pool.mark_up(k);
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
      const size_t k = pool.acquire(abort);
      struct Release {
        ServerPool& pool;
        size_t k;
        ~Release() { pool.release(k); }
      } release_guard{pool, k};
      Server& s = *servers[k];
      if (!sync_server(k, w)) {
        std::lock_guard<std::mutex> lock(m);
        ++stats.retries;
        continue;
      }
      const HttpReply r = pool.exchange(k, "POST", "/v1/completions", request_body(g, s, w).dump(), options.request_timeout_s);
      if (r.status < 0 || r.status >= 500 || r.status == 408 || r.status == 429) {
        mark_down(k, r.status < 0 ? r.error : fmt::format("{}: {}", r.status, reply_message(r)));
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
        throw_user_error("{}/v1/completions answered {}: {}", pool.url(k), r.status, reply_message(r));
      }
      std::vector<GeneratedSample> samples;
      try {
        samples = parse_completion_samples(r.body, g.n, w.version, pool.url(k));
      } catch (const UserError& e) {  // a 200 that is not an answer (a proxy's page, a broken server): set aside too
        mark_down(k, e.what());
        std::lock_guard<std::mutex> lock(m);
        ++stats.retries;
        continue;
      }
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
                           pool.url(k), stale_answers, aborted ? "aborted samples" : "another policy version", w.version);
        }
        {
          std::lock_guard<std::mutex> lock(s.sync_mutex);
          s.synced = -1;
        }
        std::lock_guard<std::mutex> lock(m);
        ++stats.retries;
        continue;
      }
      pool.mark_up(k);
      std::lock_guard<std::mutex> lock(m);
      ++stats.requests;
      return samples;
    }
  }
};

RemoteRollout::RemoteRollout(RemoteRolloutOptions options) {
  if (options.max_requests_per_server < 1) throw_user_error("--rollout-concurrency {}: at least 1", options.max_requests_per_server);
  s_ = std::make_unique<State>(std::move(options));
}

RemoteRollout::~RemoteRollout() = default;

std::vector<GeneratedSample> RemoteRollout::generate(const std::vector<GenerationRequest>& requests) {
  std::vector<std::optional<std::vector<GeneratedSample>>> results(requests.size());
  s_->pool.restart_clock();
  for_each_request(requests.size(), s_->pool.size() * static_cast<size_t>(s_->options.max_requests_per_server),
                   [&](size_t k, const std::atomic<bool>& abort) { results[k] = s_->run_one(requests[k], abort); });
  std::vector<GeneratedSample> out;
  for (size_t k = 0; k < requests.size(); ++k) {
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
  for (size_t k = 0; k < s_->servers.size(); ++k) {
    threads.emplace_back([&, k] {
      try {
        s_->sync_server(k, w);  // one that does not answer gets the weights when it is back
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
  RemoteRolloutStats out = s_->stats;
  out.server_failures = s_->pool.failures();
  return out;
}

const RemoteRolloutOptions& RemoteRollout::options() const { return s_->options; }

}  // namespace rlcpp
