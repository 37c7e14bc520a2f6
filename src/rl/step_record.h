// What one RL step reports: a line of metrics.jsonl and the console line, the same fields in the
// colocated and the distributed mode (which adds staleness and weight-sync figures).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "rl/rollout.h"

namespace rlcpp {

struct StepRecord {
  int64_t step = 0, total_steps = 0, episode = 0;
  int64_t kept_groups = 0;                         // trained on this step
  int64_t generated_groups = 0, round_kept_groups = 0;  // by the rounds since the last step
  int64_t buffered_groups = 0;                     // kept, left for later steps
  int64_t optimizer_steps = 0, policy_version = 0;
  RolloutStats stats;                              // trained and filtered-out groups
  std::map<std::string, double> train;             // update_policy's metrics
  std::vector<std::pair<std::string, double>> time;  // seconds by phase, "total" last
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // mode-specific figures
};

// The metrics.jsonl line.
nlohmann::ordered_json to_json(const StepRecord& record);
// The console line.
std::string console_line(const StepRecord& record);

// Writes DIR/step-N.jsonl: one line per sample of the trained and the filtered-out groups.
void save_rollouts(const std::filesystem::path& dir, int64_t step, const std::vector<GroupRollout>& trained,
                   const std::vector<GroupRollout>& discarded);

}  // namespace rlcpp
