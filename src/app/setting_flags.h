// One registration helper for the flags that several commands share with `rlcpp train`
// (--dtype, --temperature, --max-new-tokens, -rt, ...): the flag names and help come from the run
// settings table, so `generate`, `eval`, `parity` and `train` cannot disagree about them.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/engine.h"
#include "rl/config/run_config.h"
#include "util/error.h"

namespace rlcpp {

// Registers run setting `name`'s flags on `cmd`, bound to `target` (with its default shown).
template <typename T>
CLI::Option* add_setting_flag(CLI::App* cmd, const std::string& name, T& target) {
  const Setting* s = find_setting(name);
  RLCPP_CHECK(s != nullptr && !s->flags.empty(), "no run setting {} with flags", name);
  std::string help = s->help;
  while (!help.empty() && help.back() == '\n') help.pop_back();
  return cmd->add_option(s->flags, target, help)->capture_default_str();
}

// The model and engine flags that `generate`, `eval` and `serve` share with `train`: --dtype,
// --device, --kv-cache-mb, --rollout-dtype, --kv-cache-dtype and vLLM's scheduler knobs.
struct EngineFlags {
  std::string dtype = "float32";
  std::string device = "cpu";
  std::string rollout_dtype, kv_cache_dtype;
  EngineConfig engine;  // the KV budget and the scheduler's flags bind here

  ModelOptions model_options() const { return model_options_from_flags(dtype, device); }
  EngineConfig engine_config() const {
    EngineConfig out = engine;
    out.weights_dtype = rollout_dtype_or_default(rollout_dtype, "--rollout-dtype");
    out.kv_dtype = dtype_or_default(kv_cache_dtype, "--kv-cache-dtype");
    return out;
  }
};

inline void add_engine_flags(CLI::App* cmd, EngineFlags& flags) {
  add_setting_flag(cmd, "runtime.dtype", flags.dtype);
  add_setting_flag(cmd, "runtime.device", flags.device);
  add_setting_flag(cmd, "rollout.kv_cache_mb", flags.engine.kv_cache_mb);
  add_setting_flag(cmd, "rollout.dtype", flags.rollout_dtype);
  add_setting_flag(cmd, "rollout.kv_cache_dtype", flags.kv_cache_dtype);
  add_setting_flag(cmd, "rollout.max_num_seqs", flags.engine.scheduler.max_num_seqs);
  add_setting_flag(cmd, "rollout.max_num_batched_tokens", flags.engine.scheduler.max_num_batched_tokens);
  add_setting_flag(cmd, "rollout.enable_chunked_prefill", flags.engine.scheduler.chunked_prefill);
}

// -rt code's flags (--code-reward, --sandbox-workers, --sandbox-time-limit, --sandbox-memory-mb)
// for the commands that grade outside `rlcpp train`: eval and grade.
struct CodeRewardFlags {
  std::string mode = "all";
  CodeRewardOptions code;
  CodeRewardOptions options() const {
    CodeRewardOptions out = code;
    out.mode = code_reward_modes().parse(mode, "--code-reward");
    return out;
  }
};

inline void add_code_reward_flags(CLI::App* cmd, CodeRewardFlags& flags) {
  add_setting_flag(cmd, "reward.code_reward", flags.mode);
  add_setting_flag(cmd, "reward.sandbox_workers", flags.code.workers);
  add_setting_flag(cmd, "reward.sandbox_time_limit", flags.code.time_limit);
  add_setting_flag(cmd, "reward.sandbox_memory_mb", flags.code.memory_mb);
}

// Multi-turn flags (--tools, --max-turns, ...) for `rlcpp eval`: held-out prompts run as episodes.
inline void add_episode_flags(CLI::App* cmd, EpisodeOptions& episode) {
  add_setting_flag(cmd, "episode.tools", episode.tools);
  add_setting_flag(cmd, "episode.max_turns", episode.max_turns);
  add_setting_flag(cmd, "episode.max_tool_calls", episode.max_tool_calls);
  add_setting_flag(cmd, "episode.max_tokens_per_turn", episode.max_tokens_per_turn);
  add_setting_flag(cmd, "episode.tool_timeout", episode.tool_timeout);
  add_setting_flag(cmd, "episode.max_tool_output", episode.max_tool_output);
  add_setting_flag(cmd, "episode.tool_format", episode.tool_format);
}

}  // namespace rlcpp
