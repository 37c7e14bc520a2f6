// The trainer's critic steps (PPO): the values of rollout samples' response tokens, and an update
// of the clipped value loss. The critic is a one-label sequence classifier whose score head, read
// at every position rather than the last, is the value head.
#include "algo/value_loss.h"
#include "train/response_layout.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

void check_critic(const Transformer& model) {
  RLCPP_CHECK(model.config().classifier() && model.config().num_labels == 1,
              "values from {}: a critic is a sequence classifier of one label", model.config().architecture);
}

// The value head at every position of a packed batch from the last stage's hidden states `h`, per
// sample: [B, L], fp32 (fp64 for an fp64 model).
torch::Tensor values_of(Transformer& model, const torch::Tensor& h, const PackedBatch& batch, const ForwardContext& context) {
  const auto v = batch.per_sample(model.score->forward(h, context).squeeze(-1));
  return v.scalar_type() == torch::kFloat64 ? v : v.to(torch::kFloat32);
}

}  // namespace

std::vector<std::vector<float>> Trainer::response_values(const std::vector<Sample>& samples) const {
  check_critic(*policy_);
  torch::NoGradGuard no_grad;
  trace::Span span("values");
  policy_->eval();
  const auto micros = micro_batches_of(samples);
  const auto n_micro = static_cast<int64_t>(micros.size());
  const bool lockstep = sharded_parameters();
  if (lockstep) {
    zero_->gather_resident();
    for (int64_t k = lockstep_passes(n_micro, false) - n_micro; k > 0; --k) empty_pass(false);
  }
  TrainStepMetrics head;  // the values, per sample, in its rows (on every stage once shared)
  const StageWork work = sample_passes(*policy_, policy_context_, samples, micros, "values", [&](size_t begin, size_t,
                                                                                               const PackedBatch& batch,
                                                                                               const torch::Tensor& h,
                                                                                               const ForwardContext& context) {
    append_response_values(values_of(*policy_, h, batch, context).to(torch::kCPU).to(torch::kFloat32), batch, samples,
                           begin, head.logprobs);
    return h;  // nothing runs backward
  });
  run_passes(work, /*backward=*/false);
  if (lockstep) zero_->release_resident();
  share_last_stage(head, samples);
  return std::move(head.logprobs);
}

TrainStepMetrics Trainer::value_step(const ValueMiniBatch& mb) {
  check_critic(*policy_);
  const auto& samples = mb.samples;
  RLCPP_CHECK(mb.old_values.size() == samples.size() && mb.returns.size() == samples.size(),
              "{} old value and {} return rows for {} samples", mb.old_values.size(), mb.returns.size(), samples.size());
  double local_tokens = 0;
  for (const auto& s : samples) local_tokens += static_cast<double>(s.trained_tokens());
  const double global_tokens = mb.global_tokens > 0 ? mb.global_tokens : std::max(1.0, local_tokens);
  const double lr = begin_update();
  const auto device = policy_->options().device;
  const auto micros = micro_batches_of(samples);
  const auto n_micro = static_cast<int64_t>(micros.size());
  for (int64_t k = lockstep_passes(n_micro, true) - n_micro; k > 0; --k) empty_pass(true);
  TrainStepMetrics metrics;
  double counted = 0;
  // On the last stage each micro-batch's value loss, which backward runs from.
  const StageWork work = sample_passes(*policy_, policy_context_, samples, micros, "critic", [&](size_t begin, size_t,
                                                                                               const PackedBatch& batch,
                                                                                               const torch::Tensor& h,
                                                                                               const ForwardContext& context) {
    auto out = value_loss(values_of(*policy_, h, batch, context), lay_out(mb.old_values, batch, begin).to(device),
                          lay_out(mb.returns, batch, begin).to(device), batch.response_mask.to(device), config_.value_clip,
                          global_tokens);
    const double n = out.metrics["n_tokens"];
    counted += n;
    for (const auto& [key, value] : out.metrics) {
      metrics.values[key] += key == "vf_loss" || key == "n_tokens" ? value : value * n;  // sums; token-weighted means
    }
    return out.loss;
  });
  {
    trace::Span span("critic_forward_backward");
    run_passes(work, /*backward=*/true);  // (the pipeline's bubble is the policy step's figure)
  }
  for (auto& [key, value] : metrics.values) {
    if (key != "vf_loss" && key != "n_tokens") value = counted > 0 ? value / counted : 0.0;
  }
  share_last_stage(metrics, samples);
  finish_update(metrics, lr);
  return metrics;
}

}  // namespace rlcpp
