// ZeRO for data-parallel trainers (DeepSpeed's and ColossalAI's zero_stage 1 and 2): the trainable
// parameters, flattened in order into one index space of `total` elements, are split into one
// contiguous shard per trainer (ceil(total / T) elements; the last may be short). Each trainer
// keeps the AdamW moments of its own shard only, updates its shard of the parameters from the
// summed gradient, and the updated shards are all-gathered into every trainer's parameters in
// buckets.
//   stage 1: the gradients are all-reduced whole (as without ZeRO).
//   stage 2: each decoder layer's gradients are summed into their owners' shards (reduced to each
//            owner of a part of the layer's range, in buckets) as soon as backward has finished
//            the layer, and released (model/transformer.h's ParameterHolder, which this is): a
//            trainer holds one layer's full gradients at a time and its shard's sum. The
//            parameters outside the layers (embedding, final norm, head: "resident") keep their
//            gradients in .grad until the step reduces them.
//   stage 3: the parameters are sharded too: a trainer holds its shard of them between uses. The
//            model gathers each decoder layer's parameters (broadcast from their owners) just
//            before the layer runs and releases them after; backward recomputes the layer with
//            them gathered again and reduces their gradients right away. The resident parameters
//            are gathered for a whole pass sequence (gather_resident).
// Stages 2 and 3 run collectives inside backward (and stage 3 inside every forward): every trainer
// must run the same passes (Trainer pads with empty ones).
// Clipping uses the global norm (the shards' squared sums added over the trainers in double): a
// step equals the unsharded one up to the order of the sums.
#pragma once

#include <torch/optim/adamw.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "model/transformer.h"
#include "comm/communicator.h"

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

class ZeroOptimizer final : public ParameterHolder {
 public:
  // `params` all of one dtype, contiguous; `group` the data-parallel trainers (it must outlive this).
  // Stages 2 and 3: `resident` (some of `params`) are those outside the model's decoder layers.
  // Stage 3 releases every parameter's storage here, this trainer's shard of the values kept.
  ZeroOptimizer(std::vector<torch::Tensor> params, Communicator& group, int stage, uint64_t bucket_bytes,
                const std::vector<torch::Tensor>& resident = {});

  int stage() const { return stage_; }
  Communicator& group() { return group_; }
  int64_t begin() const { return state_.begin; }
  int64_t end() const { return state_.end; }
  int64_t total() const { return state_.total; }

  // After the step's backward passes, on every trainer: sums this shard's gradient over the
  // trainers, clips it by the global norm (max_norm 0: no clipping), and, when that norm is
  // finite, updates the shard with AdamW and all-gathers the parameters. Returns the global
  // gradient norm before clipping.
  double step(const torch::optim::AdamWOptions& options, double max_norm);

  const FlatAdamWState& state() const { return state_; }
  // Model parallelism (tensor, pipeline): the parameters are this rank's parts of a model split
  // over `group`; the gradient norm counts each element of the whole model once, by `owned` (per
  // parameter, a flat fp32 mask of the elements this rank owns, undefined: all) and a sum over
  // `group`. Called once per kind of split (TP, then PP): the sums run over each group in turn and
  // an element counts where every mask owns it. Before any step.
  void set_model_parallel(Communicator& group, std::vector<torch::Tensor> owned);
  // Continues from `state`, which must cover this trainer's [begin, end) of the same parameters.
  void load_state(const FlatAdamWState& state);

  // Stages 2 and 3 (collectives: every trainer calls them alike). ParameterHolder's, for the model
  // (gather and release at stage 3 only):
  bool shards_parameters() const override { return stage_ == 3; }
  void gather(const std::vector<torch::Tensor>& params) override;
  void release(const std::vector<torch::Tensor>& params) override;
  void take_gradients(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) override;
  // The resident parameters whole until the step (or release_resident); no-ops when already so.
  void gather_resident();
  void release_resident();
  // Every parameter whole until release_all: on every trainer, or (root >= 0) on trainer `root`
  // alone, the others sending it their shards (a checkpoint or an evaluation on trainer 0).
  void gather_all(int root = -1);
  void release_all();
  // A trained parameter's shape (its tensor's own is [0] while released).
  const std::vector<int64_t>& shape_of(const torch::Tensor& param) const;

 private:
  // fn(parameter index, offset in it, offset from `a`, length) over the pieces of flat [a, b).
  template <class Fn>
  void for_each_piece(int64_t a, int64_t b, Fn&& fn) const;
  void gather_parameters();
  // The resident parameters' gradients (zero where a trainer has none) summed into the shards.
  void reduce_resident_gradients();
  // Stages 2 and 3: indices of `params` (each must be one of params_), ascending.
  std::vector<size_t> indices_of(const std::vector<torch::Tensor>& params) const;
  // fn(owner, flat begin, flat end) over the owners' parts of the runs of consecutive `indices`.
  template <class Fn>
  void for_each_owned_range(const std::vector<size_t>& indices, Fn&& fn) const;
  // Flat values [at, at + part.numel()) into the (whole) parameters they belong to.
  void copy_into_parameters(int64_t at, const torch::Tensor& part);
  void gather_indices(const std::vector<size_t>& indices);
  void release_indices(const std::vector<size_t>& indices);
  // Gradients (aligned with `indices`; undefined: zero) summed into their owners' shard_grad_.
  void reduce_to_owners(const std::vector<size_t>& indices, const std::vector<torch::Tensor>& grads);

  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;  // offsets_[i]: where params_[i] starts in the flat space; back() = total
  Communicator& group_;
  int stage_;
  int64_t shard_ = 0;         // elements per shard, ceil(total / trainers)
  uint64_t bucket_bytes_;     // one bucket of a collective, all trainers' parts together
  int64_t bucket_ = 0;        // elements per trainer in one bucket
  FlatAdamWState state_;
  // Stages 2 and 3: the parameters' shapes, which of them are whole now, this shard's summed
  // gradient and (stage 3) values ([end - begin] each), and the resident parameters' indices.
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<uint8_t> held_;
  std::unordered_map<const void*, size_t> index_;  // TensorImpl → index in params_
  torch::Tensor shard_params_, shard_grad_;
  std::vector<size_t> resident_;
  bool resident_held_ = false;
  // Model parallelism (set_model_parallel): its groups and each parameter's owned mask (the
  // product of the masks given; empty without).
  std::vector<Communicator*> model_groups_;
  std::vector<torch::Tensor> owned_;
  // Σ g² of the step's gradient over the trainers (and the tensor-parallel group): `grads` are the
  // shard's pieces (stage 1) or its summed gradient.
  double gradient_squares(const std::vector<torch::Tensor>& grads) const;
};

// ZeRO-3's weights streamed without a whole copy: the resident parameters whole, then the decoder
// layers' one layer at a time, in layer order. The trainer that reads them asks for each trained
// tensor in model order (get); every trainer then calls finish, which gathers the layers not
// reached yet, so all of them take part in the same collectives.
class LayerByLayer {
 public:
  // `layers`: the model's layer_trainable_parameters().
  LayerByLayer(ZeroOptimizer& zero, std::vector<std::vector<torch::Tensor>> layers);
  ~LayerByLayer();  // releases what is held (nothing collective)
  LayerByLayer(const LayerByLayer&) = delete;
  LayerByLayer& operator=(const LayerByLayer&) = delete;

  // `param` (a trained tensor of a layer not before the last one asked for, or a resident one) whole.
  const torch::Tensor& get(const torch::Tensor& param);
  void finish();

 private:
  void advance();  // releases the current layer, gathers the next

  ZeroOptimizer& zero_;
  std::vector<std::vector<torch::Tensor>> layers_;
  std::unordered_map<const void*, size_t> layer_of_;  // TensorImpl → its layer
  int64_t current_ = -1;
};

// Scoped: at stage 3, every trainable parameter whole on every trainer, or on trainer `root`
// alone (a collective) until the end of the scope; nothing otherwise (or with `when` false, which
// must be alike on every trainer).
class GatheredParameters {
 public:
  explicit GatheredParameters(ZeroOptimizer* zero, bool when = true, int root = -1)
      : zero_(zero != nullptr && zero->stage() == 3 && when ? zero : nullptr) {
    if (zero_) zero_->gather_all(root);
  }
  ~GatheredParameters() {
    if (zero_) zero_->release_all();
  }
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  ZeroOptimizer* zero_;
};

}  // namespace rlcpp
