#include "algo/value_loss.h"

#include <torch/torch.h>

#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

Gae generalized_advantages(const std::vector<double>& rewards, const std::vector<double>& values, double gamma, double lam) {
  RLCPP_CHECK(rewards.size() == values.size(), "GAE over {} rewards and {} values", rewards.size(), values.size());
  Gae out;
  out.advantages.assign(rewards.size(), 0.0);
  out.returns.assign(rewards.size(), 0.0);
  double next_value = 0, next_advantage = 0;  // past the last step: terminal
  for (size_t k = rewards.size(); k-- > 0;) {
    const double delta = rewards[k] + gamma * next_value - values[k];
    next_advantage = delta + gamma * lam * next_advantage;
    out.advantages[k] = next_advantage;
    out.returns[k] = next_advantage + values[k];
    next_value = values[k];
  }
  return out;
}

ValueLossOutput value_loss(const torch::Tensor& values, const torch::Tensor& old_values, const torch::Tensor& returns,
                           const torch::Tensor& mask, double clip, double global_tokens) {
  RLCPP_CHECK(values.sizes() == old_values.sizes() && values.sizes() == returns.sizes() && values.sizes() == mask.sizes(),
              "value loss over values {}, old values {}, returns {} and mask {}", values.sizes(), old_values.sizes(),
              returns.sizes(), mask.sizes());
  RLCPP_CHECK(global_tokens > 0, "value loss normalised by {} tokens", global_tokens);
  // Masked positions are set to 0 by selection first, so a non-finite value there reaches neither
  // the loss nor (through the products of backward) the gradient.
  const auto keep = mask.gt(0);
  const auto dtype = returns.scalar_type();
  auto select = [&](const torch::Tensor& x) { return torch::where(keep, x.to(dtype), torch::zeros({}, x.options().dtype(dtype))); };
  const auto v = select(values);
  const auto old = select(old_values);
  const auto target = select(returns);
  auto unclipped = (v - target).square();
  auto per_token = unclipped;
  torch::Tensor clipped_frac;
  if (clip > 0) {
    const auto v_clipped = old + (v - old).clamp(-clip, clip);
    const auto clipped = (v_clipped - target).square();
    per_token = torch::max(unclipped, clipped);
    clipped_frac = clipped.gt(unclipped).logical_and(keep);
  }
  per_token = torch::where(keep, per_token, torch::zeros_like(per_token));
  ValueLossOutput out;
  out.loss = 0.5 * per_token.sum() / global_tokens;
  torch::NoGradGuard no_grad;
  const double n = keep.sum().item<double>();
  auto mean_over = [&](const torch::Tensor& x) {
    return n > 0 ? torch::where(keep, x.detach(), torch::zeros_like(x)).sum().item<double>() / n : 0.0;
  };
  out.metrics["vf_loss"] = out.loss.item<double>();
  out.metrics["vf_clip_frac"] = clipped_frac.defined() && n > 0 ? clipped_frac.sum().item<double>() / n : 0.0;
  out.metrics["value_mean"] = mean_over(v);
  out.metrics["return_mean"] = mean_over(target);
  out.metrics["n_tokens"] = n;
  return out;
}

}  // namespace rlcpp
