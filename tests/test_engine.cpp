// The generation engine against the eager reference, the RL log-prob invariant, determinism
// independent of batch composition, block accounting under preemption, and stop conditions.
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine_requests.h"
#include "dot_instructions.h"
#include "test_util.h"
#include "trainer_logprobs.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "util/error.h"
#include "util/threads.h"

using namespace rlcpp;
using rlcpp::testing::expect_same;
using rlcpp::testing::mixed_requests;
using rlcpp::testing::small_engine;


TEST(Engine, GreedyMatchesEagerReference) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    auto requests = mixed_requests(model->config().vocab_size, 0.0, 12, 1);
    Engine engine(model, small_engine());
    auto fast = engine.generate(requests);
    auto slow = generate_eager(*model, requests, nullptr);
    expect_same(fast, slow, "greedy engine vs eager");
    for (size_t k = 0; k < fast.size(); ++k) {
      for (size_t t = 0; t < fast[k].logprobs.size(); ++t) {
        EXPECT_NEAR(fast[k].logprobs[t], slow[k].logprobs[t], 1e-5);  // fp32, different matmul shapes
      }
    }
    EXPECT_GT(engine.last_stats().scheduler.n_copies, 0);  // groups forked and wrote into shared blocks
  }
}

TEST(Engine, SampledLogprobsEqualTrainerLogprobs) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    auto requests = mixed_requests(model->config().vocab_size, 0.8, 16, 2);
    for (auto& r : requests) r.params.top_k = 40;  // truncation must not change the reported log-prob
    Engine engine(model, small_engine());
    auto samples = engine.generate(requests);
    double worst = 0;
    for (const auto& s : samples) {
      const auto trainer = rlcpp::testing::trainer_logprobs(*model, requests[static_cast<size_t>(s.request)].prompt_ids,
                                                            s.token_ids, 0.8);
      for (size_t t = 0; t < s.token_ids.size(); ++t) {
        worst = std::max(worst, std::abs(trainer[t] - s.logprobs[t]));
      }
    }
    // The RL invariant (docs/architecture.md): within 1e-5 in fp32 on CPU.
    EXPECT_LT(worst, 1e-5);
  }
}

// Steady state: once a step of a shape has run, the decode steps of that shape take every tensor
// buffer from those earlier steps freed (util/threads.h's StepBufferScope), and allocate none.
TEST(Engine, SteadyStateDecodeStepsAllocateNoBuffers) {
  install_cpu_block_cache();
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    Engine engine(model, small_engine());
    auto requests = [&](uint64_t seed) {  // four sequences in lockstep: one prefill, then decode steps of 4 rows
      std::vector<GenerationRequest> out(4);
      for (auto& r : out) {
        for (int k = 0; k < 6; ++k) r.prompt_ids.push_back(static_cast<int32_t>((seed + 7 * k) % 50));
        r.params.temperature = 0.8;
        r.params.max_new_tokens = 20;
        r.seed = seed++;
      }
      return out;
    };
    engine.generate(requests(1));  // the first steps of each shape allocate
    engine.generate(requests(100));
    const EngineStats& stats = engine.last_stats();
    ASSERT_EQ(stats.n_decode_steps, 19);
    EXPECT_GE(stats.decode_buffer_allocations, 19 * 10);  // tensors are still made: their buffers are reused
    EXPECT_EQ(stats.decode_fresh_allocations, 0);
  }
}

TEST(Engine, SamplingIsDeterministicAndIndependentOfBatchComposition) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  auto requests = mixed_requests(model->config().vocab_size, 1.0, 20, 3);
  for (auto& r : requests) {
    r.params.top_p = 0.9;
    r.params.min_p = 0.01;
  }
  Engine engine(model, small_engine());
  auto first = engine.generate(requests);
  auto second = engine.generate(requests);
  expect_same(first, second, "same seeds, same batch");
  // Each request alone, with a one-sequence batch limit, without prefix sharing, and in a cache so
  // small that sequences are preempted and recomputed: the same tokens.
  for (size_t r = 0; r < requests.size(); ++r) {
    auto alone = engine.generate({requests[r]});
    for (size_t k = 0; k < alone.size(); ++k) alone[k].request = static_cast<int64_t>(r);
    std::vector<GeneratedSample> expected;
    for (const auto& s : first) {
      if (s.request == static_cast<int64_t>(r)) expected.push_back(s);
    }
    expect_same(alone, expected, "request alone");
  }
  EngineConfig narrow = small_engine();
  narrow.scheduler.max_num_seqs = 1;
  narrow.scheduler.prefix_sharing = false;
  expect_same(Engine(model, narrow).generate(requests), first, "one sequence at a time, no sharing");
  Engine tiny(model, small_engine(/*n_blocks=*/16, /*block_size=*/4));  // 64 slots for 11 sequences of up to 53 tokens
  expect_same(tiny.generate(requests), first, "tiny cache with preemption");
  EXPECT_GT(tiny.last_stats().scheduler.n_preemptions, 0);
  // Prompts in 5-token chunks mixed into the decode steps, whole prompts in steps of their own,
  // and chunks in the tiny cache (a sequence preempted mid-prompt): the same tokens.
  for (bool chunked : {true, false}) {
    for (int64_t n_blocks : {256, 16}) {
      EngineConfig c = small_engine(n_blocks, 4);
      c.scheduler.chunked_prefill = chunked;
      c.scheduler.max_num_batched_tokens = chunked ? 5 : 64;
      Engine e(model, c);
      expect_same(e.generate(requests), first, fmt::format("chunked {} n_blocks {}", chunked, n_blocks));
      if (chunked && n_blocks == 256) EXPECT_GT(e.last_stats().scheduler.n_prefill_steps, 11);
    }
  }
  auto eager = generate_eager(*model, requests, nullptr);
  expect_same(eager, first, "eager reference");
}

TEST(Engine, ChunkedPrefillMatchesWholePromptPrefill) {
  // Log-probs of prompt chunks attending to the cached part of their own prompt: the same as one
  // whole-prompt pass, on every fixture, sampled with prefix sharing.
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    auto requests = mixed_requests(model->config().vocab_size, 0.9, 10, 4);
    EngineConfig whole = small_engine();
    whole.scheduler.chunked_prefill = false;
    EngineConfig chunks = small_engine();
    chunks.scheduler.max_num_batched_tokens = 7;
    auto a = Engine(model, whole).generate(requests);
    auto b = Engine(model, chunks).generate(requests);
    expect_same(a, b, "chunked vs whole");
    for (size_t k = 0; k < a.size(); ++k) {
      for (size_t t = 0; t < std::min(a[k].logprobs.size(), b[k].logprobs.size()); ++t) {
        EXPECT_NEAR(a[k].logprobs[t], b[k].logprobs[t], 1e-5);
      }
    }
  }
}

TEST(Engine, RequestThatCanNeverFitIsAnError) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"));
  Engine engine(model, small_engine(/*n_blocks=*/4, /*block_size=*/4));
  GenerationRequest r;
  r.prompt_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  r.params.max_new_tokens = 7;
  EXPECT_THROW_MSG(engine.generate({r}), UserError, "prompt of 10 tokens", "max_new_tokens 7", "17 tokens",
                   "holds 4 blocks of 4 tokens (16 tokens");
  r.prompt_ids = {999999};
  EXPECT_THROW_MSG(engine.generate({r}), UserError, "outside the vocabulary");
}

// Generation stays within the model's positions: a prompt that fills them is an error, a response
// that would run past them is capped at the last position (an 810-token prompt on a 256-position
// model once ran on silently).
TEST(Engine, GenerationStaysWithinMaxPositionEmbeddings) {
  rlcpp::testing::TempDir dir;
  const auto model_dir = dir / "short-context";
  std::filesystem::copy(rlcpp::testing::fixture("llama-tiny"), model_dir, std::filesystem::copy_options::recursive);
  auto config = nlohmann::json::parse(std::ifstream(model_dir / "config.json"));
  config["max_position_embeddings"] = 16;
  std::ofstream(model_dir / "config.json") << config.dump();
  auto model = Transformer::from_pretrained(model_dir);
  Engine engine(model, small_engine());
  GenerationRequest r;
  r.prompt_ids = std::vector<int32_t>(16, 5);
  r.params.max_new_tokens = 4;
  r.params.temperature = 0;
  EXPECT_THROW_MSG(engine.generate({r}), UserError, "prompt of 16 tokens fills the model's 16 positions", "-mpt");
  r.prompt_ids = std::vector<int32_t>(13, 5);
  const auto out = engine.generate({r});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token_ids.size(), 3u);  // positions 13, 14, 15
  EXPECT_EQ(generate_eager(*model, {r}, nullptr)[0].token_ids, out[0].token_ids);
}

TEST(Engine, StopTokensStopStringsAndVersion) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  auto tokenizer = rlcpp::testing::byte_tokenizer();  // one token per byte, for the stop-string check
  Engine engine(model, small_engine(), tokenizer);
  GenerationRequest r;
  r.prompt_ids = {65, 66, 67};
  r.params.temperature = 0;
  r.params.max_new_tokens = 24;
  auto free_run = engine.generate({r})[0];
  ASSERT_EQ(free_run.token_ids.size(), 24u);
  EXPECT_EQ(free_run.finish_reason, FinishReason::kLength);
  // Stop token: the 6th generated token.
  r.params.stop_token_ids = {free_run.token_ids[5]};
  auto stopped = engine.generate({r})[0];
  const auto first_hit = std::find(free_run.token_ids.begin(), free_run.token_ids.end(), free_run.token_ids[5]);
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.token_ids.size(), static_cast<size_t>(first_hit - free_run.token_ids.begin()) + 1);
  // Stop string: two bytes made by tokens 8 and 9 (ids < 256 decode to one byte each).
  std::vector<int32_t> byte_tokens;
  for (size_t k = 0; k + 1 < free_run.token_ids.size(); ++k) {
    if (k >= 6 && free_run.token_ids[k] < 128 && free_run.token_ids[k] > 31 && free_run.token_ids[k + 1] < 128 &&
        free_run.token_ids[k + 1] > 31) {
      r.params.stop_token_ids.clear();
      r.params.stop_strings = {std::string{static_cast<char>(free_run.token_ids[k]), static_cast<char>(free_run.token_ids[k + 1])}};
      auto by_string = engine.generate({r})[0];
      EXPECT_EQ(by_string.finish_reason, FinishReason::kStop);
      EXPECT_LE(by_string.token_ids.size(), k + 2);
      EXPECT_EQ(by_string.text.find(r.params.stop_strings[0]), std::string::npos);  // text ends before it
      break;
    }
  }
  engine.load_weights(model->named_weights(), 7);
  EXPECT_EQ(engine.generate({r})[0].policy_version, 7);
}

TEST(Scheduler, BlockAccountingUnderRandomLoad) {
  // No model: random prompts and groups through a tiny pool; tokens are appended by hand.
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    SchedulerConfig config{static_cast<int64_t>(1 + rng() % 6), static_cast<int64_t>(trial % 2 == 0 ? 8 + rng() % 40 : 1 + rng() % 12),
                           trial % 3 != 0, trial % 2 == 1};
    Scheduler scheduler(config, /*n_blocks=*/12, /*block_size=*/4);
    std::vector<SamplingParams> params(8);
    for (int r = 0; r < 8; ++r) {
      params[r].max_new_tokens = static_cast<int64_t>(1 + rng() % 20);
      std::vector<int32_t> prompt(static_cast<size_t>(1 + rng() % 20), 1);
      scheduler.add_request(r, prompt, params[r], static_cast<int64_t>(1 + rng() % 3), rng());
    }
    int steps = 0;
    while (!scheduler.done()) {
      auto batch = scheduler.schedule();
      ASSERT_FALSE(batch.work.empty());
      ASSERT_EQ(scheduler.check_blocks(), "") << "after schedule, step " << steps;
      scheduler.complete(batch);
      for (const auto& w : batch.work) {
        for (int64_t id : w.samplers) {
          scheduler.append(id, 2, 0.0f);
          const auto& s = scheduler.sequence(id);
          if (s.n_response() >= s.params->max_new_tokens || rng() % 17 == 0) {
            scheduler.finish(id, FinishReason::kLength);
          }
        }
      }
      ASSERT_EQ(scheduler.check_blocks(), "") << "after finishing, step " << steps;
      ASSERT_LT(++steps, 10000);
    }
    EXPECT_EQ(scheduler.blocks().n_free(), 12);
  }
}

TEST(Scheduler, ChunkedPrefillKeepsRunningSequencesDecoding) {
  // A 100-token prompt arrives while a group of 3 decodes: with chunked prefill every step runs one
  // token of each of them and at most the budget in all; without it the prompt gets a step alone.
  for (bool chunked : {true, false}) {
    SCOPED_TRACE(chunked ? "chunked" : "whole prompts");
    SchedulerConfig config{/*max_num_seqs=*/8, /*max_num_batched_tokens=*/16, /*prefix_sharing=*/true, chunked};
    Scheduler scheduler(config, /*n_blocks=*/64, /*block_size=*/4);
    SamplingParams short_run, long_run;
    short_run.max_new_tokens = 40;
    long_run.max_new_tokens = 2;
    scheduler.add_request(0, std::vector<int32_t>(6, 1), short_run, 3, 1);
    auto first = scheduler.schedule();  // the group's prompt
    ASSERT_EQ(first.work.size(), 1u);
    EXPECT_TRUE(first.prefill);
    EXPECT_EQ(first.work[0].samplers.size(), 3u);
    scheduler.complete(first);
    for (int64_t id : first.work[0].samplers) scheduler.append(id, 2, 0.0f);
    scheduler.add_request(1, std::vector<int32_t>(100, 1), long_run, 1, 2);
    int steps_with_prompt = 0;
    bool stalled = false;
    while (scheduler.sequence(3).n_cached < 100) {
      auto batch = scheduler.schedule();
      int decodes = 0;
      for (const auto& w : batch.work) {
        if (w.seq == 3) {
          ++steps_with_prompt;
          EXPECT_EQ(w.samplers.empty(), w.start + w.n_tokens < 100) << "only the last chunk samples";
        } else {
          EXPECT_EQ(w.n_tokens, 1);
          ++decodes;
        }
      }
      if (decodes < 3) stalled = true;
      if (chunked) EXPECT_LE(batch.n_tokens(), 16);
      scheduler.complete(batch);
      for (const auto& w : batch.work) {
        for (int64_t id : w.samplers) scheduler.append(id, 2, 0.0f);
      }
      ASSERT_EQ(scheduler.check_blocks(), "");
    }
    EXPECT_EQ(stalled, !chunked);
    EXPECT_EQ(steps_with_prompt, chunked ? 8 : 1);  // 13 + 7 x 13 = 104 >= 100 (16 - 3 decodes a step)
  }
}

TEST(Sampler, EmpiricalFrequenciesMatchTheTruncatedDistribution) {
  auto logits = torch::tensor({2.0f, 1.5f, 1.0f, 0.2f, -0.5f, -1.0f, -3.0f});
  struct Case {
    SamplingParams params;
    std::vector<double> expected;  // hand-computed
  };
  auto softmax = [](std::vector<double> x, double t) {
    double z = 0;
    for (double& v : x) z += (v = std::exp(v / t));
    for (double& v : x) v /= z;
    return x;
  };
  const std::vector<double> base = {2.0, 1.5, 1.0, 0.2, -0.5, -1.0, -3.0};
  std::vector<Case> cases;
  SamplingParams p;
  p.temperature = 1.0;
  cases.push_back({p, softmax(base, 1.0)});
  p.temperature = 0.5;
  cases.push_back({p, softmax(base, 0.5)});
  p = SamplingParams{};
  p.top_k = 3;
  {
    auto e = softmax({2.0, 1.5, 1.0}, 1.0);
    e.resize(7, 0.0);
    cases.push_back({p, e});
  }
  p = SamplingParams{};
  p.top_p = 0.75;  // masses 0.43, 0.26, 0.16...: cumulative before token 2 is 0.705 < 0.75 → keep 3
  {
    auto full = softmax(base, 1.0);
    ASSERT_LT(full[0] + full[1], 0.75);
    ASSERT_GT(full[0] + full[1] + full[2], 0.75);
    auto e = softmax({2.0, 1.5, 1.0}, 1.0);
    e.resize(7, 0.0);
    cases.push_back({p, e});
  }
  p = SamplingParams{};
  p.min_p = 0.2;  // keep p >= 0.2 * p_max: exp(x - 2) >= 0.2 → x >= 2 + ln 0.2 = 0.39
  {
    auto e = softmax({2.0, 1.5, 1.0}, 1.0);
    e.resize(7, 0.0);
    cases.push_back({p, e});
  }
  const int draws = 40000;
  for (const auto& c : cases) {
    auto dist = sampling_distribution(logits, c.params);
    for (int k = 0; k < 7; ++k) EXPECT_NEAR(dist[k].item<double>(), c.expected[k], 1e-6) << "distribution " << k;
    std::vector<int> counts(7, 0);
    std::mt19937_64 rng(11);
    for (int d = 0; d < draws; ++d) {
      auto r = sample_tokens(logits.unsqueeze(0), {&c.params}, {&rng});
      ++counts[static_cast<size_t>(r.tokens[0])];
      // The reported log-prob is that of the untruncated tempered softmax.
      if (d == 0) {
        const double t = c.params.temperature;
        EXPECT_NEAR(r.logprobs[0], std::log(softmax(base, t)[static_cast<size_t>(r.tokens[0])]), 1e-5);
      }
    }
    for (int k = 0; k < 7; ++k) {
      const double expected = c.expected[k];
      const double sd = std::sqrt(draws * expected * (1 - expected));
      // 5 standard deviations: a false alarm about once in 3.5 million checks.
      EXPECT_NEAR(counts[k], draws * expected, 5 * sd + 1e-9) << "token " << k;
    }
  }
}

namespace {

// The sampler as it was (a full softmax, sort and log-softmax per row in LibTorch): the
// partial-selection sampler must draw the same tokens from the same uniform numbers.
std::pair<int64_t, double> sorting_reference(const torch::Tensor& row, const SamplingParams& p, double u) {
  if (p.temperature <= 0) {
    const int64_t token = row.argmax().item<int64_t>();
    return {token, torch::log_softmax(row, -1)[token].item<double>()};
  }
  auto probs = torch::softmax(row / p.temperature, -1);
  torch::Tensor ids;
  if (p.top_k > 0 || p.top_p < 1.0 || p.min_p > 0.0) {
    auto [sorted, order] = probs.sort(-1, /*descending=*/true);
    int64_t keep = sorted.size(0);
    if (p.top_k > 0) keep = std::min(keep, p.top_k);
    if (p.top_p < 1.0) {
      auto before = sorted.narrow(0, 0, keep).cumsum(0) - sorted.narrow(0, 0, keep);
      keep = std::max<int64_t>(1, before.lt(p.top_p).sum().item<int64_t>());
    }
    if (p.min_p > 0.0) {
      const double threshold = p.min_p * sorted[0].item<double>();
      keep = std::max<int64_t>(1, std::min(keep, sorted.narrow(0, 0, keep).ge(threshold).sum().item<int64_t>()));
    }
    probs = sorted.narrow(0, 0, keep);
    ids = order.narrow(0, 0, keep);
  }
  auto cdf = probs.to(torch::kFloat64).cumsum(0);
  int64_t k = torch::searchsorted(cdf, torch::tensor({u * cdf[-1].item<double>()}, torch::kFloat64), false, true)
                  .item<int64_t>();
  k = std::min<int64_t>(k, cdf.size(0) - 1);
  const int64_t token = ids.defined() ? ids[k].item<int64_t>() : k;
  return {token, torch::log_softmax(row / p.temperature, -1)[token].item<double>()};
}

}  // namespace

namespace {

// Every kind of truncation, alone and together, greedy, and a top_p prefix far longer than the
// first partial sort.
std::vector<SamplingParams> sampling_settings() {
  std::vector<SamplingParams> settings(7);
  settings[1].temperature = 0.7;
  settings[1].top_k = 50;
  settings[2].top_p = 0.9;
  settings[3].min_p = 0.05;
  settings[4].top_k = 20;
  settings[4].top_p = 0.8;
  settings[4].min_p = 0.02;
  settings[5].temperature = 0;
  settings[6].top_p = 0.999;
  return settings;
}

}  // namespace

TEST(Sampler, DrawsTheSameTokensAsTheSortingSampler) {
  torch::manual_seed(5);
  const int64_t vocab = 20011, rows = 96;
  const std::vector<SamplingParams> settings = sampling_settings();
  for (size_t s = 0; s < settings.size(); ++s) {
    // Peaked and flat rows: logits of scale 1 to 8 over a 20k vocabulary.
    auto logits = torch::randn({rows, vocab}) * torch::linspace(1, 8, rows).unsqueeze(1);
    std::vector<const SamplingParams*> params(rows, &settings[s]);
    std::vector<std::mt19937_64> engines;
    for (int64_t i = 0; i < rows; ++i) engines.emplace_back(1000 * s + i);
    std::vector<std::mt19937_64*> rngs;
    for (auto& e : engines) rngs.push_back(&e);
    const SampleResult got = sample_tokens(logits, params, rngs);
    for (int64_t i = 0; i < rows; ++i) {
      std::mt19937_64 rng(1000 * s + i);
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      const auto [token, logp] = sorting_reference(logits[i], settings[s], u);
      EXPECT_EQ(got.tokens[static_cast<size_t>(i)], token) << "setting " << s << " row " << i;
      EXPECT_NEAR(got.logprobs[static_cast<size_t>(i)], logp, 1e-4 + 1e-5 * std::abs(logp)) << "setting " << s << " row " << i;
    }
  }
}

// The batched sampler (what runs on a GPU), run here on the CPU, against the row sampler: rows of
// every setting in one batch, top log-probs included.
TEST(Sampler, BatchedSamplerDrawsWhatTheRowSamplerDraws) {
  torch::manual_seed(6);
  const int64_t vocab = 20011, rows = 280;
  std::vector<SamplingParams> settings = sampling_settings();
  settings.emplace_back();
  settings.back().temperature = 1.3;
  settings.back().logprobs = 5;
  auto logits = torch::randn({rows, vocab}) * torch::linspace(1, 8, rows).unsqueeze(1);
  std::vector<const SamplingParams*> params;
  std::vector<double> u;
  std::mt19937_64 rng(7);
  for (int64_t i = 0; i < rows; ++i) {
    params.push_back(&settings[static_cast<size_t>(i) % settings.size()]);
    u.push_back(std::uniform_real_distribution<double>(0.0, 1.0)(rng));
  }
  const SampleResult want = sample_tokens(logits, params, u);
  const SampleResult got = sample_tokens_batched(logits.to(torch::kBFloat16), params, u);
  const SampleResult got_fp32 = sample_tokens_batched(logits, params, u);
  const SampleResult want_bf16 = sample_tokens(logits.to(torch::kBFloat16), params, u);
  for (int64_t i = 0; i < rows; ++i) {
    const size_t k = static_cast<size_t>(i);
    EXPECT_EQ(got_fp32.tokens[k], want.tokens[k]) << "row " << i;
    EXPECT_NEAR(got_fp32.logprobs[k], want.logprobs[k], 1e-5 + 1e-6 * std::abs(want.logprobs[k])) << "row " << i;
    EXPECT_EQ(got.tokens[k], want_bf16.tokens[k]) << "bf16 row " << i;  // logits of another dtype
    ASSERT_EQ(got_fp32.top[k].size(), want.top[k].size()) << "row " << i;
    for (size_t t = 0; t < want.top[k].size(); ++t) {
      EXPECT_EQ(got_fp32.top[k][t].token, want.top[k][t].token) << "row " << i << " top " << t;
      EXPECT_NEAR(got_fp32.top[k][t].logprob, want.top[k][t].logprob, 1e-5) << "row " << i << " top " << t;
    }
  }
}

namespace {

// A model holding `source`'s merged weights stored in `dtype` and computed in fp32: what the
// engine's rollout copy should generate with.
std::shared_ptr<Transformer> rounded_copy(const Transformer& source, torch::ScalarType dtype) {
  ModelOptions options;
  options.frozen_dtype = dtype;
  auto copy = std::make_shared<Transformer>(source.config(), options);
  copy->load_weights(source.merged_weights(), "test");
  copy->eval();
  return copy;
}

}  // namespace

// Half-precision and 8-bit copies (int8 as kChar, fp8 e4m3 as kByte codes, with row scales). The
// oracle computes on the rounded weights in fp32, so narrow weights are widened here rather than
// multiplied on the CPU's dot-product instructions, which round x too (the kernels test covers those).
TEST(Engine, NarrowRolloutWeightsFollowTheModel) {
  rlcpp::testing::DotInstructions widened(false);
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    auto requests = mixed_requests(model->config().vocab_size, 0.0, 10, 3);
    for (auto dtype : {torch::kBFloat16, torch::kFloat16, torch::kChar, torch::kByte}) {
      SCOPED_TRACE(c10::toString(dtype));
      EngineConfig config = small_engine();
      config.weights_dtype = dtype;
      Engine engine(model, config);
      auto first = engine.generate(requests);
      expect_same(first, generate_eager(*rounded_copy(*model, dtype), requests, nullptr), "rounded weights");
      EXPECT_EQ(engine.generating_model().model->embed_tokens->weight.scalar_type(), dtype);  // stored as asked
      // The copy is refreshed after an in-place update of the model (as an optimizer step does)...
      {
        torch::NoGradGuard no_grad;
        for (auto& p : model->parameters()) p.mul_(1.5);
      }
      auto second = engine.generate(requests);
      expect_same(second, generate_eager(*rounded_copy(*model, dtype), requests, nullptr), "after an update");
      // ...and the model itself is untouched by it: still fp32.
      EXPECT_EQ(model->parameters().front().scalar_type(), torch::kFloat32);
      {
        torch::NoGradGuard no_grad;
        for (auto& p : model->parameters()) p.div_(1.5);
      }
    }
  }
}

TEST(Engine, RolloutCopyMergesLoraAdapters) {
  rlcpp::testing::DotInstructions widened(false);  // the oracle's arithmetic (above)
  const auto dir = rlcpp::testing::fixture_dirs().front();
  auto model = Transformer::from_pretrained(dir);
  LoraConfig lora;
  lora.rank = 4;
  model->add_adapters(lora, 7);
  {
    torch::NoGradGuard no_grad;  // B = 0 at initialisation: give the adapters an effect
    for (const auto& [name, t] : model->trained_weights()) {
      if (name.find("lora_B") != std::string::npos) t.normal_(0, 0.05);
    }
  }
  auto requests = mixed_requests(model->config().vocab_size, 0.0, 10, 4);
  EngineConfig config = small_engine();
  config.weights_dtype = torch::kBFloat16;
  Engine engine(model, config);
  expect_same(engine.generate(requests), generate_eager(*rounded_copy(*model, torch::kBFloat16), requests, nullptr),
              "merged adapters");
  {
    torch::NoGradGuard no_grad;  // an adapter-only update (what a LoRA optimizer step writes)
    for (const auto& [name, t] : model->trained_weights()) {
      if (name.find("lora_B") != std::string::npos) t.mul_(-1);
    }
  }
  expect_same(engine.generate(requests), generate_eager(*rounded_copy(*model, torch::kBFloat16), requests, nullptr),
              "after an adapter update");
  // The base model alone (rlcpp serve's requests for it) is the engine's choice, not state on the
  // model: the copy is refreshed without the adapters, and with them again after.
  auto base = std::make_shared<Transformer>(model->config(), ModelOptions{});
  base->load_weights(model->named_weights(), "test");
  base->eval();
  engine.set_adapters_enabled(false);
  expect_same(engine.generate(requests), generate_eager(*rounded_copy(*base, torch::kBFloat16), requests, nullptr),
              "adapters off");
  engine.set_adapters_enabled(true);
  expect_same(engine.generate(requests), generate_eager(*rounded_copy(*model, torch::kBFloat16), requests, nullptr),
              "adapters on again");
  // Without a copy the engine's passes over the model itself leave the adapters out.
  for (auto& p : base->parameters()) p.set_requires_grad(false);
  Engine direct(model, small_engine());
  direct.set_adapters_enabled(false);
  expect_same(direct.generate(requests), Engine(base, small_engine()).generate(requests), "adapters off, no copy");
}

TEST(Engine, HalfPrecisionKvCacheStaysCloseToFp32) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    auto requests = mixed_requests(model->config().vocab_size, 0.0, 8, 5);
    auto exact = Engine(model, small_engine()).generate(requests);
    for (auto dtype : {torch::kBFloat16, torch::kFloat16}) {
      EngineConfig config = small_engine();
      config.kv_dtype = dtype;
      auto half = Engine(model, config).generate(requests);
      ASSERT_EQ(half.size(), exact.size());
      // Greedy paths may part after a near tie; compare each log-prob up to the first difference.
      double worst = 0;
      for (size_t k = 0; k < exact.size(); ++k) {
        for (size_t t = 0; t < exact[k].token_ids.size() && t < half[k].token_ids.size(); ++t) {
          worst = std::max(worst, static_cast<double>(std::abs(exact[k].logprobs[t] - half[k].logprobs[t])));
          if (exact[k].token_ids[t] != half[k].token_ids[t]) break;
        }
      }
      EXPECT_LT(worst, dtype == torch::kBFloat16 ? 0.05 : 0.01);
      EXPECT_GT(worst, 0.0);  // the cache really held rounded keys and values
    }
  }
}

// --stream-prompts: the requests after the first n are generated only while those run. The first
// are generated as alone; each of the others is the start of what it gives alone (all of it where
// it ended in time), the rest ending with FinishReason::kAbort; n = all is generate().
TEST(Engine, StreamedRequestsStopWithTheFirst) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  auto requests = mixed_requests(model->config().vocab_size, 1.0, 20, 3);
  ASSERT_GE(requests.size(), 3u);
  requests[0].params.max_new_tokens = 6;  // the first end early: the others are cut
  EngineConfig config = small_engine();
  config.scheduler.max_num_seqs = 4;  // the streamed ones wait for free slots
  Engine engine(model, config);
  const auto whole = engine.generate(requests);
  expect_same(engine.generate_until(requests, EarlyStop::first(requests.size(), requests.size())), whole, "every request first");
  const auto streamed = engine.generate_until(requests, EarlyStop::first(1, requests.size()));
  ASSERT_EQ(streamed.size(), whole.size());
  int64_t cut = 0;
  for (size_t k = 0; k < whole.size(); ++k) {
    const GeneratedSample& got = streamed[k];
    const GeneratedSample& alone = whole[k];
    ASSERT_EQ(got.request, alone.request);
    ASSERT_EQ(got.sample, alone.sample);
    if (got.request == 0) {
      EXPECT_EQ(got.token_ids, alone.token_ids);
      EXPECT_EQ(got.finish_reason, alone.finish_reason);
      continue;
    }
    ASSERT_LE(got.token_ids.size(), alone.token_ids.size());
    EXPECT_TRUE(std::equal(got.token_ids.begin(), got.token_ids.end(), alone.token_ids.begin()));
    if (got.finish_reason == FinishReason::kAbort) {
      ++cut;
    } else {
      EXPECT_EQ(got.token_ids, alone.token_ids);
    }
  }
  EXPECT_GT(cut, 0);
  EXPECT_FALSE(engine.cut());  // a streamed request stopping is not a checkpoint's cut
}

// --group-order completion: a call ends at the step in which enough groups have every request
// finished (a group of two requests waits for both). Here group 1 (one request of 12 tokens) ends
// before group 0 (requests of 4 and 24): the call ends there, group 0's long request cut short.
TEST(Engine, EarlyStopWaitsForWholeGroups) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  auto requests = mixed_requests(model->config().vocab_size, 1.0, 24, 1);
  ASSERT_GE(requests.size(), 3u);
  requests.resize(3);
  const int64_t limits[] = {4, 24, 12};
  for (size_t r = 0; r < 3; ++r) {
    requests[r].params.max_new_tokens = limits[r];
    requests[r].params.stop_token_ids.clear();  // every request runs to its limit
    requests[r].n = 1;
  }
  Engine engine(model, small_engine());
  const auto whole = engine.generate(requests);
  EarlyStop stop;
  stop.group_of = {0, 0, 1};
  stop.groups = 1;
  const auto got = engine.generate_until(requests, stop);
  ASSERT_EQ(got.size(), whole.size());
  for (const size_t r : {0u, 2u}) {  // finished: as alone
    EXPECT_EQ(got[r].token_ids, whole[r].token_ids) << "request " << r;
    EXPECT_NE(got[r].finish_reason, FinishReason::kAbort) << "request " << r;
  }
  EXPECT_EQ(got[1].finish_reason, FinishReason::kAbort);
  EXPECT_GT(got[1].token_ids.size(), 4u);  // it went on after request 0, and ended with request 2
  EXPECT_LT(got[1].token_ids.size(), 24u);
  EXPECT_TRUE(std::equal(got[1].token_ids.begin(), got[1].token_ids.end(), whole[1].token_ids.begin()));
  stop.groups = 2;  // both groups: nothing ends early
  expect_same(engine.generate_until(requests, stop), whole, "every group");
}
