#include "rl/rollout/rollout_servers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <sstream>

#include "engine/stop_strings.h"
#include "openai/server_pool.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "rl/rollout/model_reward.h"
#include "rl/rollout/rollout.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;

RolloutServers::RolloutServers(const RemoteOptions& remote, std::string base_model, const fs::path& run_dir)
    : base_model_(std::move(base_model)) {
  RemoteRolloutOptions options;
  options.kind = remote.backend;
  options.urls = split_urls(remote.url);
  if (const char* key = std::getenv("RLCPP_ROLLOUT_API_KEY")) options.api_key = key;
  options.model = remote.model;
  options.request_timeout_s = remote.timeout;
  options.unavailable_timeout_s = remote.timeout;  // every server down that long: the run stops, naming them
  options.max_requests_per_server = remote.concurrency;
  options.start_dir = base_model_;
  remote_ = std::make_unique<RemoteRollout>(options);
  weights_dir_ = remote.weights_dir.empty() ? run_dir / "rollout-weights" : fs::path(remote.weights_dir);
  std::error_code ec;
  fs::create_directories(weights_dir_, ec);
  if (ec || ::access(weights_dir_.c_str(), W_OK) != 0) {
    throw_user_error("--rollout-weights-dir {}: cannot write there ({}); give a folder this trainer can write and the "
                     "servers can read", weights_dir_.string(), ec ? ec.message() : std::strerror(errno));
  }
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

fs::path version_dir(const fs::path& weights_dir, int64_t version) { return weights_dir / fmt::format("v{}", version); }

}  // namespace

double RolloutServers::write(const Transformer& policy, int64_t version) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = version_dir(weights_dir_, version);
  const fs::path tmp = weights_dir_ / fmt::format(".v{}.tmp", version);
  fs::remove_all(tmp);
  save_policy_dir(tmp, policy, base_model_, base_model_, false);
  fs::remove_all(dir);
  fs::rename(tmp, dir);  // a server never reads a half-written version
  adapter_ = policy.has_adapters();
  return seconds_since(start);
}

double RolloutServers::apply(int64_t version) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = version_dir(weights_dir_, version);
  remote_->set_weights({version, dir, adapter_});
  remote_->sync();
  // Servers that missed this version get it when they answer again: older ones are not needed
  // (newer ones, written for a partial rollout, are).
  for (const auto& entry : fs::directory_iterator(weights_dir_)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 1 && name[0] == 'v' && name.find_first_not_of("0123456789", 1) == std::string::npos &&
        std::stoll(name.substr(1)) < version) {
      std::error_code ec;
      fs::remove_all(entry.path(), ec);
    }
  }
  const double seconds = seconds_since(start);
  spdlog::debug("policy version {} published to the rollout servers in {:.2f} s", version, seconds);
  return seconds;
}

std::vector<GeneratedSample> ChunkedRollout::generate(const std::vector<GenerationRequest>& requests) {
  if (at_.empty()) return remote_.generate(requests);
  int64_t span = 0;  // the positions this call covers
  for (const auto& r : requests) span = std::max(span, r.params.max_new_tokens);
  for (; !at_.empty() && at_.front() <= offset_; at_.pop_front()) next_version_();  // passed by earlier calls
  std::vector<int64_t> at;  // this call's switch points, in its own response positions
  for (; !at_.empty() && at_.front() < offset_ + span; at_.pop_front()) at.push_back(at_.front() - offset_);
  offset_ += span;
  if (at.empty()) return remote_.generate(requests);
  struct Sequence {
    size_t request = 0;
    PiecedSample piece;
    bool done = false;
  };
  std::vector<Sequence> all;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (int64_t s = 0; s < requests[r].n; ++s) {
      Sequence q;
      q.request = r;
      q.piece.out.request = static_cast<int64_t>(r);
      q.piece.out.sample = s;
      all.push_back(std::move(q));
    }
  }
  for (size_t chunk = 0; chunk <= at.size(); ++chunk) {
    const int64_t end = chunk < at.size() ? at[chunk] : INT64_MAX;  // the chunk's last response position
    std::vector<GenerationRequest> calls;
    std::vector<size_t> first;  // per call: the sequence of its first sample
    if (chunk == 0) {  // the prompts' n samples in one request each, as without chunks
      for (size_t r = 0, k = 0; r < requests.size(); k += static_cast<size_t>(requests[r].n), ++r) {
        calls.push_back(requests[r]);
        calls.back().params.max_new_tokens = std::min(requests[r].params.max_new_tokens, end);
        first.push_back(k);
      }
    } else {
      for (size_t k = 0; k < all.size(); ++k) {
        if (all[k].done) continue;
        const GenerationRequest& request = requests[all[k].request];
        calls.push_back(all[k].piece.continuation(request, std::min(request.params.max_new_tokens, end)));
        first.push_back(k);
      }
      if (calls.empty()) {  // every sample ended first: the next call, or the source, takes the rest
        for (size_t k = at.size(); k-- > chunk - 1;) at_.push_front(offset_ - span + at[k]);
        break;
      }
      next_version_();
    }
    for (auto& result : remote_.generate(calls)) {
      Sequence& q = all[first[static_cast<size_t>(result.request)] + static_cast<size_t>(result.sample)];
      const FinishReason reason = result.finish_reason;
      q.piece.append(std::move(result));
      // Only the chunk's own length limit lets the sample go on, and no stop string across the
      // chunks (which also makes its text whole, not chunk by chunk).
      const int64_t response = static_cast<int64_t>(q.piece.out.token_ids.size());
      const int64_t budget = requests[q.request].params.max_new_tokens;
      q.done = reason != FinishReason::kLength || response < std::min(end, budget) || response >= budget;
      if (q.piece.pieces > 1 && settle_stop_strings(q.piece.out, tokenizer_, requests[q.request].params.stop_strings)) {
        q.done = true;
      }
    }
  }
  std::vector<GeneratedSample> out;
  for (auto& q : all) out.push_back(std::move(q.piece.out));
  return out;
}

ServerSource::ServerSource(const RunConfig& c, const fs::path& run_dir, std::shared_ptr<Transformer> policy,
                           const Tokenizer& tokenizer)
    : c_(c), policy_(std::move(policy)), servers_(c.remote, c.model.path, run_dir), reward_(make_run_reward(c.reward, c.runtime.device, c.runtime.dtype)),
      chunked_(servers_.backend(), tokenizer) {
  generator_ = std::make_unique<RolloutGenerator>(c, policy_->config(), tokenizer, &chunked_, nullptr, nullptr, &reward_);
}

ServerSource::~ServerSource() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
  }
  written_cv_.notify_all();
}

void ServerSource::take_next_version() {
  int64_t version = 0;
  {
    trace::Span wait("switch_wait");
    std::unique_lock<std::mutex> lock(m_);
    written_cv_.wait(lock, [&] { return !written_.empty() || stopping_; });
    if (written_.empty()) throw InternalError("the run stopped while a partial rollout waited for its next version");
    version = written_.front();
    written_.pop_front();
  }
  servers_.apply(version);
  std::lock_guard<std::mutex> lock(m_);
  applied_ = version;
}

double ServerSource::apply_latest() {
  std::lock_guard<std::mutex> lock(m_);
  written_.clear();
  if (published_ < 0 || applied_ == published_) return 0;
  applied_ = published_;
  return servers_.apply(published_);
}

void ServerSource::submit(std::vector<PromptPick> picks, const WeightSwitches& switches) {
  RLCPP_CHECK(!switches.asap, "--async-switch asap with rollout servers (validation refuses it)");
  if (switches.during_round) {
    apply_latest();  // what the round before did not take
    partial_in_flight_ = true;
  }
  in_flight_.push_back(std::async(std::launch::async, [this, picks = std::move(picks), switches] {
    for (int64_t k = 0; k < switches.start_after; ++k) take_next_version();
    chunked_.set_switches(switches.at, [this] { take_next_version(); });
    return generator_->generate(picks);
  }));
}

RoundReceipt ServerSource::collect(std::deque<SampleGroup>& buffer) {
  RLCPP_CHECK(!in_flight_.empty(), "collecting a round that was never submitted");
  auto future = std::move(in_flight_.front());
  in_flight_.pop_front();
  RolloutRound round = future.get();  // a round's error (every server down, a broken reward) is thrown here
  partial_in_flight_ = false;
  RoundReceipt receipt;
  receipt.generated = static_cast<int64_t>(round.kept.size() + round.discarded.size());
  receipt.kept = receipt.kept_all = static_cast<int64_t>(round.kept.size());
  receipt.generate_seconds = round.generate_seconds;
  receipt.reward_seconds = round.reward_seconds;
  receipt.discarded = std::move(round.discarded);
  for (auto& g : round.kept) buffer.push_back(std::move(g));
  return receipt;
}

double ServerSource::publish(int64_t version, bool resend) {
  const bool fresh = version != published_ || resend;
  const double seconds = fresh ? servers_.write(*policy_, version) : 0.0;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (fresh) published_ = version;
    // A partial round generating takes it between its chunks; the servers are its thread's then.
    if (partial_in_flight_) {
      if (fresh) {
        written_.push_back(version);
        written_cv_.notify_one();
      }
      return seconds;
    }
  }
  return seconds + apply_latest();
}

void ServerSource::add_figures(nlohmann::ordered_json& extra) {
  const RemoteRolloutStats remote = servers_.backend().stats();
  extra["rollout_servers"] = {{"requests", remote.requests}, {"retries", remote.retries},
                              {"server_failures", remote.server_failures}, {"weight_pushes", remote.pushes}};
}

std::string ServerSource::describe() const {
  return fmt::format("the {} servers at {} (policy written to {})", rollout_backend_kinds().name(c_.remote.backend),
                     c_.remote.url, servers_.weights_dir().string());
}

}  // namespace rlcpp
