// Turns a ScheduledBatch into tensors, runs the transformer over the paged cache, and returns the
// logits of each work item's last token.
#pragma once

#include <torch/types.h>

#include "engine/kv_cache.h"
#include "engine/scheduler.h"
#include "model/transformer.h"

namespace rlcpp {

class ModelRunner {
 public:
  ModelRunner(Transformer& model, KvCache& cache) : model_(model), cache_(cache) {}
  // logits [n, V] fp32 (fp64 for an fp64 model): one row, its last token's, per work item that
  // samples (has samplers), in the batch's order. The other items only fill the cache.
  torch::Tensor run(const ScheduledBatch& batch, const Scheduler& scheduler);

 private:
  Transformer& model_;
  KvCache& cache_;
};

}  // namespace rlcpp
