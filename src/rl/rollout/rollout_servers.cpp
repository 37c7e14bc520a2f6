#include "rl/rollout/rollout_servers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <sstream>

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
  cut_ = false;
  int64_t span = 0;  // the positions this call covers
  for (const auto& r : requests) span = std::max(span, r.params.max_new_tokens);
  // A call continuing the samples a switch point stopped asks each for the rest of the call's
  // positions; any other call starts where the last one ended.
  const bool continues = position_ < call_end_ && std::all_of(requests.begin(), requests.end(), [&](const auto& r) {
                           return r.params.max_new_tokens == call_end_ - position_;
                         });
  if (!continues) {
    for (; !at_.empty() && at_.front() <= call_end_; at_.pop_front()) {  // passed by earlier calls
      if (!next_version_()) continue;
      at_.pop_front();
      cut_ = true;  // a checkpoint's version: the call ends before it starts
      std::vector<GeneratedSample> none;
      for (size_t r = 0; r < requests.size(); ++r) {
        for (int64_t s = 0; s < requests[r].n; ++s) {
          GeneratedSample g;
          g.request = static_cast<int64_t>(r);
          g.sample = s;
          g.finish_reason = FinishReason::kAbort;
          g.policy_version = remote_.weights().version;
          none.push_back(std::move(g));
        }
      }
      return none;
    }
    position_ = call_end_;
    call_end_ = position_ + span;
  }
  const int64_t end = at_.empty() || at_.front() >= call_end_ ? call_end_ : at_.front();  // where this call stops
  if (end == call_end_) {
    position_ = call_end_;
    return remote_.generate(requests);
  }
  std::vector<GenerationRequest> calls = requests;
  for (auto& call : calls) call.params.max_new_tokens = std::min(call.params.max_new_tokens, end - position_);
  auto results = remote_.generate(calls);
  for (auto& result : results) {
    // Only the stop's own length limit lets a sample go on (the generator settles stop strings
    // across the pieces, which also makes its text whole, not piece by piece).
    const int64_t response = static_cast<int64_t>(result.token_ids.size());
    if (result.finish_reason == FinishReason::kLength && response >= end - position_ &&
        response < requests[static_cast<size_t>(result.request)].params.max_new_tokens) {
      result.finish_reason = FinishReason::kAbort;
      cut_ = true;
    }
  }
  if (cut_) {  // samples go on from the switch point, on the next version
    position_ = end;
    at_.pop_front();
    next_version_();
  } else {
    position_ = call_end_;  // the switch point is taken before the next call
  }
  return results;
}

ServerSource::ServerSource(const RunConfig& c, const fs::path& run_dir, std::shared_ptr<Transformer> policy,
                           const Tokenizer& tokenizer)
    : c_(c), policy_(std::move(policy)), servers_(c.remote, c.model.path, run_dir), reward_(make_run_reward(c.reward, c.runtime.device, c.runtime.dtype)),
      chunked_(servers_.backend()) {
  generator_ = std::make_unique<RolloutGenerator>(c, policy_->config(), tokenizer, &chunked_, nullptr, nullptr, &reward_);
  generator_->set_cut_hook([this](const RoundProgress& progress) {
    if (cut_due_) keep_cut(&progress);
  });
}

ServerSource::~ServerSource() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
  }
  written_cv_.notify_all();
}

bool ServerSource::cuts_rounds() const {
  return c_.staleness.partial_rollout && c_.staleness.cut_at_checkpoint && !c_.episode.multi_turn();
}

bool ServerSource::take_next_version() {
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
  {
    std::lock_guard<std::mutex> lock(m_);
    applied_ = version;
  }
  const auto& cuts = round_.switches.cuts;
  ++round_.taken;
  cut_due_ = std::find(cuts.begin(), cuts.end(), round_.taken) != cuts.end();
  return cut_due_;
}

void ServerSource::keep_cut(const RoundProgress* progress) {
  trace::Span span("cut");
  cut_due_ = false;
  RoundInFlight cut = round_;
  cut.step = chunked_.position();
  cut.call_end = chunked_.call_end();
  cut.version = servers_.version();
  if (progress != nullptr) cut.progress = *progress;
  {
    std::lock_guard<std::mutex> lock(m_);
    cut_ = std::move(cut);
  }
  cut_cv_.notify_all();
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
  RoundInFlight round;
  round.source = "servers";
  round.picks = std::move(picks);
  round.switches = switches;
  start_round(std::move(round));
}

void ServerSource::start_round(RoundInFlight round) {
  RLCPP_CHECK(in_flight_.empty(), "a round submitted to the rollout servers while another generates");
  std::optional<RoundProgress> progress = std::move(round.progress);
  round_ = std::move(round);
  cut_due_ = false;
  {
    std::lock_guard<std::mutex> lock(m_);
    cut_.reset();
    round_ended_ = false;
  }
  in_flight_.push_back(std::async(std::launch::async, [this, progress = std::move(progress)]() mutable {
    struct Ended {  // however the thread ends, a checkpoint waiting for a cut hears it
      ServerSource& source;
      ~Ended() {
        {
          std::lock_guard<std::mutex> lock(source.m_);
          source.round_ended_ = true;
        }
        source.cut_cv_.notify_all();
      }
    } ended{*this};
    const WeightSwitches& w = round_.switches;
    const int64_t passed = std::clamp<int64_t>(round_.taken - w.start_after, 0, static_cast<int64_t>(w.at.size()));
    chunked_.set_switches(std::vector<int64_t>(w.at.begin() + passed, w.at.end()), [this] { return take_next_version(); },
                          round_.step, round_.call_end);
    while (round_.taken < w.start_after) {
      if (take_next_version()) keep_cut(nullptr);
    }
    RolloutRound generated = generator_->generate(round_.picks, progress ? std::move(*progress) : RoundProgress{});
    // Checkpoints whose versions the round did not reach save it generated.
    if (std::any_of(w.cuts.begin(), w.cuts.end(), [&](int64_t cut) { return cut > round_.taken; })) round_.graded = generated;
    return generated;
  }));
}

std::vector<nlohmann::json> ServerSource::take_cut() {
  trace::Span wait("wait_cut");
  std::unique_lock<std::mutex> lock(m_);
  cut_cv_.wait(lock, [&] { return cut_.has_value() || round_ended_; });
  if (cut_) {
    RoundInFlight cut = std::move(*cut_);
    cut_.reset();
    return {to_json(cut)};
  }
  if (round_.graded) {  // the thread has ended: its round is the source's to read
    RoundInFlight done = round_;
    done.progress.reset();
    done.version = published_;  // the checkpoint's (the servers take it before the next round)
    return {to_json(done)};
  }
  lock.unlock();
  RLCPP_CHECK(!in_flight_.empty(), "a checkpoint cutting a round the rollout servers do not generate");
  in_flight_.back().get();  // the round's error, thrown before the checkpoint is written
  throw InternalError("a round on the rollout servers ended without reaching its checkpoint's version");
}

bool ServerSource::resume_cut(const std::vector<nlohmann::json>& in_flight) {
  const std::string source = in_flight.size() == 1 ? in_flight[0].value("source", "engine") : "engine";
  if (source != "servers" || !cuts_rounds()) {
    spdlog::warn("the checkpoint holds a round in flight on {} rollout {}(s) and this run has the rollout servers{}: its "
                 "prompts are generated anew (nothing is lost; its samples differ from the run that was cut)",
                 in_flight.size(), source == "servers" ? "server" : "engine",
                 cuts_rounds() ? "" : " without --checkpoint-round cut");
    return false;
  }
  RoundInFlight round = round_in_flight_from_json(in_flight[0], "the checkpoint's round in flight");
  if (round.graded) {
    std::promise<RolloutRound> done;
    done.set_value(std::move(*round.graded));
    in_flight_.push_back(done.get_future());
    return true;
  }
  RLCPP_CHECK(servers_.version() == round.version, "a round cut at version {} resumed on servers holding version {}",
              round.version, servers_.version());
  partial_in_flight_ = true;
  start_round(std::move(round));
  return true;
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
