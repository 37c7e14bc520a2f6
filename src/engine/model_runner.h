// Turns a ScheduledBatch into the step's inputs (StepInputs: plain numbers, the same on every rank
// of a tensor-parallel group, which the group's first rank sends the others), runs the transformer
// over the paged cache, and returns the logits of each sampling work item's last token.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "model/transformer.h"

namespace rlcpp {

// One step as the runner needs it, with no reference to the scheduler's sequences.
struct StepInputs {
  struct Work {
    int64_t start = 0;            // first position run
    std::vector<int32_t> tokens;  // the tokens at [start, start + tokens.size())
    std::vector<int32_t> blocks;  // the sequence's block table
    bool samples = false;         // its last token's logits are sampled
  };
  bool prefill = false;
  std::vector<BlockCopy> copies;  // copy-on-write before the step writes the cache
  std::vector<Work> work;
  // One per sampler, in the batch's order: the logits row (sampling work items in order), the
  // sampling parameters (temperature, top_k, top_p, min_p) and the uniform draw of its RNG.
  std::vector<int64_t> sample_rows;
  std::vector<SamplingParams> params;
  std::vector<double> u;
  int64_t n_tokens() const;
};

// The inputs of `batch`: each sampler's RNG draws its number for this step (so the scheduler's
// sequences change: their RNGs move on).
StepInputs step_inputs(const ScheduledBatch& batch, Scheduler& scheduler);
// A compact binary form (MessagePack), for the followers of a tensor-parallel group.
std::string encode_step(const StepInputs& inputs);
StepInputs decode_step(const std::string& bytes);

class ModelRunner {
 public:
  // `pipeline`: a model of one pipeline stage's ranks, stage s being rank s (EngineConfig::pipeline).
  ModelRunner(Transformer& model, KvCache& cache, const ForwardContext& context, Communicator* pipeline = nullptr)
      : model_(model), cache_(cache), context_(context), pipeline_(pipeline) {}
  // logits [n, V] fp32 (fp64 for an fp64 model; [n, V_shard], this rank's part of the vocabulary,
  // under tensor parallelism): one row, its last token's, per work item that samples, in order.
  // The other items only fill the cache. Over pipeline stages a collective of the pipeline group:
  // each stage takes the hidden states of the one before (the first embeds), runs its layers and
  // hands them on; the last stage's logits are every stage's result.
  torch::Tensor run(const StepInputs& step);

 private:
  Transformer& model_;
  KvCache& cache_;
  ForwardContext context_;
  Communicator* pipeline_;
};

}  // namespace rlcpp
