#include "rl/step/critic.h"

#include <optional>

#include "util/error.h"

namespace rlcpp {

std::vector<std::vector<double>> token_rewards(const std::vector<Sample>& samples,
                                               const std::vector<std::vector<float>>& old_logprobs,
                                               const std::vector<std::vector<float>>& ref_logprobs, double kl_coef) {
  RLCPP_CHECK(kl_coef == 0 || (ref_logprobs.size() == samples.size() && old_logprobs.size() == samples.size()),
              "KL in the reward over {} samples with {} old and {} reference rows", samples.size(), old_logprobs.size(),
              ref_logprobs.size());
  std::vector<std::vector<double>> out;
  out.reserve(samples.size());
  for (size_t k = 0; k < samples.size(); ++k) {
    const auto mask = samples[k].loss_mask();
    std::vector<double> r(mask.size(), 0.0);
    std::optional<size_t> last;
    for (size_t t = 0; t < mask.size(); ++t) {
      if (!mask[t]) continue;
      last = t;
      if (kl_coef != 0) {
        r[t] = -kl_coef * (static_cast<double>(old_logprobs[k].at(t)) - static_cast<double>(ref_logprobs[k].at(t)));
      }
    }
    if (last) r[*last] += samples[k].reward;
    out.push_back(std::move(r));
  }
  return out;
}

CriticTargets critic_targets(std::vector<Sample>& samples, const std::vector<std::vector<float>>& values,
                             const std::vector<std::vector<double>>& rewards, const PpoConfig& config) {
  RLCPP_CHECK(values.size() == samples.size() && rewards.size() == samples.size(),
              "critic targets of {} samples from {} value and {} reward rows", samples.size(), values.size(), rewards.size());
  CriticTargets out;
  double tokens = 0, value_sum = 0, return_sum = 0, advantage_sum = 0;
  for (size_t k = 0; k < samples.size(); ++k) {
    Sample& s = samples[k];
    const auto mask = s.loss_mask();
    RLCPP_CHECK(values[k].size() == mask.size() && rewards[k].size() == mask.size(),
                "sample {}: {} values and {} rewards for {} response tokens", k, values[k].size(), rewards[k].size(),
                mask.size());
    // The trajectory is the sample's trained tokens in order: inserted tokens are the
    // environment's, not steps of the policy.
    std::vector<size_t> steps;
    std::vector<double> r, v;
    for (size_t t = 0; t < mask.size(); ++t) {
      if (!mask[t]) continue;
      steps.push_back(t);
      r.push_back(rewards[k][t]);
      v.push_back(static_cast<double>(values[k][t]));
    }
    const Gae gae = generalized_advantages(r, v, config.gamma, config.lam);
    s.advantages.assign(mask.size(), 0.0);
    std::vector<double> returns(mask.size(), 0.0);
    for (size_t j = 0; j < steps.size(); ++j) {
      s.advantages[steps[j]] = gae.advantages[j];
      returns[steps[j]] = gae.returns[j];
      value_sum += v[j];
      return_sum += gae.returns[j];
      advantage_sum += gae.advantages[j];
    }
    tokens += static_cast<double>(steps.size());
    if (s.advantages.empty()) s.set_advantage(0.0);  // no response token: one advantage, as every sample has
    out.returns.push_back(std::move(returns));
  }
  out.metrics = {{"critic_tokens", tokens}, {"critic_value_sum", value_sum}, {"critic_return_sum", return_sum},
                 {"critic_advantage_sum", advantage_sum}};
  return out;
}

}  // namespace rlcpp
