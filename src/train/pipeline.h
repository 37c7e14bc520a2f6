// Pipeline parallelism: its two pure decisions (which decoder layers each stage holds, and in
// which order a stage runs its micro-batches' forward and backward passes: 1F1B), and the runner
// that follows that order on one stage, exchanging activations and their gradients with the
// neighbouring stages point to point.
#pragma once

#include <torch/types.h>

#include <functional>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/model_options.h"
#include "util/enum_table.h"

namespace rlcpp {

// Layers [first, last) of a stage.
struct StageLayers {
  int64_t first = 0, last = 0;
  bool operator==(const StageLayers&) const = default;
};

// Contiguous stages of `layer_params` (each layer's parameter count), every stage at least one
// layer, the first also holding `first_extra` parameters (the embedding) and the last
// `last_extra` (the final norm and the log-prob head): the split whose largest stage is smallest,
// the earliest such split where several are (so it never depends on anything but the counts).
inline std::vector<StageLayers> balance_stages(const std::vector<int64_t>& layer_params, int64_t first_extra,
                                               int64_t last_extra, int64_t stages) {
  const auto n = static_cast<int64_t>(layer_params.size());
  if (stages < 1 || stages > n) {
    throw std::invalid_argument("balance_stages: " + std::to_string(stages) + " stages of " + std::to_string(n) +
                                " layers (each stage holds at least one)");
  }
  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + layer_params[static_cast<size_t>(i)];
  auto weight = [&](int64_t s, int64_t first, int64_t last) {
    int64_t w = prefix[static_cast<size_t>(last)] - prefix[static_cast<size_t>(first)];
    if (s == 0) w += first_extra;
    if (s == stages - 1) w += last_extra;
    return w;
  };
  // best[s][i]: the smallest largest stage of stages 0..s holding layers [0, i); cut[s][i] where
  // stage s starts in it.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(stages), std::vector<int64_t>(static_cast<size_t>(n) + 1, kNone));
  std::vector<std::vector<int64_t>> cut(static_cast<size_t>(stages), std::vector<int64_t>(static_cast<size_t>(n) + 1, 0));
  for (int64_t i = 1; i <= n; ++i) best[0][static_cast<size_t>(i)] = weight(0, 0, i);
  for (int64_t s = 1; s < stages; ++s) {
    for (int64_t i = s + 1; i <= n; ++i) {
      for (int64_t j = s; j < i; ++j) {  // stage s holds [j, i)
        const int64_t before = best[static_cast<size_t>(s) - 1][static_cast<size_t>(j)];
        if (before == kNone) continue;
        const int64_t worst = std::max(before, weight(s, j, i));
        if (worst < best[static_cast<size_t>(s)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(i)] = worst;
          cut[static_cast<size_t>(s)][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<StageLayers> out(static_cast<size_t>(stages));
  for (int64_t s = stages - 1, end = n; s >= 0; --s) {
    const int64_t begin = s == 0 ? 0 : cut[static_cast<size_t>(s)][static_cast<size_t>(end)];
    out[static_cast<size_t>(s)] = {begin, end};
    end = begin;
  }
  return out;
}

// One pass of a stage's schedule: micro-batch `micro`'s forward or backward.
struct PipelinePass {
  bool forward = true;
  int64_t micro = 0;
  bool operator==(const PipelinePass&) const = default;
};

// 1F1B (PipeDream-flush, Megatron's default): stage `stage` of `stages` first runs the forwards
// of min(stages - stage - 1, micros) micro-batches, then alternates one forward and one backward,
// then runs the backwards left. Forwards and backwards each go in micro-batch order, so a stage
// sums its gradients in the order one rank with the whole batch does; at most stages - stage
// micro-batches' activations are held at once.
inline std::vector<PipelinePass> one_forward_one_backward(int64_t stage, int64_t stages, int64_t micros) {
  if (stages < 1 || stage < 0 || stage >= stages || micros < 0) {
    throw std::invalid_argument("one_forward_one_backward: stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + ", " + std::to_string(micros) + " micro-batches");
  }
  const int64_t warmup = std::min(stages - stage - 1, micros);
  std::vector<PipelinePass> passes;
  int64_t forward = 0, backward = 0;
  for (; forward < warmup; ++forward) passes.push_back({true, forward});
  for (; forward < micros; ++forward, ++backward) {
    passes.push_back({true, forward});
    passes.push_back({false, backward});
  }
  for (; backward < micros; ++backward) passes.push_back({false, backward});
  return passes;
}

// The idle share of the 1F1B schedule with every forward taking one unit and every backward two:
// (stages - 1) / (micros + stages - 1), what a runner's measured bubble is compared with.
inline double one_forward_one_backward_bubble(int64_t stages, int64_t micros) {
  return static_cast<double>(stages - 1) / static_cast<double>(micros + stages - 1);
}

// What the stages are balanced by (--pp-balance): each stage's work per token in multiply-adds, or
// times measured on this machine (measure_stage_costs).
enum class StageBalance { kWork, kTime };
const EnumTable<StageBalance>& stage_balances();

// What a decoder layer, the first stage's embedding and the last stage's norm and log-prob head
// each cost, in one unit (only their ratios count).
struct StageCosts {
  double layer = 1, embedding = 0, head = 0;
};
// Multiply-adds per token: a layer's weights (attention over a sequence adds little at RL
// lengths), the head's vocabulary (a classifier's labels) x hidden; the embedding is a lookup, free.
StageCosts work_stage_costs(const ModelConfig& config);
// Seconds of a forward and a backward over one micro-batch of `rows` x `length` tokens, on
// fresh random weights of `config`'s shape in `options` (its dtype, gradient checkpointing;
// with `lora`, adapters on every layer it names), the best of `repeats` after one warm-up: a
// decoder layer alone, the embedding (and its gradient), and the norm and the head (the fused
// log-prob head of training). Each part is built, timed and freed in turn, so at most one
// vocabulary x hidden matrix and its gradient are held.
StageCosts measure_stage_costs(const ModelConfig& config, ModelOptions options, const LoraConfig& lora, int64_t rows,
                               int64_t length, int repeats = 3);

// Stage `index` of `count` of a model of `config`, the layers balanced by `costs` (balance_stages:
// the embedding's on the first stage, the head's on the last); without, by work_stage_costs.
// More stages than layers is a UserError naming --pp and the numbers.
PipelineStage pipeline_stage(const ModelConfig& config, int index, int count);
PipelineStage pipeline_stage(const ModelConfig& config, int index, int count, const StageCosts& costs);

// One stage's share of a pipelined pass over a batch's micro-batches.
struct StageWork {
  int64_t micros = 0;
  // The hidden states this stage receives for micro-batch k ([B, T, H]; not asked on the first
  // stage): every stage knows them from the batch, so nothing but the values travels.
  std::function<std::vector<int64_t>(int64_t k)> input_shape;
  // Micro-batch k's forward on this stage from `input` (undefined on the first stage): the hidden
  // states to send on or, on the last stage, what backward runs from (the micro-batch's loss; with
  // no backward, anything).
  std::function<torch::Tensor(int64_t k, const torch::Tensor& input)> forward;
};

// What a stage spent: waiting for its neighbours (the bubble, and transfers not overlapped) and in
// all, and the bytes it sent.
struct StageTimes {
  double wait_seconds = 0, total_seconds = 0;
  uint64_t bytes_sent = 0;
};

// Runs this stage's passes over `work` under 1F1B (forwards only without `backward`). `group`: the
// stages, rank s being stage s (null or a group of one: the whole model here, each micro-batch's
// forward then its backward). A stage after the first receives micro-batch k's input from the
// stage before, as a leaf that requires grad; one before the last sends its output on and runs
// its backward from the gradient the next stage sends back (zeros for an input the next stage's
// output did not depend on). Sends are non-blocking and each next receive is posted before the
// current pass computes, so transfers overlap compute. `activations`: the dtype and device of the
// hidden states.
StageTimes run_stage(Communicator* group, const StageWork& work, bool backward, const torch::TensorOptions& activations);

}  // namespace rlcpp
