// ChatLearn's relay buffer: the groups of the last max_relay_episode steps, trained on again with
// every step after relay_episode_offset. Relayed samples keep their rollout log-probs, so the
// train/rollout mismatch is measured on them and TIS (--tis-cap) weights them. Each trainer rank
// holds the relay of its own groups; checkpoints hold every rank's.
#pragma once

#include <deque>
#include <vector>

#include "rl/config/run_options.h"
#include "train/sample.h"

namespace rlcpp {

class RelayBuffer {
 public:
  RelayBuffer(const StalenessOptions& options, std::vector<SampleGroup> saved);

  bool enabled() const { return max_steps_ != 0; }
  // The groups trained on again at `step`: all held, from step relay_episode_offset + 1 on.
  std::vector<SampleGroup> relayed(int64_t step) const;
  // After `step` trained on `fresh`: they join (tagged with the step), and the groups of steps
  // older than the last max_relay_episode leave.
  void add(int64_t step, const std::vector<SampleGroup>& fresh);
  std::vector<SampleGroup> groups() const { return {groups_.begin(), groups_.end()}; }

 private:
  int64_t max_steps_, offset_;
  std::deque<SampleGroup> groups_;  // oldest first
};

}  // namespace rlcpp
