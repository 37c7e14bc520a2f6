// Weight synchronisation from trainer rank 0 to the rollout workers: named tensors packed into
// coalesced buckets of at most `bucket_bytes` (ChatLearn's coalesced_buffer_mb; a tensor larger
// than a bucket travels alone), sent by broadcast over the sync group or point to point to each
// worker (param_sync_comm_type p2p). Receivers get each bucket as named CPU tensors to apply.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "io/safetensors.h"
#include "util/enum_table.h"

namespace rlcpp {

enum class SyncMode { kBroadcast, kP2p };
const EnumTable<SyncMode>& sync_modes();

// Tensor indices per bucket, in order; each bucket's bytes ≤ bucket_bytes unless it holds one tensor.
std::vector<std::vector<size_t>> plan_buckets(const NamedTensors& tensors, uint64_t bucket_bytes);

struct SyncStats {
  int64_t version = 0;
  int64_t buckets = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

class WeightSync {
 public:
  // `group`: rank 0 sends, every other rank receives.
  WeightSync(std::shared_ptr<Communicator> group, uint64_t bucket_bytes, SyncMode mode = SyncMode::kBroadcast);

  // On rank 0: sends `tensors` as `version`. Elsewhere: receives, calling `apply` once per bucket
  // with tensors of the bucket's own (the receiver may keep them). Returns what moved.
  // With `values` (rank 0), tensors[k] gives only the name, dtype and shape (a meta tensor will
  // do) and values(k) the data, asked for once per tensor in ascending k and read before the next
  // call: weights made whole piece by piece as they go (ZeRO-3).
  SyncStats sync(const NamedTensors& tensors, int64_t version,
                 const std::function<void(const NamedTensors&)>& apply = {},
                 const std::function<torch::Tensor(size_t)>& values = {});

 private:
  std::shared_ptr<Communicator> group_;
  uint64_t bucket_bytes_;
  SyncMode mode_;
};

// FNV-1a over names, dtypes, shapes and bytes, in order: equal on two ranks iff the weights are.
uint64_t weights_hash(const NamedTensors& tensors);
// The same one tensor at a time: h = weights_hash_seed(), then each (name, tensor) in order.
uint64_t weights_hash_seed();
uint64_t weights_hash_add(uint64_t h, const std::string& name, const torch::Tensor& tensor);

}  // namespace rlcpp
