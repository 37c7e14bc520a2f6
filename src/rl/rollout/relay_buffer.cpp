#include "rl/rollout/relay_buffer.h"

namespace rlcpp {

RelayBuffer::RelayBuffer(const StalenessOptions& options, std::vector<SampleGroup> saved)
    : max_steps_(options.max_relay_episode), offset_(options.relay_episode_offset), groups_(saved.begin(), saved.end()) {}

std::vector<SampleGroup> RelayBuffer::relayed(int64_t step) const {
  if (!enabled() || step <= offset_) return {};
  return groups();
}

void RelayBuffer::add(int64_t step, const std::vector<SampleGroup>& fresh) {
  if (!enabled()) return;
  for (auto g : fresh) {
    g.trained_step = step;
    groups_.push_back(std::move(g));
  }
  if (max_steps_ < 0) return;  // -1: every step's
  while (!groups_.empty() && groups_.front().trained_step <= step - max_steps_) groups_.pop_front();
}

}  // namespace rlcpp
