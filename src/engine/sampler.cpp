#include "engine/sampler.h"

#include "util/error.h"

namespace rlcpp {

uint64_t sample_seed(uint64_t seed, int64_t sample) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(sample + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

namespace {

bool truncates(const SamplingParams& p) { return p.top_k > 0 || p.top_p < 1.0 || p.min_p > 0.0; }

// Probabilities after temperature, top-k, top-p and min-p for one row (fp32 logits [V]):
// returns (probs in sorted order [K], token ids [K]) or, without truncation, (probs [V], empty).
std::pair<torch::Tensor, torch::Tensor> truncated(const torch::Tensor& row, const SamplingParams& p) {
  auto probs = torch::softmax(row / p.temperature, -1);
  if (!truncates(p)) return {probs, torch::Tensor()};
  auto [sorted, ids] = probs.sort(-1, /*descending=*/true);
  int64_t keep = sorted.size(0);
  if (p.top_k > 0) keep = std::min(keep, p.top_k);
  if (p.top_p < 1.0) {
    // Smallest prefix whose mass reaches top_p (the token that crosses it is kept).
    auto before = sorted.narrow(0, 0, keep).cumsum(0) - sorted.narrow(0, 0, keep);
    keep = std::max<int64_t>(1, before.lt(p.top_p).sum().item<int64_t>());
  }
  if (p.min_p > 0.0) {
    const double threshold = p.min_p * sorted[0].item<double>();
    keep = std::max<int64_t>(1, std::min(keep, sorted.narrow(0, 0, keep).ge(threshold).sum().item<int64_t>()));
  }
  return {sorted.narrow(0, 0, keep), ids.narrow(0, 0, keep)};
}

}  // namespace

torch::Tensor sampling_distribution(const torch::Tensor& logits_row, const SamplingParams& params) {
  auto row = logits_row.to(torch::kCPU).to(torch::kFloat32);
  auto out = torch::zeros({row.size(0)}, torch::kFloat64);
  if (params.temperature <= 0) {
    out[row.argmax().item<int64_t>()] = 1.0;
    return out;
  }
  auto [probs, ids] = truncated(row, params);
  probs = probs.to(torch::kFloat64);
  probs = probs / probs.sum();
  if (!ids.defined()) return probs;
  out.index_put_({ids}, probs);
  return out;
}

SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<std::mt19937_64*>& rngs) {
  RLCPP_CHECK(logits.dim() == 2 && static_cast<size_t>(logits.size(0)) == params.size() && params.size() == rngs.size(),
              "logits {} for {} params and {} rngs", logits.sizes(), params.size(), rngs.size());
  const int64_t n = logits.size(0);
  SampleResult result;
  result.tokens.resize(static_cast<size_t>(n));
  result.logprobs.resize(static_cast<size_t>(n));
  // Sampling is a handful of vector ops per row on the CPU; the logits come over once.
  auto rows = logits.to(torch::kCPU).to(torch::kFloat32).contiguous();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const SamplingParams& p = *params[static_cast<size_t>(i)];
    auto row = rows[i];
    const double u = uniform(*rngs[static_cast<size_t>(i)]);  // drawn for every row, greedy too: one draw per token
    int64_t token;
    if (p.temperature <= 0) {
      token = row.argmax().item<int64_t>();
    } else {
      auto [probs, ids] = truncated(row, p);
      auto cdf = probs.to(torch::kFloat64).cumsum(0);
      const double target = u * cdf[-1].item<double>();
      int64_t k = torch::searchsorted(cdf, torch::tensor({target}, torch::kFloat64), /*out_int32=*/false,
                                      /*right=*/true)
                      .item<int64_t>();
      k = std::min<int64_t>(k, cdf.size(0) - 1);
      token = ids.defined() ? ids[k].item<int64_t>() : k;
    }
    const double t = p.temperature > 0 ? p.temperature : 1.0;
    const auto logp = torch::log_softmax(row / t, -1)[token].item<float>();
    result.tokens[static_cast<size_t>(i)] = static_cast<int32_t>(token);
    result.logprobs[static_cast<size_t>(i)] = logp;
  }
  return result;
}

}  // namespace rlcpp
