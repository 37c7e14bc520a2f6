// The trainer: policy (and optional frozen reference) log-probs for rollout samples, and one
// optimizer step over a mini-batch — micro-batches with gradient accumulation (normalised by the
// mini-batch's global token and sample counts, so accumulation is exact), gradient clipping,
// AdamW and the learning-rate schedule. Optimizer state lives here, never in the model.
#pragma once

#include <torch/optim/adamw.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algo/policy_loss.h"
#include "algo/preference_loss.h"
#include "model/transformer.h"
#include "train/pipeline.h"
#include "train/sample.h"
#include "train/zero.h"
#include "util/enum_table.h"

namespace rlcpp {

// One supervised example: token ids and which of them are learned (1: predicted with loss).
struct SftSample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;  // same length as ids; loss_mask[0] is ignored (nothing predicts it)
};

// One preference pair of reward-model training: the token ids of the same prompt with the chosen
// and with the rejected response, and how far the chosen must score above it (0: no margin).
struct PreferencePair {
  std::vector<int32_t> chosen, rejected;
  double margin = 0;
};

enum class LrSchedule { kConstant, kLinear, kCosine };
const EnumTable<LrSchedule>& lr_schedules();

// AdamW and the learning-rate schedule (counted in optimizer steps).
struct OptimizerConfig {
  double lr = 1e-6;                  // peak learning rate
  double weight_decay = 0.01;        // decoupled (AdamW) weight decay
  double beta1 = 0.9, beta2 = 0.999; // AdamW moment decay rates
  double eps = 1e-8;                 // AdamW denominator epsilon
  double max_grad_norm = 1.0;        // global gradient-norm clip (0: no clipping)
  LrSchedule lr_schedule = LrSchedule::kConstant;  // decay after warm-up
  int64_t warmup_steps = 0;          // linear warm-up from lr/warmup_steps to lr
  int64_t total_steps = 0;           // where linear/cosine decay reaches the floor
  double min_lr_ratio = 0.0;         // floor of the decay, as a fraction of lr
};

// PPO's critic (-a PPO): the model it starts from and its optimizer's learning rate and warm-up
// (AdamW's other settings, the schedule's decay and the gradient clip are the policy's).
struct CriticOptions {
  std::string model;          // a reward model or a causal LM ("": the reward model under -rt model, else -m)
  double lr = 1e-5;           // peak learning rate (verl's critic default)
  int64_t warmup_steps = 0;   // linear warm-up in the critic's optimizer steps
};

// A run's training settings (the train group): batch sizes in prompts per trainer, epochs, the
// optimizer and what the trainer does with a non-finite gradient.
struct TrainOptions {
  int64_t train_batch_size = 4;        // prompts (groups) per step per trainer
  int64_t train_minibatch_size = 4;    // prompts per optimizer step
  int64_t train_microbatch_size = 8;   // samples per forward/backward
  int64_t max_tokens_per_micro_batch = 0;  // > 0: micro-batches by tokens instead (verl's ppo_max_token_len_per_gpu)
  bool padding_free = true;            // micro-batches as one row without padding (false: right-padded rows)
  int64_t num_training_epoch = 1;      // passes over each step's rollouts
  bool reuse_rollout_logprobs = true;  // an on-policy step takes the sampler's log-probs as the old ones
  bool gradient_checkpointing = false; // recompute each decoder layer's activations in backward
  OptimizerConfig optimizer;           // AdamW and the LR schedule
  int64_t max_nonfinite_steps = 3;     // stop after this many consecutive steps with a non-finite gradient
  PreferenceLossConfig preference;     // rlcpp train-rm: the Bradley–Terry loss's options
  CriticOptions critic;                // -a PPO: the critic
};

struct TrainerConfig {
  PolicyLossConfig loss;
  OptimizerConfig optimizer;
  int64_t train_microbatch_size = 2;  // samples per forward/backward
  int64_t max_tokens_per_micro_batch = 0;  // > 0: micro-batches by this token budget instead (micro_batches)
  bool padding_free = true;           // micro-batches as one row of the samples back to back (PackedBatch)
  double temperature = 1.0;           // log-probs under softmax(logits / T), as the sampler used
  bool filter_truncated = false;      // truncated samples leave the loss (DAPO's filter_truncated_response)
  bool fused_head = true;             // the fused loss head where the loss allows it (model/logprobs.h)
  PreferenceLossConfig preference;    // reward-model training (preference_step)
  double value_clip = 0.5;            // a critic's value loss (value_step): the clip of V around the old V
};

// One mini-batch of an RL step, as Trainer::step takes it (every vector aligned with `samples`).
struct PolicyMiniBatch {
  std::vector<Sample> samples;
  std::vector<std::vector<float>> old_logprobs;  // the policy's before the step's first update
  std::vector<std::vector<float>> ref_logprobs;  // the reference's; empty when kl_coef is 0
  std::vector<uint8_t> skipped;                  // 1: left out by the skip threshold; empty: none
  // Counts over the whole mini-batch across trainer ranks, skipped samples left out (the colocated
  // trainer passes its own); 0 means "this mini-batch's".
  double global_tokens = 0, global_samples = 0;
  // The step's forward is also the scoring pass (old_logprobs are the sampler's): it returns each
  // sample's response log-probs before the update, and the entropy over all response tokens.
  bool score = false;
};

// One mini-batch of a critic's update (PPO; the policy's mini-batch, so both train on the same
// micro-batches): per response token, the critic's values before the step's first update and the
// returns it regresses to (0 and unused on inserted tokens).
struct ValueMiniBatch {
  std::vector<Sample> samples;
  std::vector<std::vector<float>> old_values;
  std::vector<std::vector<double>> returns;
  double global_tokens = 0;  // the mini-batch's trained tokens over every trainer rank (0: this one's)
};

struct TrainStepMetrics {
  std::map<std::string, double> values;  // loss metrics summed over micro-batches (means token-weighted), grad_norm, lr
  std::vector<std::vector<float>> logprobs;  // with PolicyMiniBatch::score: as policy_logprobs, before the update
};

// Samples [begin, end) as the model takes them and as the loss takes them.
// The model's input (ids, attention_mask, input_targets): right-padded rows [B, L], L the longest
// sample; or padding-free, one row [1, T] of the samples back to back (T their total length), its
// mask numbering them 1..B (Transformer::hidden_states: each reads only its own keys).
// Per sample, as the losses take them (targets, response_mask): [B, L], targets -1 except at
// positions predicting a response token, the loss mask 1 at positions predicting a model token of
// the response (inserted tokens are context, never trained).
struct PackedBatch {
  torch::Tensor ids, attention_mask, input_targets;
  torch::Tensor targets, response_mask;
  std::vector<int64_t> response_start;  // position in the sample's row of its first predicted response token
  torch::Tensor slots;                  // padding-free: each input token's flat position in [B, L]; else undefined

  bool padding_free() const { return slots.defined(); }
  // Values per input token (the input's shape, or flat) laid out per sample: [B, L], 0 where a
  // sample has no token; differentiable.
  torch::Tensor per_sample(const torch::Tensor& values) const;
  // The tokens a forward of this input runs on (padding included).
  int64_t input_tokens() const { return ids.numel(); }
};
PackedBatch pack_samples(const std::vector<Sample>& samples, size_t begin, size_t end, bool padding_free = false);

// Consecutive micro-batches [begin, end) of `samples`: `max_samples` each, or with a token budget
// (> 0) as many as keep the forward's input within it (padding-free: their total length; padded:
// count × the longest), a sample longer than the budget alone.
std::vector<std::pair<size_t, size_t>> micro_batches(const std::vector<Sample>& samples, int64_t max_samples,
                                                     int64_t max_tokens, bool padding_free);

class Trainer {
 public:
  Trainer(std::shared_ptr<Transformer> policy, std::shared_ptr<Transformer> reference, TrainerConfig config);

  // Per-sample response-token log-probs under `model` run with `context` (no grad),
  // [n_samples][response length]; with `mean_entropy`, also the mean entropy over those tokens.
  std::vector<std::vector<float>> response_logprobs(Transformer& model, const std::vector<Sample>& samples,
                                                    const ForwardContext& context = {},
                                                    double* mean_entropy = nullptr) const;
  // Convenience: under the policy / the reference.
  std::vector<std::vector<float>> policy_logprobs(const std::vector<Sample>& samples,
                                                  double* mean_entropy = nullptr) const;
  std::vector<std::vector<float>> reference_logprobs(const std::vector<Sample>& samples) const;

  // The samples of a mini-batch the skip threshold leaves out under the current policy (one
  // no-grad forward; all 0 without a threshold). Decided before the step so that the mini-batch's
  // global counts can leave them out.
  std::vector<uint8_t> skipped_samples(const std::vector<Sample>& samples,
                                       const std::vector<std::vector<float>>& old_logprobs) const;

  // One optimizer step on a mini-batch. With entropy_coef, the entropy bonus is differentiated
  // (its forward keeps the logits of the response tokens).
  TrainStepMetrics step(const PolicyMiniBatch& minibatch);

  // One optimizer step of supervised fine-tuning on `batch`: the mean negative log-likelihood of
  // the learned tokens of the whole batch (micro-batches normalised by the batch's token count, or
  // by `global_tokens` when data-parallel trainers each hold part of the batch: the loss is then
  // this trainer's share and the gradient reducer sums the shares).
  TrainStepMetrics sft_step(const std::vector<SftSample>& batch, double global_tokens = 0);

  // One optimizer step of reward-model training (the policy is a sequence classifier of one label):
  // the Bradley–Terry loss (algo/preference_loss.h) summed over the batch's pairs / their count, in
  // micro-batches of train_microbatch_size pairs (a pair's two rows in one forward). Metrics:
  // loss, accuracy (the share of pairs whose chosen scores above the rejected), chosen and
  // rejected (mean scores), margin (mean chosen − rejected), grad_norm, lr.
  // With `global_pairs` (data-parallel trainers, each holding part of the batch): normalised by
  // that count, so loss, accuracy, chosen, rejected and margin are this trainer's shares (their sums
  // over the trainers are the whole batch's).
  TrainStepMetrics preference_step(const std::vector<PreferencePair>& batch, double global_pairs = 0);
  // The same figures for `pairs` without an update (a held-out set): no grad, eval mode; also
  // score_mean and score_std over all their scores, chosen and rejected. No collective but the
  // pipeline's (every stage of the replica calls it): under ZeRO-3 the caller holds the parameters
  // whole (GatheredParameters), on this trainer at least.
  std::map<std::string, double> preference_figures(const std::vector<PreferencePair>& pairs) const;

  // A critic (the model is a sequence classifier of one label, its score head the value head): per
  // sample, the value of the state before each response token (the head at the position that
  // predicts it), [n_samples][response length], no grad.
  std::vector<std::vector<float>> response_values(const std::vector<Sample>& samples) const;
  // One optimizer step of a critic on `mb`: the clipped value loss (algo/value_loss.h) over the
  // trained tokens / mb.global_tokens, in micro-batches of train_microbatch_size samples. Metrics:
  // vf_loss, vf_clip_frac, value_mean, return_mean, grad_norm, lr.
  TrainStepMetrics value_step(const ValueMiniBatch& mb);

  // Data parallelism: called with the policy's parameters after the backward passes of a step and
  // before clipping, to sum their gradients over the trainer ranks (each rank's loss is already
  // normalised by the global token and sample counts, so the sum is the global gradient).
  void set_gradient_reducer(std::function<void(const std::vector<torch::Tensor>&)> reducer) {
    gradient_reducer_ = std::move(reducer);
  }
  // ZeRO stage 1 or 2 over the data-parallel trainers `group` (train/zero.h), which must outlive
  // the trainer: the AdamW state is then this trainer's shard, held by zero(), and optimizer()
  // keeps only the options and the schedule's learning rate. The gradient reducer is not used.
  // At stages 2 and 3 the policy hands each layer's gradients to zero() (a ParameterHolder) in
  // backward, and every trainer runs as many passes as the one with the most micro-batches (empty
  // ones pad: those are collectives). At stage 3 the trainable parameters are also released
  // between uses (the model gathers them through zero()) and the model's weights are whole only
  // inside a GatheredParameters scope (train/zero.h).
  void enable_zero(Communicator& group, int stage, uint64_t bucket_bytes);
  // Pipeline parallelism: the policy (and the reference) are the stage ModelOptions::stage names
  // of `stages` (rank s holding stage s), and every pass over samples runs the 1F1B schedule over
  // them (train/pipeline.h): the policy's, a critic's, SFT's and a reward model's alike. Every
  // stage is given the same samples and returns the same results: log-probs, values and metrics
  // are the last stage's, shared. A tied embedding's two copies (the first and last stages' of a
  // causal LM) get the sum of their gradients, and the norm is over every stage. ZeRO beyond
  // stage 1 is refused with it.
  void enable_pipeline(std::shared_ptr<Communicator> stages);
  ZeroOptimizer* zero() { return zero_.get(); }
  // The response tokens of `samples` that count in the loss (the token-level normaliser): model
  // tokens (inserted ones never count), not of truncated samples under filter_truncated, nor of
  // samples marked in `skipped`.
  double loss_tokens(const std::vector<Sample>& samples, const std::vector<uint8_t>& skipped = {}) const;

  double current_lr() const;
  // Continues a run: the optimizer steps already taken (the schedule's position).
  void restore_steps(int64_t n_steps) { n_steps_ = n_steps; }
  int64_t n_steps() const { return n_steps_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }
  const TrainerConfig& config() const { return config_; }

 private:
  double begin_update();                                  // sets the LR of this step, zeroes grads; returns the LR
  void finish_update(TrainStepMetrics& metrics, double lr);  // clips, steps AdamW, records grad_norm and lr
  bool sharded_parameters() const;                        // ZeRO stage 3
  // The passes every trainer runs: the most of `mine` over the trainers where the passes hold
  // collectives (stage 3; stage 2 with `backward`), else `mine`.
  int64_t lockstep_passes(int64_t mine, bool backward) const;
  // A one-token forward (and backward of zero) through the policy's layers: a stage-3 trainer's
  // share of the collectives when it has no micro-batch left.
  void empty_pass(bool backward) const;
  // Runs `work` on this pipeline stage (without pipeline parallelism: each micro-batch's forward,
  // then its backward).
  StageTimes run_passes(const StageWork& work, bool backward) const;
  // Pipeline parallelism: the stages' mean share of their passes spent waiting (a collective).
  double pipeline_bubble(const StageTimes& mine) const;
  // Pipeline parallelism: what the last stage computed, on every stage.
  void share_last_stage(TrainStepMetrics& metrics, const std::vector<Sample>& samples) const;
  // The hidden states a stage receives for samples [begin, end): [B, L, H] ([1, T, H] padding-free).
  std::vector<int64_t> stage_input_shape(const std::vector<Sample>& samples, size_t begin, size_t end) const;
  // The micro-batches of `samples` under this trainer's settings (micro_batches).
  std::vector<std::pair<size_t, size_t>> micro_batches_of(const std::vector<Sample>& samples) const;
  PackedBatch pack(const std::vector<Sample>& samples, size_t begin, size_t end) const {
    return pack_samples(samples, begin, end, config_.padding_free);
  }
  // The passes over `samples`' micro-batches `micros` through `model`'s layers on this stage, each
  // packed, reported as `phase`; on the last stage `head` takes micro-batch [begin, end)'s packed
  // batch, hidden states and context and returns what backward runs from (anything without one).
  using SampleHead = std::function<torch::Tensor(size_t begin, size_t end, const PackedBatch& batch, const torch::Tensor& h,
                                                 const ForwardContext& context)>;
  StageWork sample_passes(Transformer& model, const ForwardContext& context, const std::vector<Sample>& samples,
                          const std::vector<std::pair<size_t, size_t>>& micros, const char* phase, SampleHead head) const;
  // The passes of preference pairs in micro-batches of -tmbs (supervised_steps.cpp): on the last
  // stage micro-batch [begin, end)'s chosen and rejected scores and margins go to `scored`, whose
  // result backward runs from.
  StageWork pair_passes(const std::vector<PreferencePair>& pairs, const ForwardContext& context,
                        const std::function<torch::Tensor(size_t begin, size_t end, const torch::Tensor& chosen,
                                                          const torch::Tensor& rejected, const torch::Tensor& margins)>&
                            scored) const;
  // Pipeline parallelism: the tied embedding's gradient summed over its copies on the first and
  // last stages; returns the parameters the gradient norm counts (each copy once).
  std::vector<torch::Tensor> sum_tied_gradients(const std::vector<torch::Tensor>& trained) const;

  std::shared_ptr<Transformer> policy_, reference_;
  TrainerConfig config_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  int64_t n_steps_ = 0;
  std::function<void(const std::vector<torch::Tensor>&)> gradient_reducer_;
  std::unique_ptr<ZeroOptimizer> zero_;
  std::shared_ptr<Communicator> stages_;  // pipeline parallelism's stages; null without
  ForwardContext policy_context_;  // the policy's passes: adapters on, ZeRO's holder from stage 2
};

// torch::optim::AdamW's step, each parameter through adamw_update (train/zero.h: the kernels' pool
// for dense fp32 CPU tensors) when every parameter with a gradient is a dense fp32 CPU tensor and
// the kernels are enabled ($RLCPP_KERNELS); else LibTorch's own step. The state is the
// optimizer's own (its keys, tensors and step counts): checkpoints, resumes and LibTorch's own
// step continue it unchanged.
void adamw_step(torch::optim::AdamW& optimizer);

}  // namespace rlcpp
