// -b openai|vllm|sglang: the run's rollout servers (openai/remote_rollout.h) and the trainer's
// side of their weight updates: the policy written where the servers read it (--rollout-weights-dir,
// one directory per version: the PEFT adapter under LoRA, else the whole model) and each server told
// to load it. The servers' address and the model they serve are the user's; the API key, if any,
// comes from $RLCPP_ROLLOUT_API_KEY (so it never lands in config.yaml). ServerSource is the step
// loop's RolloutSource over them.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>

#include "openai/remote_rollout.h"
#include "model/transformer.h"
#include "rl/config/run_config.h"
#include "rl/rollout/rollout_source.h"

namespace rlcpp {

class RolloutServers {
 public:
  // `base_model`: the directory of the model the servers started with (its tokenizer and base go
  // into each version written).
  RolloutServers(const RemoteOptions& remote, std::string base_model, const std::filesystem::path& run_dir);

  RemoteRollout& backend() { return *remote_; }
  // The servers generate with `policy` at `version` from their next request on: written to
  // <weights dir>/v<version> and loaded by every server that answers (the others when they are
  // back); the versions before are removed. Returns the seconds it took.
  double publish(const Transformer& policy, int64_t version);
  int64_t version() const { return remote_->weights().version; }
  const std::filesystem::path& weights_dir() const { return weights_dir_; }

 private:
  std::string base_model_;
  std::filesystem::path weights_dir_;
  std::unique_ptr<RemoteRollout> remote_;
};

// Rounds from the servers: each round is generated and graded on a thread of its own (the trainer
// trains meanwhile when it goes ahead), with the version last published to the servers.
class ServerSource : public RolloutSource {
 public:
  ServerSource(const RunConfig& config, const std::filesystem::path& run_dir, std::shared_ptr<Transformer> policy,
               const Tokenizer& tokenizer);
  void submit(std::vector<PromptPick> picks, const WeightSwitches& switches) override;
  RoundReceipt collect(std::deque<SampleGroup>& buffer) override;
  double publish(int64_t version, bool resend) override;
  bool concurrent() const override { return true; }
  int64_t round_prompts() const override { return c_.round_prompts(); }
  void add_figures(nlohmann::ordered_json& extra) override;
  std::string describe() const override;

 private:
  const RunConfig& c_;
  std::shared_ptr<Transformer> policy_;
  RolloutServers servers_;
  RewardFunction reward_;
  std::unique_ptr<RolloutGenerator> generator_;
  // Last: a round still generating (the run stopped on an error) ends before what it uses goes away.
  std::deque<std::future<RolloutRound>> in_flight_;
  int64_t published_ = -1;  // the version the servers were last given (-1: none yet, whatever they hold)
};

}  // namespace rlcpp
