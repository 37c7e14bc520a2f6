// The trainer's critic steps (PPO): the values of rollout samples' response tokens, and an update
// of the clipped value loss. The critic is a one-label sequence classifier whose score head, read
// at every position rather than the last, is the value head.
#include "algo/value_loss.h"
#include "train/response_layout.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

void check_critic(const Transformer& model) {
  RLCPP_CHECK(model.config().classifier() && model.config().num_labels == 1,
              "values from {}: a critic is a sequence classifier of one label", model.config().architecture);
}

// The value head at every position of a packed batch, per sample: [B, L], fp32 (fp64 for an fp64 model).
torch::Tensor packed_values(Transformer& model, const PackedBatch& batch, const ForwardContext& context) {
  const auto h = model.hidden_states(batch.ids, batch.attention_mask, context);
  const auto v = batch.per_sample(model.score->forward(h, context).squeeze(-1));
  return v.scalar_type() == torch::kFloat64 ? v : v.to(torch::kFloat32);
}

}  // namespace

std::vector<std::vector<float>> Trainer::response_values(const std::vector<Sample>& samples) const {
  check_critic(*policy_);
  RLCPP_CHECK(stages_ == nullptr, "critic values with pipeline parallelism");
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
  std::vector<std::vector<float>> out;
  for (const auto& [begin, end] : micros) {
    progress::phase("values", static_cast<int64_t>(begin), static_cast<int64_t>(samples.size()), "samples");
    const PackedBatch batch = pack(samples, begin, end);
    append_response_values(packed_values(*policy_, batch, policy_context_).to(torch::kCPU).to(torch::kFloat32), batch,
                           samples, begin, out);
  }
  if (lockstep) zero_->release_resident();
  return out;
}

TrainStepMetrics Trainer::value_step(const ValueMiniBatch& mb) {
  check_critic(*policy_);
  RLCPP_CHECK(stages_ == nullptr, "a critic step with pipeline parallelism");
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
  trace::Span span("critic_forward_backward");
  for (size_t m = 0; m < micros.size(); ++m) {
    const auto [begin, end] = micros[m];
    progress::phase("critic", static_cast<int64_t>(m), n_micro, "micro-batches");
    const PackedBatch batch = pack(samples, begin, end);
    const auto values = packed_values(*policy_, batch, policy_context_);
    auto out = value_loss(values, lay_out(mb.old_values, batch, begin).to(device),
                          lay_out(mb.returns, batch, begin).to(device), batch.response_mask.to(device), config_.value_clip,
                          global_tokens);
    out.loss.backward();
    const double n = out.metrics["n_tokens"];
    counted += n;
    for (const auto& [key, value] : out.metrics) {
      metrics.values[key] += key == "vf_loss" || key == "n_tokens" ? value : value * n;  // sums; token-weighted means
    }
  }
  for (auto& [key, value] : metrics.values) {
    if (key != "vf_loss" && key != "n_tokens") value = counted > 0 ? value / counted : 0.0;
  }
  finish_update(metrics, lr);
  return metrics;
}

}  // namespace rlcpp
