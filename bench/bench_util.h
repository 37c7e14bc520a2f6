// Helpers for the benchmarks: model shapes of public checkpoints, wall-clock timing, peak RSS.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "model/model_config.h"

namespace rlcpp::bench {

// Qwen2.5-0.5B's shape (config.json of the public checkpoint), with `layers` decoder layers.
inline ModelConfig qwen25_05b_config(int64_t layers = 24) {
  nlohmann::json json = {{"architectures", {"Qwen2ForCausalLM"}},
                         {"model_type", "qwen2"},
                         {"vocab_size", 151936},
                         {"hidden_size", 896},
                         {"intermediate_size", 4864},
                         {"num_hidden_layers", layers},
                         {"num_attention_heads", 14},
                         {"num_key_value_heads", 2},
                         {"max_position_embeddings", 32768},
                         {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1000000.0},
                         {"tie_word_embeddings", true},
                         {"hidden_act", "silu"},
                         {"eos_token_id", 151643},
                         {"bos_token_id", 151643},
                         {"torch_dtype", "bfloat16"}};
  return ModelConfig::from_json(json, "qwen2.5-0.5b shape");
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A field of /proc/self/status in KiB (VmRSS, VmHWM).
inline long proc_status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Resets the peak-RSS mark (VmHWM) to the current RSS, so a later read measures one phase alone.
inline void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

inline double mib(long kib) { return kib / 1024.0; }

}  // namespace rlcpp::bench
