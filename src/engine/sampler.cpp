#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

// A token the truncated distribution may keep: its unnormalised probability exp(z/T - max) and id.
struct Candidate {
  float prob;
  int32_t id;
};

// In order of probability, ties by id (a total order, the same on every rank of a split vocabulary).
bool before(const Candidate& a, const Candidate& b) { return a.prob != b.prob ? a.prob > b.prob : a.id < b.id; }

// Reorders `c` (tokens at or above min_p, the largest's probability being 1) so that its first
// `keep` entries, returned, are the distribution's support in order: the top_k by partial
// selection, then for top_p the smallest prefix whose mass (of `total`, the whole distribution's)
// reaches top_p, a sorted prefix grown until it holds the mass. Run on one rank's candidates it
// keeps a superset of that rank's part of the whole support.
int64_t select_kept(std::vector<Candidate>& c, double total, const SamplingParams& p) {
  int64_t keep = static_cast<int64_t>(c.size());
  if (p.top_k > 0 && p.top_k < keep) {
    std::nth_element(c.begin(), c.begin() + p.top_k, c.end(), before);
    keep = p.top_k;
  }
  int64_t sorted = std::min<int64_t>(keep, p.top_p < 1.0 ? 64 : keep);
  while (true) {
    std::partial_sort(c.begin(), c.begin() + sorted, c.begin() + keep, before);
    if (p.top_p >= 1.0) break;
    // Smallest prefix whose mass reaches top_p: the token crossing it is kept.
    const double need = p.top_p * total;
    double mass = 0;
    int64_t j = 0;
    while (j < sorted && mass < need) mass += c[static_cast<size_t>(j++)].prob;
    if (mass >= need || sorted == keep) {
      keep = std::max<int64_t>(std::min<int64_t>(1, keep), j);
      break;
    }
    sorted = std::min(keep, sorted * 8);
  }
  return keep;
}

// The kept candidate at uniform draw u of their renormalised mass.
int32_t draw_kept(const std::vector<Candidate>& c, int64_t keep, double u) {
  double kept = 0;
  for (int64_t j = 0; j < keep; ++j) kept += c[static_cast<size_t>(j)].prob;
  const double target = u * kept;
  double cdf = 0;
  for (int64_t j = 0; j < keep; ++j) {
    cdf += c[static_cast<size_t>(j)].prob;
    if (cdf > target) return c[static_cast<size_t>(j)].id;
  }
  return c[static_cast<size_t>(keep - 1)].id;
}

// The tokens at or above min_p (of the largest, which is 1) among unnormalised `probs` [n] of
// tokens offset + i.
void candidates_of(const float* probs, int64_t n, int64_t offset, const SamplingParams& p, std::vector<Candidate>& out) {
  out.clear();
  const float floor = static_cast<float>(p.min_p);
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] >= floor && probs[i] > 0) out.push_back({probs[i], static_cast<int32_t>(offset + i)});
  }
}

// The first token, from `first`, whose cumulative mass (from `cdf`) exceeds `target`; -1 when the
// probabilities run out first (rounding), with the last non-zero one in `last_nonzero`.
int64_t inverse_cdf(const float* probs, int64_t n, double cdf, double target, int64_t* last_nonzero) {
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] <= 0) continue;
    *last_nonzero = i;
    cdf += probs[i];
    if (cdf > target) return i;
  }
  return -1;
}

// The `k` most likely of a row's tokens with their log-probs: probs are exp(z/T - max), total their sum.
std::vector<TokenLogprob> top_tokens(const float* logits, const float* probs, int64_t vocab, int64_t k, float scale,
                                     float max, double total) {
  std::vector<Candidate> all;
  all.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) all.push_back({probs[i], static_cast<int32_t>(i)});
  k = std::min<int64_t>(k, vocab);
  std::partial_sort(all.begin(), all.begin() + k, all.end(), before);
  std::vector<TokenLogprob> out;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t id = all[static_cast<size_t>(j)].id;
    out.push_back({id, static_cast<float>(static_cast<double>(logits[id] * scale - max) - std::log(total))});
  }
  return out;
}

// One row's token and log-prob from its uniform draw u (see sampler.h). Over the vocabulary this is
// one max pass and one exp pass (vectorised); truncation sorts only the candidates it needs:
// those at or above min_p, the top_k by partial selection, and for top_p a sorted prefix grown
// until it holds the mass.
std::pair<int32_t, float> sample_row(const float* logits, int64_t vocab, const SamplingParams& p, double u,
                                     std::vector<float>& probs, std::vector<Candidate>& candidates,
                                     std::vector<TokenLogprob>* top) {
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
  if (p.logprobs > 0) *top = top_tokens(logits, probs.data(), vocab, p.logprobs, scale, max, total);
  if (greedy) return {static_cast<int32_t>(argmax), logprob(argmax)};
  if (!truncates(p)) {
    // The first token whose cumulative mass exceeds u of the total.
    int64_t last_nonzero = argmax;
    int64_t token = inverse_cdf(probs.data(), vocab, 0.0, u * total, &last_nonzero);
    if (token < 0) token = last_nonzero;  // rounding left the target above the sum
    return {static_cast<int32_t>(token), logprob(token)};
  }
  candidates_of(probs.data(), vocab, 0, p, candidates);
  const int32_t token = draw_kept(candidates, select_kept(candidates, total, p), u);
  return {token, logprob(token)};
}

// Every rank's row of `n` doubles, [size, n].
std::vector<double> gather_rows(Communicator& group, const std::vector<double>& mine) {
  auto in = torch::tensor(mine, torch::kFloat64);
  auto all = torch::empty({group.size() * static_cast<int64_t>(mine.size())}, torch::kFloat64);
  group.all_gather(in, all);
  return {all.data_ptr<double>(), all.data_ptr<double>() + all.numel()};
}

// sample_tokens over a vocabulary split over shard.group: each rank holds logits [n, V_shard] of
// tokens [begin, begin + V_shard). Three exchanges of a few numbers per row, then every rank
// computes the same results:
//   1. each shard's largest scaled logit and its token: the global max M (and the greedy token);
//   2. each shard's mass Σ exp(z/T - M): the total and, for a plain draw, the shard it falls in;
//   3. that shard's token (a plain draw) or every shard's candidates of the truncated support
//      (a superset of its part), from which the whole-vocabulary selection runs as on one rank.
// The probabilities are those of one rank exactly; only the total is summed in another order.
SampleResult sample_sharded(const torch::Tensor& rows, const std::vector<const SamplingParams*>& params,
                            const std::vector<double>& u, const VocabShard& shard) {
  Communicator& group = *shard.group;
  const int n_ranks = group.size(), me = group.rank();
  const int64_t n = rows.size(0), width = rows.size(1);
  const float* data = rows.data_ptr<float>();
  auto scale_of = [&](int64_t i) {
    const auto& p = *params[static_cast<size_t>(i)];
    return p.temperature <= 0 ? 1.0f : static_cast<float>(1.0 / p.temperature);
  };
  std::vector<double> maxima(static_cast<size_t>(2 * n));
  ThreadPool::global().parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t argmax = 0;
      maxima[static_cast<size_t>(2 * i)] = kernels::max_of(data + i * width, width, &argmax) * scale_of(i);
      maxima[static_cast<size_t>(2 * i + 1)] = static_cast<double>(shard.begin + argmax);
    }
  });
  const auto all_maxima = gather_rows(group, maxima);
  std::vector<float> max(static_cast<size_t>(n));
  std::vector<int32_t> greedy_token(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int best = 0;
    for (int r = 1; r < n_ranks; ++r) {
      if (all_maxima[static_cast<size_t>(r * 2 * n + 2 * i)] > all_maxima[static_cast<size_t>(best * 2 * n + 2 * i)]) best = r;
    }
    max[static_cast<size_t>(i)] = static_cast<float>(all_maxima[static_cast<size_t>(best * 2 * n + 2 * i)]);
    greedy_token[static_cast<size_t>(i)] = static_cast<int32_t>(all_maxima[static_cast<size_t>(best * 2 * n + 2 * i + 1)]);
  }
  std::vector<double> totals(static_cast<size_t>(n));
  ThreadPool::global().parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> probs(static_cast<size_t>(width));
    for (int64_t i = begin; i < end; ++i) {
      totals[static_cast<size_t>(i)] =
          kernels::exp_sum(data + i * width, width, scale_of(i), max[static_cast<size_t>(i)], probs.data());
    }
  });
  const auto all_totals = gather_rows(group, totals);
  // What this rank contributes to exchange 3, per row: (token, z/T - M) pairs, prob = exp of it.
  struct Entry {
    int32_t id;
    float shifted;
  };
  std::vector<std::vector<Entry>> mine(static_cast<size_t>(n));
  std::vector<double> total(static_cast<size_t>(n)), before_me(static_cast<size_t>(n));
  std::vector<int> owner(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    const double target = u[static_cast<size_t>(i)];
    for (int r = 0; r < n_ranks; ++r) sum += all_totals[static_cast<size_t>(r * n + i)];
    total[static_cast<size_t>(i)] = sum;
    // A plain draw's shard: the first whose cumulative mass exceeds u of the total, else the last with mass.
    double cumulative = 0;
    for (int r = 0; r < n_ranks; ++r) {
      const double t = all_totals[static_cast<size_t>(r * n + i)];
      if (r == me) before_me[static_cast<size_t>(i)] = cumulative;
      if (t > 0 && owner[static_cast<size_t>(i)] < 0 && cumulative + t > target * sum) owner[static_cast<size_t>(i)] = r;
      cumulative += t;
    }
    if (owner[static_cast<size_t>(i)] < 0) {
      for (int r = 0; r < n_ranks; ++r) {
        if (all_totals[static_cast<size_t>(r * n + i)] > 0) owner[static_cast<size_t>(i)] = r;
      }
    }
  }
  ThreadPool::global().parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> probs(static_cast<size_t>(width));
    std::vector<Candidate> candidates;
    for (int64_t i = begin; i < end; ++i) {
      const auto& p = *params[static_cast<size_t>(i)];
      const size_t k = static_cast<size_t>(i);
      const float* row = data + i * width;
      if (p.temperature <= 0) continue;  // the greedy token is known
      if (!truncates(p) && owner[k] != me) continue;
      const float scale = scale_of(i);
      kernels::exp_sum(row, width, scale, max[k], probs.data());
      if (!truncates(p)) {
        int64_t last_nonzero = 0;
        int64_t token = inverse_cdf(probs.data(), width, before_me[k], u[k] * total[k], &last_nonzero);
        if (token < 0) token = last_nonzero;
        mine[k].push_back({static_cast<int32_t>(shard.begin + token), row[token] * scale - max[k]});
        continue;
      }
      candidates_of(probs.data(), width, shard.begin, p, candidates);
      const int64_t keep = select_kept(candidates, total[k], p);
      for (int64_t j = 0; j < keep; ++j) {
        const int32_t id = candidates[static_cast<size_t>(j)].id;
        mine[k].push_back({id, row[id - shard.begin] * scale - max[k]});
      }
    }
  });
  std::string bytes;
  for (int64_t i = 0; i < n; ++i) {
    const auto count = static_cast<int32_t>(mine[static_cast<size_t>(i)].size());
    bytes.append(reinterpret_cast<const char*>(&count), sizeof(count));
    bytes.append(reinterpret_cast<const char*>(mine[static_cast<size_t>(i)].data()), sizeof(Entry) * static_cast<size_t>(count));
  }
  const auto everyone = all_gather_bytes(group, bytes);
  std::vector<std::vector<Entry>> merged(static_cast<size_t>(n));
  for (const auto& theirs : everyone) {
    size_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      int32_t count = 0;
      RLCPP_CHECK(at + sizeof(count) <= theirs.size(), "a short sampling message ({} bytes)", theirs.size());
      std::memcpy(&count, theirs.data() + at, sizeof(count));
      at += sizeof(count);
      RLCPP_CHECK(count >= 0 && at + sizeof(Entry) * static_cast<size_t>(count) <= theirs.size(),
                  "a short sampling message ({} bytes)", theirs.size());
      auto& list = merged[static_cast<size_t>(i)];
      const size_t old = list.size();
      list.resize(old + static_cast<size_t>(count));
      std::memcpy(list.data() + old, theirs.data() + at, sizeof(Entry) * static_cast<size_t>(count));
      at += sizeof(Entry) * static_cast<size_t>(count);
    }
  }
  SampleResult result;
  result.tokens.resize(static_cast<size_t>(n));
  result.logprobs.resize(static_cast<size_t>(n));
  result.top.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = *params[static_cast<size_t>(i)];
    const size_t k = static_cast<size_t>(i);
    const double log_total = std::log(total[k]);
    if (p.temperature <= 0) {  // its logit is the max: z/T - M = 0
      result.tokens[k] = greedy_token[k];
      result.logprobs[k] = static_cast<float>(-log_total);
      continue;
    }
    const auto& list = merged[k];
    RLCPP_CHECK(!list.empty(), "no rank sampled row {} of {}", i, n);
    const Entry* chosen = &list[0];
    if (truncates(p)) {
      std::vector<Candidate> candidates;
      for (const auto& e : list) candidates.push_back({std::exp(e.shifted), e.id});
      const int32_t token = draw_kept(candidates, select_kept(candidates, total[k], p), u[k]);
      chosen = &*std::find_if(list.begin(), list.end(), [&](const Entry& e) { return e.id == token; });
    }
    result.tokens[k] = chosen->id;
    result.logprobs[k] = static_cast<float>(static_cast<double>(chosen->shifted) - log_total);
  }
  return result;
}

}  // namespace

SampleResult sample_tokens_batched(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                                   const std::vector<double>& u) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  const auto device = logits.device();
  std::vector<float> scale(static_cast<size_t>(n));
  std::vector<double> top_p(static_cast<size_t>(n)), min_p(static_cast<size_t>(n));
  std::vector<int64_t> top_k(static_cast<size_t>(n)), how(static_cast<size_t>(n));  // how: 0 greedy, 1 plain, 2 truncated
  int64_t top_wanted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = *params[static_cast<size_t>(i)];
    const size_t k = static_cast<size_t>(i);
    scale[k] = p.temperature <= 0 ? 1.0f : static_cast<float>(1.0 / p.temperature);
    top_k[k] = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
    top_p[k] = p.top_p;
    min_p[k] = p.min_p;
    how[k] = p.temperature <= 0 ? 0 : truncates(p) ? 2 : 1;
    top_wanted = std::max<int64_t>(top_wanted, p.logprobs);
  }
  auto column = [&](const auto& values, torch::ScalarType type) {
    return torch::tensor(values, torch::TensorOptions().dtype(type)).to(device).unsqueeze(1);
  };
  // z = logits / T; probabilities exp(z - max z), the largest exactly 1; their total in fp64.
  const auto z = logits.to(torch::kFloat32) * column(scale, torch::kFloat32);
  const auto [max, argmax] = z.max(1, /*keepdim=*/true);
  const auto probs = (z - max).exp();
  const auto total = probs.sum(1, /*keepdim=*/true, torch::kFloat64);
  const auto index = torch::arange(vocab, torch::TensorOptions().dtype(torch::kLong).device(device)).unsqueeze(0);
  const auto kinds = column(how, torch::kLong);
  // Each kind's passes over the vocabulary run only when a row needs them (a greedy batch: none).
  auto token = argmax;
  if (std::count(how.begin(), how.end(), 1) > 0) {
    // A plain draw: the first token whose cumulative mass exceeds u of the total; past the end
    // (rounding), the last token with mass.
    const auto target = column(u, torch::kFloat64) * total;
    const auto below = probs.cumsum(1, torch::kFloat64).le(target).sum(1, /*keepdim=*/true);
    const auto last_nonzero = torch::where(probs.gt(0), index, torch::zeros_like(index)).amax(1, /*keepdim=*/true);
    token = torch::where(kinds.eq(1), torch::where(below.lt(vocab), below, last_nonzero), token);
  }
  if (std::count(how.begin(), how.end(), 2) > 0) {
    // Truncated: in order of probability (ties by id), the tokens at or above min_p, at most top_k
    // of them, and for top_p the prefix up to the token whose mass reaches top_p of the total;
    // then the draw over the kept mass.
    const auto [sorted, ids] = probs.sort(/*stable=*/true, 1, /*descending=*/true);
    const auto sorted_cdf = sorted.cumsum(1, torch::kFloat64);
    auto keep = (sorted.ge(column(min_p, torch::kFloat64)) & sorted.gt(0)).sum(1, /*keepdim=*/true);
    keep = torch::minimum(keep, column(top_k, torch::kLong));
    const auto p = column(top_p, torch::kFloat64);
    const auto reach = sorted_cdf.lt(p * total).sum(1, /*keepdim=*/true) + 1;
    keep = torch::where(p.lt(1.0), torch::minimum(keep, reach), keep).clamp_min(1);
    const auto kept_target = column(u, torch::kFloat64) * sorted_cdf.gather(1, keep - 1);
    const auto j = torch::minimum((sorted_cdf.le(kept_target) & index.lt(keep)).sum(1, /*keepdim=*/true), keep - 1);
    token = torch::where(kinds.eq(2), ids.gather(1, j), token);
  }
  // log softmax(z) of the chosen token: (z - max) in fp32, less log(total) in fp64.
  const auto logp = (z.gather(1, token) - max).to(torch::kFloat64) - total.log();
  torch::Tensor top_values, top_ids;
  if (top_wanted > 0) {
    std::tie(top_values, top_ids) = z.topk(std::min(top_wanted, vocab), 1);
    top_values = ((top_values - max).to(torch::kFloat64) - total.log()).cpu().contiguous();
    top_ids = top_ids.cpu().contiguous();
  }
  const auto tokens_host = token.squeeze(1).cpu().contiguous();
  const auto logp_host = logp.squeeze(1).cpu().contiguous();
  SampleResult result;
  result.tokens.resize(static_cast<size_t>(n));
  result.logprobs.resize(static_cast<size_t>(n));
  result.top.resize(static_cast<size_t>(n));
  const int64_t* tokens_at = tokens_host.data_ptr<int64_t>();
  const double* logp_at = logp_host.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    result.tokens[k] = static_cast<int32_t>(tokens_at[i]);
    result.logprobs[k] = static_cast<float>(logp_at[i]);
    for (int64_t t = 0; t < std::min<int64_t>(params[k]->logprobs, vocab); ++t) {
      result.top[k].push_back({static_cast<int32_t>(top_ids.data_ptr<int64_t>()[i * top_ids.size(1) + t]),
                               static_cast<float>(top_values.data_ptr<double>()[i * top_values.size(1) + t])});
    }
  }
  return result;
}

SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<std::mt19937_64*>& rngs, const VocabShard& shard) {
  RLCPP_CHECK(params.size() == rngs.size(), "{} params and {} rngs", params.size(), rngs.size());
  // Each row draws one uniform number from its own RNG (greedy too: one draw per token).
  std::vector<double> u(params.size());
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (size_t i = 0; i < u.size(); ++i) u[i] = uniform(*rngs[i]);
  return sample_tokens(logits, params, u, shard);
}

SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<double>& u, const VocabShard& shard) {
  RLCPP_CHECK(logits.dim() == 2 && static_cast<size_t>(logits.size(0)) == params.size() && params.size() == u.size(),
              "logits {} for {} params and {} draws", logits.sizes(), params.size(), u.size());
  const int64_t n = logits.size(0), vocab = logits.size(1);
  RLCPP_CHECK(vocab > 0, "sampling from an empty vocabulary");
  if (!logits.device().is_cpu() && !shard.split()) return sample_tokens_batched(logits, params, u);
  // The logits come over once, then rows are sampled in parallel.
  auto rows = logits.to(torch::kCPU).to(torch::kFloat32).contiguous();
  if (shard.split()) {
    for (const auto* p : params) {
      if (p->logprobs > 0) throw_user_error("top log-probs ({} per token) from a tensor-parallel engine are not supported",
                                            p->logprobs);
    }
    return sample_sharded(rows, params, u, shard);
  }
  SampleResult result;
  result.tokens.resize(static_cast<size_t>(n));
  result.logprobs.resize(static_cast<size_t>(n));
  result.top.resize(static_cast<size_t>(n));
  const float* data = rows.data_ptr<float>();
  ThreadPool::global().parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> probs;
    std::vector<Candidate> candidates;
    for (int64_t i = begin; i < end; ++i) {
      const auto [token, logp] = sample_row(data + i * vocab, vocab, *params[static_cast<size_t>(i)],
                                            u[static_cast<size_t>(i)], probs, candidates, &result.top[static_cast<size_t>(i)]);
      result.tokens[static_cast<size_t>(i)] = token;
      result.logprobs[static_cast<size_t>(i)] = logp;
    }
  });
  return result;
}

}  // namespace rlcpp
