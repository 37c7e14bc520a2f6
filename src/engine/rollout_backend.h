// What generates a run's rollouts: the built-in engine (engine.h), or OpenAI-compatible servers
// reached over HTTP (remote_rollout.h). The RL loop only asks for samples; each sample says which
// policy version produced it.
#pragma once

#include <vector>

#include "engine/sampling.h"

namespace rlcpp {

class RolloutBackend {
 public:
  virtual ~RolloutBackend() = default;
  // Every request's n samples, ordered by (request, sample); each sample's policy_version is that
  // of the weights that produced it.
  virtual std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) = 0;
};

}  // namespace rlcpp
