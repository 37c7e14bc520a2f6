// bench/train_layout: one policy step (Trainer::step: forward, fused loss head, backward, AdamW) on
// samples with a long tail of response lengths (most answers short, some at -mnt), in right-padded
// micro-batches of -tmbs samples and padding-free ones (one row of the samples back to back), on a
// Qwen2.5-0.5B-shaped model with random weights. Prints each layout's seconds per step, the share
// of padding in the padded batches and the speed-up, as one JSON line per layout and a summary.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "bench_util.h"
#include "train/trainer.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

namespace {

struct Args {
  int64_t layers = 24;
  int64_t samples = 16;
  int64_t micro = 8;           // -tmbs
  int64_t max_tokens = 0;      // --max-tokens-per-micro-batch for the padding-free layout (0: -tmbs samples)
  int64_t prompt = 96;         // prompt tokens
  int64_t mnt = 512;           // the longest response
  int64_t short_max = 96;      // short answers: uniform in [8, short_max]
  double long_share = 0.125;   // the share of responses at mnt
  int64_t repeats = 2;         // steps per layout (the first one warms up and is not counted when repeats > 1)
  uint64_t seed = 1;
  int threads = 0;
};

std::vector<Sample> long_tail_samples(const Args& a, int64_t vocab) {
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1), short_len(8, a.short_max);
  std::bernoulli_distribution at_limit(a.long_share);
  std::vector<Sample> out;
  for (int64_t k = 0; k < a.samples; ++k) {
    std::vector<int32_t> prompt(static_cast<size_t>(a.prompt)), response;
    for (auto& t : prompt) t = static_cast<int32_t>(token(rng));
    const int64_t n = at_limit(rng) ? a.mnt : short_len(rng);
    for (int64_t t = 0; t < n; ++t) response.push_back(static_cast<int32_t>(token(rng)));
    out.push_back(model_sample(prompt, response, k % 2 == 0 ? 1.0 : -1.0));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("One policy step on long-tailed responses: right-padded against padding-free micro-batches");
  app.add_option("--layers", a.layers, "decoder layers of the 0.5B shape");
  app.add_option("--samples", a.samples, "samples in the step");
  app.add_option("--tmbs", a.micro, "samples per micro-batch");
  app.add_option("--max-tokens", a.max_tokens, "padding-free: tokens per micro-batch in place of --tmbs (0: --tmbs)");
  app.add_option("--prompt", a.prompt, "prompt tokens");
  app.add_option("--mnt", a.mnt, "the longest response (the tail)");
  app.add_option("--short-max", a.short_max, "short responses: uniform in [8, this]");
  app.add_option("--long-share", a.long_share, "share of responses at --mnt");
  app.add_option("--repeats", a.repeats, "steps per layout (the first is a warm-up when more than one)");
  app.add_option("--seed", a.seed, "draws the lengths and tokens");
  app.add_option("--threads", a.threads, "intra-op threads (0: all cores)");
  CLI11_PARSE(app, argc, argv);
  configure_threads(a.threads);

  const ModelConfig config = qwen25_05b_config(a.layers);
  const auto samples = long_tail_samples(a, config.vocab_size);
  // The padded batches' share of padding: 1 - real tokens / (rows x longest) over the micro-batches.
  double real = 0, padded = 0;
  for (const auto& [begin, end] : micro_batches(samples, a.micro, 0, false)) {
    const PackedBatch b = pack_samples(samples, begin, end);
    real += b.attention_mask.sum().item<double>();
    padded += static_cast<double>(b.input_tokens());
  }
  double response_tokens = 0;
  for (const auto& s : samples) response_tokens += static_cast<double>(s.response_ids.size());

  std::vector<double> seconds;
  for (bool padding_free : {false, true}) {
    ModelOptions options;
    auto model = std::make_shared<Transformer>(config, options);
    model->init_weights(0.02, 7);
    TrainerConfig tc;
    tc.train_microbatch_size = a.micro;
    tc.padding_free = padding_free;
    tc.max_tokens_per_micro_batch = padding_free ? a.max_tokens : 0;
    tc.optimizer.lr = 1e-6;
    Trainer trainer(model, nullptr, tc);
    std::vector<std::vector<float>> old;
    for (const auto& s : samples) old.emplace_back(s.response_ids.size(), -2.0f);
    double total = 0;
    int64_t counted = 0;
    for (int64_t r = 0; r < a.repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      trainer.step({samples, old, {}, {}});
      const double s = seconds_since(start);
      if (a.repeats == 1 || r > 0) {
        total += s;
        ++counted;
      }
    }
    seconds.push_back(total / static_cast<double>(counted));
    std::printf("{\"layout\": \"%s\", \"seconds_per_step\": %.3f, \"input_tokens\": %.0f, \"response_tokens_per_s\": %.1f}\n",
                padding_free ? "padding-free" : "padded", seconds.back(), padding_free ? real : padded,
                response_tokens / seconds.back());
    std::fflush(stdout);
  }
  std::printf("{\"samples\": %lld, \"tmbs\": %lld, \"layers\": %lld, \"padding_share\": %.3f, \"speedup\": %.2f}\n",
              static_cast<long long>(a.samples), static_cast<long long>(a.micro), static_cast<long long>(a.layers),
              1.0 - real / padded, seconds[0] / seconds[1]);
  return 0;
}
