// Data-parallel gradients: the sum over the ranks of a communicator, moved in coalesced buckets
// (one all-reduce per bucket of flattened gradients, not one per parameter).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace rlcpp {

// Gradient buckets of data-parallel training (PyTorch DDP's bucket_cap_mb default), also ZeRO's.
constexpr uint64_t kGradientBucketBytes = 25ULL << 20;

// Sums each parameter's .grad() over `comm` in place. Parameters without a gradient take part
// as zeros, so every rank issues the same collectives whatever its data.
void all_reduce_gradients(Communicator& comm, const std::vector<torch::Tensor>& params, uint64_t bucket_bytes);

}  // namespace rlcpp
