// Tensor parallelism of the decoder over the ranks of one group, laid out as Megatron-LM does:
// column-parallel q/k/v, gate and up (each rank holds some output rows), row-parallel o_proj and
// down (the matching input columns; their partial products are summed over the group, then the
// bias is added once), a vocabulary-parallel embedding and head (each rank holds a range of token
// rows: no rank ever holds the full logits), norms whole on every rank.
//
// Every split is balanced, rank r of n holding [r·N/n, (r+1)·N/n) of N query heads, MLP channels or
// tokens, so nothing has to divide evenly. Each rank holds the KV heads its query heads attend to:
//   - split, when its query heads fall into whole groups (the KV heads divide over the ranks);
//   - one KV head, replicated over the ranks whose query heads all read it (fewer KV heads than ranks);
//   - otherwise (a rank's query heads straddle groups unevenly, e.g. 6 heads and 3 KV heads over 2
//     ranks) one copy of its KV head per local query head.
// A KV head held by several ranks gets its gradient summed over them (TpShard::partial_gradient).
//
// The model's tensors keep their Hugging Face names and global shapes on disk and on the wire:
// `slice` cuts this rank's part from a whole tensor (loading, weight sync), `gather` makes a whole
// tensor of the parts (checkpoints, the trainer's weight sync). Collectives over the group run
// inside forward and backward, so every rank of a group runs the same passes in the same order.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "comm/communicator.h"

namespace rlcpp {

// What one rank holds of the decoder's dimensions (heads, MLP channels and tokens are global ids).
struct TpRankShape {
  int64_t q_begin = 0, q_end = 0;        // query heads [q_begin, q_end)
  std::vector<int64_t> kv_heads;         // the global KV head of each local KV head, in order
  int64_t mlp_begin = 0, mlp_end = 0;    // intermediate channels
  int64_t vocab_begin = 0, vocab_end = 0;  // token rows of the embedding and the head
  int64_t n_heads() const { return q_end - q_begin; }
  int64_t n_kv_heads() const { return static_cast<int64_t>(kv_heads.size()); }
};

// The partition of a model of `config` over `size` ranks: a pure function of both, so every rank
// knows every other rank's part.
struct TpLayout {
  ModelConfig config;
  int size = 1;
  std::vector<TpRankShape> ranks;

  // A user error naming `flag` when the model cannot be split `size` ways (fewer query heads than ranks).
  static TpLayout make(const ModelConfig& config, int size, const std::string& flag = "--train-tp");
  // Whether some KV head is held more than once over the group (its gradient is summed over them).
  bool kv_duplicated() const;
  // The largest number of KV heads any rank holds (KV caches are sized alike on every rank).
  int64_t max_kv_heads() const;
};

// [r·n/size, (r+1)·n/size): rank r's balanced part of n.
std::pair<int64_t, int64_t> balanced_range(int64_t n, int r, int size);

// How one tensor is held on one rank.
struct TpShard {
  int dim = -1;                 // -1: whole, the same on every rank
  std::vector<int64_t> index;   // dim >= 0: the global position along `dim` of each local position
  int64_t global_size = 0;      // dim >= 0: the tensor's global extent along `dim`
  // The tensor sits inside a parallel region yet some position is held more than once (the q/k
  // norms, the adapters' unsplit factor, a replicated KV head): each holder's gradient is its share
  // of the whole one, which is their sum.
  bool partial_gradient = false;
  // Local positions along `dim` whose global position this rank is the first holder of (a whole
  // tensor: rank 0 owns it all). Gathers and gradient norms count each position once, here.
  std::vector<int64_t> owned;
  bool whole() const { return dim < 0; }
  bool owns_all() const { return whole() ? owned.size() == 1 : owned.size() == index.size(); }
};

// Megatron's f and g over `group`, for code that holds only the communicator (the vocabulary-
// parallel head): see TensorParallel::enter and reduce.
torch::Tensor tp_enter(const torch::Tensor& x, Communicator& group);
torch::Tensor tp_reduce(const torch::Tensor& x, Communicator& group);

class TensorParallel {
 public:
  // `group`: the ranks of one tensor-parallel group, this rank among them.
  TensorParallel(std::shared_ptr<Communicator> group, const ModelConfig& config);

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  Communicator& group() const { return *group_; }
  const TpLayout& layout() const { return layout_; }
  const TpRankShape& shape() const { return layout_.ranks[static_cast<size_t>(rank())]; }

  // The shard of a weight by its Hugging Face name ("model.layers.0.self_attn.k_proj.weight") or an
  // adapter's ("...q_proj.lora_A.weight"), on rank `r` (-1: this one).
  TpShard shard(const std::string& name, int r = -1) const;
  // The whole tensor's shape from a rank's part of it.
  std::vector<int64_t> global_shape(const std::string& name, const std::vector<int64_t>& local) const;
  // This rank's part of a whole tensor (a copy, contiguous).
  torch::Tensor slice(const torch::Tensor& whole, const TpShard& shard) const;
  // The whole tensor `name` from every rank's `local` part (a collective): on `root` only
  // (undefined on the others), or on every rank with root -1.
  torch::Tensor gather(const torch::Tensor& local, const std::string& name, int root) const;
  // Sums a partial gradient over the ranks holding each position (a collective; no-op unless
  // shard.partial_gradient).
  void reduce_partial_gradient(torch::Tensor& grad, const TpShard& shard) const;
  // Σ g² over the positions this rank owns (each global element counted on one rank), in double.
  double owned_squares(const torch::Tensor& grad, const TpShard& shard) const;
  // A flat [numel] fp32 weight of the positions this rank owns (1) and does not (0); undefined when
  // it owns every position. For sums over flat ranges of parameters (ZeRO's shards).
  torch::Tensor owned_mask(const torch::Tensor& local, const TpShard& shard) const;

  // Megatron's f: identity forward, the gradient summed over the group in backward (the input of a
  // column-parallel region). Identity without autograd.
  torch::Tensor enter(const torch::Tensor& x) const;
  // Megatron's g: the sum over the group forward, identity backward (the output of a row-parallel
  // region, the embedding's lookup). In place without autograd.
  torch::Tensor reduce(const torch::Tensor& x) const;

 private:
  std::shared_ptr<Communicator> group_;
  TpLayout layout_;
};

}  // namespace rlcpp
