#include "train/trainer.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "algo/dapo.h"
#include "model/kernel_linear.h"
#include "model/logprobs.h"
#include "train/response_layout.h"
#include "util/error.h"
#include "util/torch_format.h"
#include "util/progress.h"
#include "util/trace.h"

namespace rlcpp {

PackedBatch pack_samples(const std::vector<Sample>& samples, size_t begin, size_t end, bool padding_free) {
  RLCPP_CHECK(begin < end && end <= samples.size(), "pack [{}, {}) of {} samples", begin, end, samples.size());
  int64_t length = 0, total = 0;
  for (size_t k = begin; k < end; ++k) {
    const auto& s = samples[k];
    RLCPP_CHECK(!s.prompt_ids.empty(), "sample {} has an empty prompt", k);
    const auto n = static_cast<int64_t>(s.prompt_ids.size() + s.response_ids.size());
    length = std::max(length, n);
    total += n;
  }
  const int64_t b = static_cast<int64_t>(end - begin);
  PackedBatch p;
  p.targets = torch::full({b, length}, -1, torch::kInt64);
  p.response_mask = torch::zeros({b, length}, torch::kFloat32);
  const std::vector<int64_t> input_shape = padding_free ? std::vector<int64_t>{1, total} : std::vector<int64_t>{b, length};
  p.ids = torch::zeros(input_shape, torch::kInt64);
  p.attention_mask = torch::zeros(input_shape, torch::kInt64);
  if (padding_free) p.slots = torch::empty({total}, torch::kInt64);
  auto* ids = p.ids.data_ptr<int64_t>();
  auto* mask = p.attention_mask.data_ptr<int64_t>();
  auto* slots = padding_free ? p.slots.data_ptr<int64_t>() : nullptr;
  auto targets = p.targets.accessor<int64_t, 2>();
  auto response = p.response_mask.accessor<float, 2>();
  int64_t at = 0;  // the next input position
  for (int64_t row = 0; row < b; ++row) {
    const size_t k = begin + static_cast<size_t>(row);
    const auto& s = samples[k];
    const int64_t n_prompt = static_cast<int64_t>(s.prompt_ids.size());
    const int64_t n_total = n_prompt + static_cast<int64_t>(s.response_ids.size());
    if (!padding_free) at = row * length;
    for (int64_t t = 0; t < n_total; ++t, ++at) {
      ids[at] = t < n_prompt ? s.prompt_ids[static_cast<size_t>(t)] : s.response_ids[static_cast<size_t>(t - n_prompt)];
      mask[at] = padding_free ? row + 1 : 1;  // padding-free: the sample's number
      if (slots != nullptr) slots[at] = row * length + t;
    }
    // Position t predicts token t + 1: response token j is predicted at n_prompt - 1 + j.
    const auto loss_mask = s.loss_mask();
    RLCPP_CHECK(loss_mask.size() == s.response_ids.size(), "sample {}: segments cover {} of {} response tokens", k,
                loss_mask.size(), s.response_ids.size());
    for (int64_t j = 0; j < static_cast<int64_t>(s.response_ids.size()); ++j) {
      targets[row][n_prompt - 1 + j] = s.response_ids[static_cast<size_t>(j)];
      response[row][n_prompt - 1 + j] = loss_mask[static_cast<size_t>(j)];
    }
    p.response_start.push_back(n_prompt - 1);
  }
  p.input_targets = padding_free ? p.targets.reshape({-1}).index_select(0, p.slots).view(input_shape) : p.targets;
  return p;
}

torch::Tensor PackedBatch::per_sample(const torch::Tensor& values) const {
  if (!padding_free()) return values.view(targets.sizes());
  const auto flat = values.reshape({-1});
  RLCPP_CHECK(flat.size(0) == slots.size(0), "{} values for a padding-free row of {} tokens", flat.size(0), slots.size(0));
  return torch::zeros({targets.numel()}, values.options()).index_copy(0, slots.to(values.device()), flat).view(targets.sizes());
}

std::vector<std::pair<size_t, size_t>> micro_batches(const std::vector<Sample>& samples, int64_t max_samples,
                                                     int64_t max_tokens, bool padding_free) {
  RLCPP_CHECK(max_samples >= 1 || max_tokens > 0, "micro-batches of {} samples", max_samples);
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  int64_t total = 0, longest = 0;
  for (size_t k = 0; k < samples.size(); ++k) {
    const auto n = static_cast<int64_t>(samples[k].prompt_ids.size() + samples[k].response_ids.size());
    const auto count = static_cast<int64_t>(k - begin) + 1;
    const int64_t tokens = padding_free ? total + n : count * std::max(longest, n);
    const bool full = max_tokens > 0 ? tokens > max_tokens : count > max_samples;
    if (k > begin && full) {
      out.emplace_back(begin, k);
      begin = k;
      total = longest = 0;
    }
    total += n;
    longest = std::max(longest, n);
  }
  if (begin < samples.size()) out.emplace_back(begin, samples.size());
  return out;
}

void append_response_values(const torch::Tensor& values, const PackedBatch& batch, const std::vector<Sample>& samples,
                            size_t begin, std::vector<std::vector<float>>& out) {
  for (int64_t row = 0; row < values.size(0); ++row) {
    const int64_t n = static_cast<int64_t>(samples[begin + static_cast<size_t>(row)].response_ids.size());
    auto v = values[row].narrow(0, batch.response_start[static_cast<size_t>(row)], n).contiguous();
    out.emplace_back(v.data_ptr<float>(), v.data_ptr<float>() + n);
  }
}

namespace {

template <typename T>
torch::Tensor lay_out_rows(const std::vector<std::vector<T>>& values, const PackedBatch& batch, size_t begin,
                           torch::ScalarType dtype) {
  auto out = torch::zeros(batch.targets.sizes(), dtype);
  for (int64_t row = 0; row < out.size(0); ++row) {
    const auto& v = values[begin + static_cast<size_t>(row)];
    if (v.empty()) continue;
    out[row].narrow(0, batch.response_start[static_cast<size_t>(row)], static_cast<int64_t>(v.size()))
        .copy_(torch::tensor(v, dtype));
  }
  return out;
}

}  // namespace

torch::Tensor lay_out(const std::vector<std::vector<float>>& values, const PackedBatch& batch, size_t begin) {
  return lay_out_rows(values, batch, begin, torch::kFloat32);
}

torch::Tensor lay_out(const std::vector<std::vector<double>>& values, const PackedBatch& batch, size_t begin) {
  return lay_out_rows(values, batch, begin, torch::kFloat64);
}

void adamw_step(torch::optim::AdamW& optimizer) {
  auto dense_fp32 = [](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
  };
  bool fused = kernels_enabled();
  for (auto& group : optimizer.param_groups()) {
    fused = fused && !static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad();
    for (const auto& p : group.params()) {
      if (p.grad().defined()) fused = fused && dense_fp32(p) && dense_fp32(p.grad());
    }
  }
  if (!fused) {
    optimizer.step();
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = optimizer.state()[p.unsafeGetTensorImpl()];  // the optimizer's own key: the TensorImpl
      if (slot == nullptr) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      if (!dense_fp32(state.exp_avg()) || !dense_fp32(state.exp_avg_sq())) {
        state.exp_avg(state.exp_avg().to(torch::kFloat32).contiguous());
        state.exp_avg_sq(state.exp_avg_sq().to(torch::kFloat32).contiguous());
      }
      state.step(state.step() + 1);
      adamw_update(p, p.grad(), state.exp_avg(), state.exp_avg_sq(), state.step(), o);
    }
  }
}

Trainer::Trainer(std::shared_ptr<Transformer> policy, std::shared_ptr<Transformer> reference, TrainerConfig config)
    : policy_(std::move(policy)), reference_(std::move(reference)), config_(std::move(config)) {
  RLCPP_CHECK(policy_ != nullptr, "trainer without a policy");
  if (config_.loss.kl_coef != 0 && reference_ == nullptr && !policy_->has_adapters()) {
    throw_user_error("kl_coef {} needs a reference model (or set the KL coefficient to 0)", config_.loss.kl_coef);
  }
  if (config_.train_microbatch_size < 1) {
    throw_user_error("--train-microbatch-size {}: must be at least 1", config_.train_microbatch_size);
  }
  const auto& o = config_.optimizer;
  torch::optim::AdamWOptions options(o.lr);
  options.betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
  optimizer_ = std::make_unique<torch::optim::AdamW>(policy_->trainable_parameters(), options);
  if (reference_) {
    for (auto& p : reference_->parameters()) p.set_requires_grad(false);
  }
}

const EnumTable<LrSchedule>& lr_schedules() {
  static const EnumTable<LrSchedule> table(
      "learning-rate schedule", {{LrSchedule::kConstant, "constant", "lr after warm-up"},
                                 {LrSchedule::kLinear, "linear", "linear decay to min_lr_ratio x lr at the last step"},
                                 {LrSchedule::kCosine, "cosine", "cosine decay to min_lr_ratio x lr at the last step"}});
  return table;
}

double Trainer::current_lr() const {
  const auto& o = config_.optimizer;
  const int64_t step = n_steps_;  // the step about to be taken, 0-based
  if (o.warmup_steps > 0 && step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  if (o.lr_schedule == LrSchedule::kConstant || o.total_steps <= o.warmup_steps) return o.lr;
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / (o.total_steps - o.warmup_steps));
  const double floor = o.min_lr_ratio * o.lr;
  if (o.lr_schedule == LrSchedule::kLinear) return floor + (o.lr - floor) * (1.0 - progress);
  return floor + (o.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::vector<std::vector<float>> Trainer::response_logprobs(Transformer& model, const std::vector<Sample>& samples,
                                                           const ForwardContext& context, double* mean_entropy) const {
  torch::NoGradGuard no_grad;
  TrainStepMetrics head;  // the log-probs, and the entropy's sum and tokens
  double entropy_sum = 0, entropy_tokens = 0;
  trace::Span span("logprobs");
  const bool lockstep = &model == policy_.get() && sharded_parameters();
  const auto micros = micro_batches_of(samples);
  const auto n_micro = static_cast<int64_t>(micros.size());
  if (lockstep) {
    zero_->gather_resident();
    for (int64_t k = lockstep_passes(n_micro, false) - n_micro; k > 0; --k) empty_pass(false);
  }
  const StageWork work = sample_passes(model, context, samples, micros, "logprobs", [&](size_t begin, size_t, const PackedBatch& batch,
                                                                                     const torch::Tensor& h,
                                                                                     const ForwardContext&) {
    auto out = rlcpp::token_logprobs_entropy(h.reshape({-1, h.size(-1)}), model.output_weight(),
                                             batch.input_targets.to(h.device()).reshape({-1}), config_.temperature,
                                             model.options().logprob_chunk_tokens, model.vocab_shard());
    append_response_values(batch.per_sample(out.logprobs).to(torch::kCPU).to(torch::kFloat32), batch, samples, begin,
                           head.logprobs);
    if (mean_entropy != nullptr) {
      // Over the trained tokens (the entropy is 0 where there is no target, so this is every
      // response token's when nothing was inserted).
      const auto entropy = batch.per_sample(out.entropy);
      const auto mask = batch.response_mask.to(entropy.device()).to(entropy.scalar_type());
      entropy_sum += (entropy * mask).sum().item<double>();
      entropy_tokens += batch.response_mask.sum().item<double>();
    }
    return h;  // nothing runs backward
  });
  run_passes(work, /*backward=*/false);
  if (lockstep) zero_->release_resident();
  head.values["entropy"] = entropy_tokens > 0 ? entropy_sum / entropy_tokens : 0.0;
  share_last_stage(head, samples);
  if (mean_entropy != nullptr) *mean_entropy = head.values["entropy"];
  return std::move(head.logprobs);
}

std::vector<std::vector<float>> Trainer::policy_logprobs(const std::vector<Sample>& samples,
                                                         double* mean_entropy) const {
  return response_logprobs(*policy_, samples, policy_context_, mean_entropy);
}

std::vector<std::vector<float>> Trainer::reference_logprobs(const std::vector<Sample>& samples) const {
  if (reference_ == nullptr && policy_->has_adapters()) {  // LoRA: the reference is the base, adapters off
    ForwardContext base = policy_context_;
    base.adapters = false;
    return response_logprobs(*policy_, samples, base);
  }
  RLCPP_CHECK(reference_ != nullptr, "reference log-probs without a reference model");
  return response_logprobs(*reference_, samples);
}

namespace {

// The samples' advantages for the loss: [B] when each sample has one for all its tokens, else
// [B, L] on the packed batch's response positions (fp64).
torch::Tensor lay_out_advantages(const std::vector<Sample>& samples, const PackedBatch& batch, size_t begin) {
  const auto b = batch.targets.size(0);
  bool uniform = true;
  for (int64_t row = 0; row < b; ++row) uniform = uniform && samples[begin + static_cast<size_t>(row)].uniform_advantage();
  if (uniform) {
    std::vector<double> per_sample;
    for (int64_t row = 0; row < b; ++row) per_sample.push_back(samples[begin + static_cast<size_t>(row)].advantages[0]);
    return torch::tensor(per_sample, torch::kFloat64);
  }
  auto out = torch::zeros(batch.targets.sizes(), torch::kFloat64);
  auto a = out.accessor<double, 2>();
  for (int64_t row = 0; row < b; ++row) {
    const auto& s = samples[begin + static_cast<size_t>(row)];
    const int64_t start = batch.response_start[static_cast<size_t>(row)];
    for (size_t t = 0; t < s.response_ids.size(); ++t) a[row][start + static_cast<int64_t>(t)] = s.advantage(t);
  }
  return out;
}

}  // namespace

std::vector<uint8_t> Trainer::skipped_samples(const std::vector<Sample>& samples,
                                              const std::vector<std::vector<float>>& old_logprobs) const {
  RLCPP_CHECK(old_logprobs.size() == samples.size(), "{} old log-prob rows for {} samples", old_logprobs.size(),
              samples.size());
  std::vector<uint8_t> out(samples.size(), 0);
  if (config_.loss.skip_threshold <= 0) return out;
  const auto current = policy_logprobs(samples);
  for (const auto& [begin, end] : micro_batches_of(samples)) {
    const PackedBatch batch = pack(samples, begin, end);
    auto skip = rlcpp::skipped_samples(lay_out(current, batch, begin), lay_out(old_logprobs, batch, begin),
                                       batch.response_mask, config_.loss);
    for (size_t k = begin; k < end; ++k) out[k] = skip[static_cast<int64_t>(k - begin)].item<bool>() ? 1 : 0;
  }
  return out;
}

TrainStepMetrics Trainer::step(const PolicyMiniBatch& mb) {
  const auto& samples = mb.samples;
  RLCPP_CHECK(mb.old_logprobs.size() == samples.size(), "{} old log-prob rows for {} samples", mb.old_logprobs.size(),
              samples.size());
  RLCPP_CHECK(config_.loss.kl_coef == 0 || mb.ref_logprobs.size() == samples.size(), "{} ref rows for {} samples",
              mb.ref_logprobs.size(), samples.size());
  RLCPP_CHECK(mb.skipped.empty() || mb.skipped.size() == samples.size(), "{} skip flags for {} samples",
              mb.skipped.size(), samples.size());
  int64_t n_skipped = 0;
  for (auto skip : mb.skipped) n_skipped += skip;
  const double global_tokens = mb.global_tokens > 0 ? mb.global_tokens : std::max(1.0, loss_tokens(samples, mb.skipped));
  const double global_samples =
      mb.global_samples > 0 ? mb.global_samples : std::max(1.0, static_cast<double>(samples.size() - n_skipped));
  const double lr = begin_update();
  TrainStepMetrics metrics;
  const auto device = policy_->options().device;
  const bool entropy_bonus = config_.loss.entropy_coef != 0;
  // The fused head needs a loss whose terms each depend on one token's log-prob: not the entropy
  // bonus (the whole distribution) nor GSPO's sequence ratio (a sample's mean).
  const bool fused = config_.fused_head && !entropy_bonus && config_.loss.ratio_level == ImportanceLevel::kToken;
  double counted_tokens = 0, entropy_sum = 0, entropy_tokens = 0;
  const auto micros = micro_batches_of(samples);
  const auto n_micro = static_cast<int64_t>(micros.size());
  for (int64_t k = lockstep_passes(n_micro, true) - n_micro; k > 0; --k) empty_pass(true);
  // On the last stage each micro-batch's loss, which backward runs from (its metrics and log-probs recorded).
  const StageWork work = sample_passes(*policy_, policy_context_, samples, micros, "train", [&](size_t begin, size_t end,
                                                                                              const PackedBatch& batch,
                                                                                              const torch::Tensor& h,
                                                                                              const ForwardContext&) {
    PolicyLossInputs in;
    in.old_logprobs = lay_out(mb.old_logprobs, batch, begin).to(device);
    if (config_.loss.kl_coef != 0) in.ref_logprobs = lay_out(mb.ref_logprobs, batch, begin).to(device);
    std::vector<int64_t> left_out;  // truncated under filter_truncated, or skipped
    for (size_t j = begin; j < end; ++j) {
      left_out.push_back((config_.filter_truncated && samples[j].truncated) || (!mb.skipped.empty() && mb.skipped[j]));
    }
    in.advantages = lay_out_advantages(samples, batch, begin).to(device);
    in.mask = mask_truncated(batch.response_mask.to(device), torch::tensor(left_out).to(torch::kBool).to(device));
    if (config_.loss.uses_rollout_logprobs()) {
      std::vector<std::vector<float>> rollout;
      for (const auto& s : samples) rollout.push_back(s.rollout_logprobs);
      in.rollout_logprobs = lay_out(rollout, batch, begin).to(device);
    }
    in.global_tokens = global_tokens;
    in.global_samples = global_samples;
    const auto flat_h = h.reshape({-1, h.size(-1)});
    const auto flat_targets = batch.input_targets.to(device).reshape({-1});
    const int64_t chunk = policy_->options().logprob_chunk_tokens;
    torch::Tensor loss;  // what backward runs from
    if (fused) {
      // One pass over the vocabulary per chunk gives log-probs, the loss gradient and the head's
      // gradients (logprobs.h), over the rows with a target.
      const auto rows = flat_targets.ge(0).nonzero().squeeze(-1);
      auto lay_rows = [&](const torch::Tensor& values) {
        return batch.per_sample(torch::zeros({flat_targets.size(0)}, values.options()).index_copy(0, rows, values));
      };
      auto loss_of = [&](const torch::Tensor& logprobs) {
        PolicyLossInputs x = in;
        x.logprobs = lay_rows(logprobs);
        return policy_loss(x, config_.loss).loss;
      };
      auto head = fused_token_loss_head(flat_h.index_select(0, rows), policy_->output_weight(),
                                        flat_targets.index_select(0, rows), config_.temperature, chunk, loss_of,
                                        mb.score, policy_->vocab_shard());
      in.logprobs = lay_rows(head.logprobs);
      if (mb.score) in.entropy = lay_rows(head.entropy);
      loss = head.loss;
    } else {
      // The entropy bonus differentiates the entropy; scoring only reports it.
      torch::Tensor entropy;
      in.logprobs = batch.per_sample(token_logprobs_chunked(flat_h, policy_->output_weight(), flat_targets,
                                                            config_.temperature, chunk,
                                                            mb.score && !entropy_bonus ? &entropy : nullptr,
                                                            policy_->vocab_shard()));
      if (entropy_bonus) {
        entropy = token_entropy(flat_h, policy_->output_weight(), flat_targets, config_.temperature,
                                policy_->vocab_shard());
      }
      if (entropy.defined()) in.entropy = batch.per_sample(entropy);
    }
    if (mb.score) {
      auto logp = in.logprobs.detach().to(torch::kCPU).to(torch::kFloat32);
      append_response_values(logp, batch, samples, begin, metrics.logprobs);
      auto response = batch.response_mask.gt(0).to(in.entropy.device());
      entropy_sum += in.entropy.detach().masked_select(response).sum().item<double>();
      entropy_tokens += static_cast<double>(response.sum().item<int64_t>());
    }
    auto out = policy_loss(in, config_.loss);  // the loss, and the metrics
    const double n = out.metrics["n_tokens"];
    counted_tokens += n;
    for (const auto& [key, value] : out.metrics) {
      // Sums for losses and counts; token-weighted for per-token means; max for the max.
      if (key == "ratio_max") metrics.values[key] = std::max(metrics.values[key], value);
      else if (key == "loss" || key == "pg_loss" || key == "n_tokens") metrics.values[key] += value;
      else metrics.values[key] += value * n;
    }
    return fused ? loss : out.loss;
  });
  const StageTimes times = [&] {
    trace::Span span("forward_backward");
    return run_passes(work, /*backward=*/true);
  }();
  for (auto& [key, value] : metrics.values) {
    if (key != "ratio_max" && key != "loss" && key != "pg_loss" && key != "n_tokens") {
      value = counted_tokens > 0 ? value / counted_tokens : 0.0;
    }
  }
  // The advantages' std over the whole mini-batch, not each micro-batch's: from their token means.
  metrics.values["adv_std"] =
      std::sqrt(std::max(0.0, metrics.values["adv_sq_mean"] - std::pow(metrics.values["adv_mean"], 2)));
  if (mb.score) metrics.values["entropy"] = entropy_tokens > 0 ? entropy_sum / entropy_tokens : 0.0;
  metrics.values["n_skipped"] = static_cast<double>(n_skipped);
  share_last_stage(metrics, samples);
  if (stages_ != nullptr) metrics.values["pp_bubble"] = pipeline_bubble(times);
  finish_update(metrics, lr);
  return metrics;
}

double Trainer::begin_update() {
  const double lr = current_lr();
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  optimizer_->zero_grad();
  policy_->train();
  if (zero_) zero_->gather_resident();  // stage 3: until the step
  return lr;
}

double Trainer::loss_tokens(const std::vector<Sample>& samples, const std::vector<uint8_t>& skipped) const {
  double tokens = 0;
  for (size_t k = 0; k < samples.size(); ++k) {
    const bool left_out = (config_.filter_truncated && samples[k].truncated) || (!skipped.empty() && skipped[k]);
    if (!left_out) tokens += static_cast<double>(samples[k].trained_tokens());
  }
  return tokens;
}

void Trainer::enable_pipeline(std::shared_ptr<Communicator> stages) {
  const PipelineStage& stage = policy_->options().stage;
  RLCPP_CHECK(stages != nullptr && stages->size() == stage.count && stages->rank() == stage.index,
              "pipeline stage {} of {} given a group of {} (rank {})", stage.index, stage.count,
              stages ? stages->size() : 0, stages ? stages->rank() : -1);
  RLCPP_CHECK(zero_ == nullptr, "pipeline parallelism enabled after ZeRO: enable it first");
  RLCPP_CHECK(reference_ == nullptr || reference_->options().stage.index == stage.index,
              "the reference model is not the policy's pipeline stage");
  stages_ = std::move(stages);
}

StageTimes Trainer::run_passes(const StageWork& work, bool backward) const {
  const auto& o = policy_->options();
  return run_stage(stages_.get(), work, backward, torch::TensorOptions().dtype(o.dtype).device(o.device));
}

StageWork Trainer::sample_passes(Transformer& model, const ForwardContext& context, const std::vector<Sample>& samples,
                                 const std::vector<std::pair<size_t, size_t>>& micros, const char* phase,
                                 SampleHead head) const {
  StageWork work;
  work.micros = static_cast<int64_t>(micros.size());
  work.input_shape = [this, &samples, &micros](int64_t k) {
    const auto [begin, end] = micros[static_cast<size_t>(k)];
    return stage_input_shape(samples, begin, end);
  };
  work.forward = [this, &model, context, &samples, &micros, phase, head = std::move(head)](int64_t k, const torch::Tensor& input) {
    const auto [begin, end] = micros[static_cast<size_t>(k)];
    progress::phase(phase, k, static_cast<int64_t>(micros.size()), "micro-batches");
    const PackedBatch batch = pack(samples, begin, end);
    ForwardContext here = context;
    here.stage_input = input;
    auto h = model.hidden_states(batch.ids, batch.attention_mask, here);
    if (!model.options().stage.last()) return h;
    return head(begin, end, batch, h, here);
  };
  return work;
}

std::vector<int64_t> Trainer::stage_input_shape(const std::vector<Sample>& samples, size_t begin, size_t end) const {
  int64_t length = 0, total = 0;
  for (size_t k = begin; k < end; ++k) {
    const auto n = static_cast<int64_t>(samples[k].prompt_ids.size() + samples[k].response_ids.size());
    length = std::max(length, n);
    total += n;
  }
  if (config_.padding_free) return {1, total, policy_->config().hidden_size};
  return {static_cast<int64_t>(end - begin), length, policy_->config().hidden_size};
}

std::vector<std::pair<size_t, size_t>> Trainer::micro_batches_of(const std::vector<Sample>& samples) const {
  return micro_batches(samples, config_.train_microbatch_size, config_.max_tokens_per_micro_batch, config_.padding_free);
}

double Trainer::pipeline_bubble(const StageTimes& mine) const {
  auto all = torch::zeros({stages_->size(), 2}, torch::kFloat64);
  all[stages_->rank()][0] = mine.wait_seconds;
  all[stages_->rank()][1] = std::max(mine.total_seconds, 1e-9);
  stages_->all_reduce_sum(all);
  return (all.select(1, 0) / all.select(1, 1)).mean().item<double>();
}

void Trainer::share_last_stage(TrainStepMetrics& metrics, const std::vector<Sample>& samples) const {
  if (stages_ == nullptr || stages_->size() == 1) return;
  const int root = stages_->size() - 1;
  const bool mine = stages_->rank() == root;
  // The names, then the values bit for bit (a non-finite loss included).
  nlohmann::json names = nlohmann::json::array();
  if (mine) {
    for (const auto& [key, value] : metrics.values) names.push_back(key);
  }
  std::string bytes = mine ? nlohmann::json{{"names", names}, {"rows", !metrics.logprobs.empty()}}.dump() : "";
  stages_->broadcast_bytes(bytes, root);
  const auto header = nlohmann::json::parse(bytes);
  const auto keys = header.at("names").get<std::vector<std::string>>();
  auto values = torch::zeros({static_cast<int64_t>(keys.size())}, torch::kFloat64);
  if (mine) {
    for (size_t k = 0; k < keys.size(); ++k) values[static_cast<int64_t>(k)] = metrics.values.at(keys[k]);
  }
  stages_->broadcast(values, root);
  metrics.values.clear();
  for (size_t k = 0; k < keys.size(); ++k) metrics.values[keys[k]] = values[static_cast<int64_t>(k)].item<double>();
  if (!header.at("rows").get<bool>()) return;
  int64_t total = 0;
  for (const auto& s : samples) total += static_cast<int64_t>(s.response_ids.size());
  auto flat = torch::zeros({total}, torch::kFloat32);
  if (mine) {
    int64_t at = 0;
    for (const auto& row : metrics.logprobs) {
      flat.narrow(0, at, static_cast<int64_t>(row.size())).copy_(torch::tensor(row, torch::kFloat32));
      at += static_cast<int64_t>(row.size());
    }
  }
  stages_->broadcast(flat, root);
  if (mine) return;
  metrics.logprobs.clear();
  const float* p = flat.data_ptr<float>();
  for (const auto& s : samples) {
    metrics.logprobs.emplace_back(p, p + s.response_ids.size());
    p += s.response_ids.size();
  }
}

std::vector<torch::Tensor> Trainer::sum_tied_gradients(const std::vector<torch::Tensor>& trained) const {
  const PipelineStage& stage = policy_->options().stage;
  if (stages_ == nullptr || stage.whole() || !policy_->config().head_is_embedding() || !(stage.first() || stage.last())) {
    return trained;
  }
  // The first and last stages each hold the embedding: each sends the other its gradient (zeros
  // for none) and both take the sum, added in the same order so the copies stay equal.
  auto weight = policy_->model->embed_tokens->weight;
  if (!weight.requires_grad()) return trained;
  const int other = stage.first() ? stage.count - 1 : 0;
  constexpr int kTiedTag = 32767;
  const auto mine = weight.grad().defined() ? weight.grad() : torch::zeros_like(weight);
  auto theirs = torch::empty_like(mine);
  auto receive = stages_->irecv(theirs, other, kTiedTag);
  auto send = stages_->isend(mine, other, kTiedTag);
  receive->wait();
  send->wait();
  weight.mutable_grad() = stage.first() ? mine + theirs : theirs + mine;
  if (stage.first()) return trained;
  std::vector<torch::Tensor> counted;  // the last stage's copy is counted on the first
  for (const auto& p : trained) {
    if (!p.is_same(weight)) counted.push_back(p);
  }
  return counted;
}

void Trainer::enable_zero(Communicator& group, int stage, uint64_t bucket_bytes) {
  RLCPP_CHECK(stages_ == nullptr || stage == 1, "ZeRO stage {} with pipeline parallelism", stage);
  const auto trained = policy_->trainable_parameters();
  std::vector<torch::Tensor> resident;  // stages 2 and 3: the trained tensors outside the decoder layers
  if (stage >= 2) {
    std::set<const void*> in_layers;
    for (const auto& layer : policy_->layer_trainable_parameters()) {
      for (const auto& p : layer) in_layers.insert(p.unsafeGetTensorImpl());
    }
    for (const auto& p : trained) {
      if (in_layers.count(p.unsafeGetTensorImpl()) == 0) resident.push_back(p);
    }
  }
  // Under tensor parallelism the shards are of this rank's parts: the norm counts each element of
  // the whole model once (the masks are made while the parameters are whole: stage 3 releases them).
  std::vector<torch::Tensor> owned;
  const auto* tp = policy_->tensor_parallel();
  if (tp != nullptr) {
    for (const auto& p : trained) owned.push_back(tp->owned_mask(p, *policy_->shard_of(p)));
  }
  zero_ = std::make_unique<ZeroOptimizer>(trained, group, stage, bucket_bytes, resident);
  if (tp != nullptr) zero_->set_model_parallel(tp->group(), std::move(owned));
  if (stages_ != nullptr) {
    // The norm sums over the stages, each element once: a tied embedding's copy on the last stage
    // is the first stage's (its gradient summed into both before the step, sum_tied_gradients).
    const PipelineStage& at = policy_->options().stage;
    const bool holds_copy = !at.first() && at.last() && policy_->config().head_is_embedding();
    owned.clear();
    for (const auto& p : trained) {
      const bool copy = holds_copy && p.is_same(policy_->model->embed_tokens->weight);
      owned.push_back(copy ? torch::zeros({p.numel()}, torch::kFloat32) : torch::Tensor());
    }
    zero_->set_model_parallel(*stages_, std::move(owned));
  }
  if (stage >= 2) policy_context_.holder = zero_.get();
}

bool Trainer::sharded_parameters() const { return zero_ != nullptr && zero_->stage() == 3; }

int64_t Trainer::lockstep_passes(int64_t mine, bool backward) const {
  if (zero_ == nullptr || zero_->stage() < (backward ? 2 : 3)) return mine;
  auto all = torch::zeros({zero_->group().size()}, torch::kFloat64);
  all[zero_->group().rank()] = static_cast<double>(mine);
  zero_->group().all_reduce_sum(all);
  return static_cast<int64_t>(all.max().item<double>());
}

void Trainer::empty_pass(bool backward) const {
  trace::Span span("empty_pass");
  const auto h = policy_->hidden_states(torch::zeros({1, 1}, torch::kInt64), {}, policy_context_);
  if (backward) (h.sum() * 0).backward();
}

void Trainer::finish_update(TrainStepMetrics& metrics, double lr) {
  trace::Span span("optimizer");
  // A non-finite gradient (a NaN or inf loss anywhere, on any rank: the norm is of the summed
  // gradient) is not applied; the step still counts, so the schedule and the plan stay aligned.
  double grad_norm = 0;
  const auto trained = policy_->trainable_parameters();
  // Tensor parallelism: the gradients of tensors several ranks hold are summed over them first
  // (at ZeRO stages 2 and 3 the layers' were, as backward handed them over).
  policy_->reduce_partial_gradients(trained);
  if (zero_) {  // reduces, clips and updates this trainer's shard (or skips), releases the gradients
    sum_tied_gradients(trained);  // pipeline parallelism (stage 1): both copies take the sum
    const auto& options = static_cast<torch::optim::AdamWOptions&>(optimizer_->param_groups().at(0).options());
    grad_norm = zero_->step(options, config_.optimizer.max_grad_norm);
  } else {
    if (gradient_reducer_) gradient_reducer_(trained);
    if (policy_->tensor_parallel() != nullptr || stages_ != nullptr) {
      // The norm of the whole model's gradient (each element counted on one rank, over the
      // tensor-parallel group and the pipeline's stages), clipped as torch::nn::utils::clip_grad_norm_ does.
      double squares = policy_->gradient_squares(sum_tied_gradients(trained));
      if (stages_ != nullptr) {
        auto total = torch::tensor({squares}, torch::kFloat64);
        stages_->all_reduce_sum(total);
        squares = total.item<double>();
      }
      grad_norm = std::sqrt(squares);
      const double coef = config_.optimizer.max_grad_norm / (grad_norm + 1e-6);
      if (config_.optimizer.max_grad_norm > 0 && coef < 1 && std::isfinite(grad_norm)) {
        torch::NoGradGuard no_grad;
        for (const auto& p : trained) {
          if (p.grad().defined()) p.grad().mul_(coef);
        }
      }
    } else if (config_.optimizer.max_grad_norm > 0) {
      grad_norm = torch::nn::utils::clip_grad_norm_(trained, config_.optimizer.max_grad_norm);
    } else {
      for (const auto& p : trained) {
        if (p.grad().defined()) grad_norm += p.grad().pow(2).sum().item<double>();
      }
      grad_norm = std::sqrt(grad_norm);
    }
    if (std::isfinite(grad_norm)) {
      adamw_step(*optimizer_);
    } else {
      optimizer_->zero_grad();
    }
  }
  const bool finite = std::isfinite(grad_norm);
  ++n_steps_;
  policy_->eval();
  metrics.values["grad_norm"] = grad_norm;
  metrics.values["lr"] = lr;
  metrics.values["nonfinite"] = finite ? 0.0 : 1.0;
}

}  // namespace rlcpp
