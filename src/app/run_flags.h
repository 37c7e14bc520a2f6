// The flags of a run command (`train`, `sft`): one option per setting of the run table, plus
// --config and --print-config, so every command reads its settings the same way.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "rl/config/run_config.h"

namespace rlcpp {

struct RunFlags {
  std::string config_file;
  bool print_config = false;
  std::map<std::string, std::string> values;    // setting name -> flag value
  std::map<std::string, CLI::Option*> options;  // setting name -> its option
};

// Registers the settings with flags (all, or those named in `only`) on `cmd`.
void add_run_flags(CLI::App* cmd, RunFlags& flags, const std::set<std::string>& only = {});

// The raw settings: the --config file, then the flags given.
RawSettings collect_run_settings(const RunFlags& flags);

// One-process trainings on examples (`sft`, `train-rm`; `command` names it): one example per
// "group", a step's -tbs examples one mini-batch, micro-batches of -tmbs (default -tbs).
void one_minibatch_per_step(RawSettings& raw, const std::string& command);
// `rlcpp sft` and `rlcpp train-rm`: -zero shards over the replicas of mpirun's processes (their
// data-parallel group), not over `-t` trainers, so it is taken out of `raw` before the run's checks
// (which tie it to the distributed mode) and set on the resolved config with give_supervised_zero
// (checked by supervised_topology).
int64_t take_supervised_zero(RawSettings& raw);
void give_supervised_zero(RunConfig& config, int64_t zero);

}  // namespace rlcpp
