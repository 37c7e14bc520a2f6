#include "rl/rollout/rollout_source.h"

#include "rl/rollout/model_reward.h"
#include "rl/rollout/rollout_channel.h"
#include "util/error.h"

namespace rlcpp {

StalenessPolicy::StalenessPolicy(const StalenessOptions& options, bool concurrent, int64_t rounds_ahead)
    : n_behind_(options.n_behind), sync_frequency_(std::max<int64_t>(1, options.sync_frequency)), concurrent_(concurrent),
      rounds_ahead_(rounds_ahead) {}

bool StalenessPolicy::ahead(int64_t round_end, int64_t total_steps) const {
  return concurrent_ && n_behind_ >= 1 && round_end < total_steps;
}

bool StalenessPolicy::publish_before(bool ahead) {
  if (!ahead) return true;  // the policy as it is now (publishing what the generators hold is a no-op)
  return ++rounds_ahead_ % sync_frequency_ == 0;
}

EngineSource::EngineSource(const RunConfig& c, const ModelConfig& model_config, const Tokenizer* tokenizer,
                           std::shared_ptr<Engine> engine, std::shared_ptr<Communicator> group)
    : c_(c), engine_(std::move(engine)), reward_(engine_->leads() ? make_run_reward(c.reward, c.runtime.device, c.runtime.dtype) : RewardFunction{}), group_(std::move(group)) {
  if (engine_->leads()) {
    RLCPP_CHECK(tokenizer != nullptr, "the engine's first rank without a tokenizer");
    generator_ = std::make_unique<RolloutGenerator>(c, model_config, *tokenizer, engine_.get(), nullptr, nullptr, &reward_);
  }
}

void EngineSource::submit(std::vector<PromptPick> picks, const WeightSwitches& switches) {
  RLCPP_CHECK(!switches.during_round, "partial rollouts with the colocated engine (validation refuses them)");
  submitted_.push_back(std::move(picks));
}

RoundReceipt EngineSource::collect(std::deque<SampleGroup>& buffer) {
  RLCPP_CHECK(!submitted_.empty(), "collecting a round that was never submitted");
  const std::vector<PromptPick> picks = std::move(submitted_.front());
  submitted_.pop_front();
  RoundReceipt receipt;
  std::vector<SampleGroup> kept;
  if (engine_->leads()) {
    RolloutRound round = generator_->generate(picks);
    engine_->release_followers();
    receipt.generated = static_cast<int64_t>(round.kept.size() + round.discarded.size());
    receipt.kept_all = static_cast<int64_t>(round.kept.size());
    receipt.generate_seconds = round.generate_seconds;
    receipt.reward_seconds = round.reward_seconds;
    receipt.discarded = std::move(round.discarded);
    kept = std::move(round.kept);
  } else {
    engine_->serve();  // the first rank's steps, until it has the round
  }
  if (group_ != nullptr && group_->size() > 1) {  // the same groups on every rank of the group
    std::string bytes = engine_->leads() ? encode_groups(kept) : std::string();
    group_->broadcast_bytes(bytes, 0);
    if (!engine_->leads()) kept = decode_groups(bytes);
  }
  receipt.kept = static_cast<int64_t>(kept.size());
  for (auto& g : kept) buffer.push_back(std::move(g));
  return receipt;
}

double EngineSource::publish(int64_t version, bool) {
  engine_->set_version(version);  // the engine generates on the policy's own weights
  return 0;
}

}  // namespace rlcpp
