#include "rl/rollout/rollout_servers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <sstream>

#include "rl/checkpoint/run_checkpoint.h"
#include "rl/rollout/rollout.h"
#include "util/error.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_urls(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto begin = item.find_first_not_of(" \t"), end = item.find_last_not_of(" \t");
    if (begin != std::string::npos) out.push_back(item.substr(begin, end - begin + 1));
  }
  return out;
}

}  // namespace

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
  remote_ = std::make_unique<RemoteRollout>(options);
  weights_dir_ = remote.weights_dir.empty() ? run_dir / "rollout-weights" : fs::path(remote.weights_dir);
  std::error_code ec;
  fs::create_directories(weights_dir_, ec);
  if (ec || ::access(weights_dir_.c_str(), W_OK) != 0) {
    throw_user_error("--rollout-weights-dir {}: cannot write there ({}); give a folder this trainer can write and the "
                     "servers can read", weights_dir_.string(), ec ? ec.message() : std::strerror(errno));
  }
}

double RolloutServers::publish(const Transformer& policy, int64_t version) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = weights_dir_ / fmt::format("v{}", version);
  const fs::path tmp = weights_dir_ / fmt::format(".v{}.tmp", version);
  fs::remove_all(tmp);
  save_policy_dir(tmp, policy, base_model_, base_model_, false);
  fs::remove_all(dir);
  fs::rename(tmp, dir);  // a server never reads a half-written version
  remote_->set_weights({version, dir, policy.has_adapters()});
  remote_->sync();
  // Servers that missed this version get it when they answer again: older ones are not needed.
  for (const auto& entry : fs::directory_iterator(weights_dir_)) {
    const std::string name = entry.path().filename().string();
    if (entry.path() != dir && name.size() > 1 && name[0] == 'v' &&
        name.find_first_not_of("0123456789", 1) == std::string::npos) {
      std::error_code ec;
      fs::remove_all(entry.path(), ec);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::debug("policy version {} published to the rollout servers in {:.2f} s", version, seconds);
  return seconds;
}

ServerSource::ServerSource(const RunConfig& c, const fs::path& run_dir, std::shared_ptr<Transformer> policy,
                           const Tokenizer& tokenizer)
    : c_(c), policy_(std::move(policy)), servers_(c.remote, c.model.path, run_dir), reward_(make_reward_function(c.reward)) {
  generator_ = std::make_unique<RolloutGenerator>(c, policy_->config(), tokenizer, &servers_.backend(), nullptr, nullptr,
                                                  &reward_);
}

void ServerSource::submit(std::vector<PromptPick> picks, const WeightSwitches& switches) {
  RLCPP_CHECK(!switches.during_round, "partial rollouts with rollout servers (validation refuses them)");
  in_flight_.push_back(
      std::async(std::launch::async, [this, picks = std::move(picks)] { return generator_->generate(picks); }));
}

RoundReceipt ServerSource::collect(std::deque<SampleGroup>& buffer) {
  RLCPP_CHECK(!in_flight_.empty(), "collecting a round that was never submitted");
  auto future = std::move(in_flight_.front());
  in_flight_.pop_front();
  RolloutRound round = future.get();  // a round's error (every server down, a broken reward) is thrown here
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
  if (version == published_ && !resend) return 0;
  published_ = version;
  return servers_.publish(*policy_, version);
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
