#include "rl/modes/colocated.h"

#include "engine/engine.h"
#include "rl/modes/step_loop.h"
#include "rl/rollout/rollout_servers.h"
#include "rl/step/step_record.h"

namespace rlcpp {

std::filesystem::path run_colocated(const RunConfig& c, const Topology* topology) {
  if (topology == nullptr) start_profile(c.logging, 0, "rlcpp train");
  else start_profile(c.logging, topology->world->rank(), topology->describe());
  return run_step_loop(c, topology, [&](RunState& run) -> std::unique_ptr<RolloutSource> {
    if (c.remote.enabled()) return std::make_unique<ServerSource>(c, run.plan.run_dir, run.policy, *run.tokenizer);
    auto engine = std::make_shared<Engine>(run.policy, policy_engine_config(c, run), run.tokenizer);
    return std::make_unique<EngineSource>(c, run.policy->config(), run.tokenizer.get(), std::move(engine),
                                          topology != nullptr ? topology->replica_group : nullptr);
  });
}

}  // namespace rlcpp
