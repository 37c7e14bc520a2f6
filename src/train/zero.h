// ZeRO for data-parallel trainers (DeepSpeed's and ColossalAI's zero_stage 1 and 2): the trainable
// parameters, flattened in order into one index space of `total` elements, are split into one
// contiguous shard per trainer (ceil(total / T) elements; the last may be short). Each trainer
// keeps the AdamW moments of its own shard only, updates its shard of the parameters from the
// summed gradient, and the updated shards are all-gathered into every trainer's parameters in
// buckets.
//   stage 1: the gradients are all-reduced whole (as without ZeRO).
//   stage 2: the gradients are reduce-scattered in buckets: only the shard's sum arrives (in its
//            own place in the .grad tensors), and the gradients wholly outside the shard are
//            released before the update.
// Clipping uses the global norm (the shards' squared sums added over the trainers in double): a
// step equals the unsharded one up to the order of the sums.
#pragma once

#include <torch/optim/adamw.h>

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"

namespace rlcpp {

// The AdamW state of the flat range [begin, end) of the trainable parameters: what a ZeRO
// trainer holds and what each shard of a checkpoint stores.
struct FlatAdamWState {
  int64_t begin = 0, end = 0;  // the range held
  int64_t total = 0;           // elements of all trainable parameters
  int64_t step = 0;            // AdamW steps taken
  torch::Tensor exp_avg, exp_avg_sq;  // [end - begin], the parameters' dtype
};

// Elements of all `params`, flattened.
int64_t flat_numel(const std::vector<torch::Tensor>& params);
// The range [begin, end) of `optimizer`'s state over `params` (zeros where a parameter has none yet).
FlatAdamWState flat_adamw_state(torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& params,
                                int64_t begin, int64_t end);
// Sets `optimizer`'s state for every one of `params` from `state`, which covers [0, total).
void set_adamw_state(torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& params,
                     const FlatAdamWState& state);
// The range [begin, end) cut from `pieces` that together cover it (a checkpoint's shards, written
// by any number of trainers); `where` names them in the error when they do not.
FlatAdamWState assemble_flat_state(const std::vector<FlatAdamWState>& pieces, int64_t begin, int64_t end,
                                   const std::string& where);

// One AdamW update of `p` in place from gradient `g` and moments `m`, `v` (all alike in shape),
// at `step` (this update counted), in torch::optim::AdamW's arithmetic: on the kernels for dense
// fp32 CPU tensors, LibTorch's ops otherwise.
void adamw_update(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, int64_t step,
                  const torch::optim::AdamWOptions& options);

class ZeroOptimizer {
 public:
  // `params` all of one dtype, contiguous; `group` the data-parallel trainers (it must outlive this).
  ZeroOptimizer(std::vector<torch::Tensor> params, Communicator& group, int stage, uint64_t bucket_bytes);

  int stage() const { return stage_; }
  int64_t begin() const { return state_.begin; }
  int64_t end() const { return state_.end; }
  int64_t total() const { return state_.total; }

  // After the step's backward passes, on every trainer: sums this shard's gradient over the
  // trainers, clips it by the global norm (max_norm 0: no clipping), and, when that norm is
  // finite, updates the shard with AdamW and all-gathers the parameters. Returns the global
  // gradient norm before clipping.
  double step(const torch::optim::AdamWOptions& options, double max_norm);

  const FlatAdamWState& state() const { return state_; }
  // Continues from `state`, which must cover this trainer's [begin, end) of the same parameters.
  void load_state(const FlatAdamWState& state);

 private:
  // fn(parameter index, offset in it, offset from `a`, length) over the pieces of flat [a, b).
  template <class Fn>
  void for_each_piece(int64_t a, int64_t b, Fn&& fn) const;
  void reduce_gradients();
  void gather_parameters();

  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;  // offsets_[i]: where params_[i] starts in the flat space; back() = total
  Communicator& group_;
  int stage_;
  int64_t shard_ = 0;         // elements per shard, ceil(total / trainers)
  uint64_t bucket_bytes_;     // one bucket of a collective, all trainers' parts together
  int64_t bucket_ = 0;        // elements per trainer in one bucket
  FlatAdamWState state_;
};

}  // namespace rlcpp
