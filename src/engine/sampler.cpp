#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "kernels/softmax.h"
#include "util/error.h"
#include "util/thread_pool.h"

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

namespace {

// One row's token and log-prob from its uniform draw u (see sampler.h). Over the vocabulary this is
// one max pass and one exp pass (vectorised); truncation sorts only the candidates it needs:
// those at or above min_p, the top_k by partial selection, and for top_p a sorted prefix grown
// until it holds the mass.
std::pair<int32_t, float> sample_row(const float* logits, int64_t vocab, const SamplingParams& p, double u,
                                     std::vector<float>& probs, std::vector<int32_t>& ids) {
  const bool greedy = p.temperature <= 0;
  const float scale = greedy ? 1.0f : static_cast<float>(1.0 / p.temperature);
  int64_t argmax = 0;
  const float max = kernels::max_of(logits, vocab, &argmax) * scale;
  probs.resize(static_cast<size_t>(vocab));
  // Unnormalised probabilities exp(z - max z), z = logits / T: the largest is exactly 1.
  const double total = kernels::exp_sum(logits, vocab, scale, max, probs.data());
  auto logprob = [&](int64_t token) {
    return static_cast<float>(static_cast<double>(logits[token] * scale - max) - std::log(total));
  };
  if (greedy) return {static_cast<int32_t>(argmax), logprob(argmax)};
  int64_t token = -1;
  if (!truncates(p)) {
    // The first token whose cumulative mass exceeds u of the total.
    const double target = u * total;
    double cdf = 0;
    int64_t last_nonzero = argmax;
    for (int64_t i = 0; i < vocab; ++i) {
      if (probs[i] <= 0) continue;
      last_nonzero = i;
      cdf += probs[i];
      if (cdf > target) {
        token = i;
        break;
      }
    }
    if (token < 0) token = last_nonzero;  // rounding left the target above the sum
    return {static_cast<int32_t>(token), logprob(token)};
  }
  // Candidates in order of probability, ties by id.
  ids.clear();
  const float floor = static_cast<float>(p.min_p);  // min_p of the largest, which is 1
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[i] >= floor && probs[i] > 0) ids.push_back(static_cast<int32_t>(i));
  }
  auto before = [&](int32_t a, int32_t b) { return probs[a] != probs[b] ? probs[a] > probs[b] : a < b; };
  int64_t keep = static_cast<int64_t>(ids.size());
  if (p.top_k > 0 && p.top_k < keep) {
    std::nth_element(ids.begin(), ids.begin() + p.top_k, ids.end(), before);
    keep = p.top_k;
  }
  int64_t sorted = std::min<int64_t>(keep, p.top_p < 1.0 ? 64 : keep);
  while (true) {
    std::partial_sort(ids.begin(), ids.begin() + sorted, ids.begin() + keep, before);
    if (p.top_p >= 1.0) break;
    // Smallest prefix whose mass (of the whole distribution) reaches top_p: the token crossing it is kept.
    const double need = p.top_p * total;
    double mass = 0;
    int64_t j = 0;
    while (j < sorted && mass < need) mass += probs[ids[j++]];
    if (mass >= need || sorted == keep) {
      keep = std::max<int64_t>(1, j);
      break;
    }
    sorted = std::min(keep, sorted * 8);
  }
  double kept = 0;
  for (int64_t j = 0; j < keep; ++j) kept += probs[ids[j]];
  const double target = u * kept;
  double cdf = 0;
  token = ids[keep - 1];
  for (int64_t j = 0; j < keep; ++j) {
    cdf += probs[ids[j]];
    if (cdf > target) {
      token = ids[j];
      break;
    }
  }
  return {static_cast<int32_t>(token), logprob(token)};
}

}  // namespace

SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<std::mt19937_64*>& rngs) {
  RLCPP_CHECK(logits.dim() == 2 && static_cast<size_t>(logits.size(0)) == params.size() && params.size() == rngs.size(),
              "logits {} for {} params and {} rngs", logits.sizes(), params.size(), rngs.size());
  const int64_t n = logits.size(0), vocab = logits.size(1);
  SampleResult result;
  result.tokens.resize(static_cast<size_t>(n));
  result.logprobs.resize(static_cast<size_t>(n));
  RLCPP_CHECK(vocab > 0, "sampling from an empty vocabulary");
  // The logits come over once; each row draws one uniform number from its own RNG (greedy too: one
  // draw per token), then rows are sampled in parallel.
  auto rows = logits.to(torch::kCPU).to(torch::kFloat32).contiguous();
  std::vector<double> u(static_cast<size_t>(n));
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) u[static_cast<size_t>(i)] = uniform(*rngs[static_cast<size_t>(i)]);
  const float* data = rows.data_ptr<float>();
  ThreadPool::global().parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> probs;
    std::vector<int32_t> ids;
    for (int64_t i = begin; i < end; ++i) {
      const auto [token, logp] =
          sample_row(data + i * vocab, vocab, *params[static_cast<size_t>(i)], u[static_cast<size_t>(i)], probs, ids);
      result.tokens[static_cast<size_t>(i)] = token;
      result.logprobs[static_cast<size_t>(i)] = logp;
    }
  });
  return result;
}

}  // namespace rlcpp
