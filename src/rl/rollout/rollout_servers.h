// -b openai|vllm|sglang: the run's rollout servers (openai/remote_rollout.h) and the trainer's
// side of their weight updates: the policy written where the servers read it (--rollout-weights-dir,
// one directory per version: the PEFT adapter under LoRA, else the whole model) and each server told
// to load it. The servers' address and the model they serve are the user's; the API key, if any,
// comes from $RLCPP_ROLLOUT_API_KEY (so it never lands in config.yaml).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "openai/remote_rollout.h"
#include "model/transformer.h"
#include "rl/config/run_config.h"

namespace rlcpp {

class RolloutServers {
 public:
  RolloutServers(const RunConfig& config, const std::filesystem::path& run_dir);

  RemoteRollout& backend() { return *remote_; }
  // The servers generate with `policy` at `version` from their next request on: written to
  // <weights dir>/v<version> and loaded by every server that answers (the others when they are
  // back); the versions before are removed. Returns the seconds it took.
  double publish(const Transformer& policy, int64_t version);
  int64_t version() const { return remote_->weights().version; }
  const std::filesystem::path& weights_dir() const { return weights_dir_; }

 private:
  const RunConfig& c_;
  std::filesystem::path weights_dir_;
  std::unique_ptr<RemoteRollout> remote_;
};

}  // namespace rlcpp
