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

RolloutServers::RolloutServers(const RunConfig& config, const fs::path& run_dir) : c_(config) {
  RemoteRolloutOptions options;
  options.kind = config.backend;
  options.urls = split_urls(config.rollout_url);
  if (const char* key = std::getenv("RLCPP_ROLLOUT_API_KEY")) options.api_key = key;
  options.model = config.rollout_model;
  options.request_timeout_s = config.rollout_timeout;
  options.unavailable_timeout_s = config.rollout_timeout;  // every server down that long: the run stops, naming them
  options.max_requests_per_server = config.rollout_concurrency;
  remote_ = std::make_unique<RemoteRollout>(options);
  weights_dir_ = config.rollout_weights_dir.empty() ? run_dir / "rollout-weights" : fs::path(config.rollout_weights_dir);
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
  save_policy_dir(tmp, policy, c_.model, c_.model, false);
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

}  // namespace rlcpp
