// bench/generate: engine throughput on random-weight models of a given shape (or a model directory).
//   1. decode tokens/s with 1, 8, 32 and 64 concurrent sequences at fixed lengths (no stop token);
//   2. groups of G samples of long prompts with prefix sharing on and off;
// with the KV memory used. Shapes: a tiny Qwen2 (the fixture's) and Qwen2.5-0.5B.
//   --llama-workload: instead, llama.cpp's anchor workload (bench/anchors/llamacpp): pp<N> one
// prefill of N tokens, tg<N> N decode steps of one sequence from an empty cache, par<S>x<N> S
// sequences decoding together for N steps; medians of --reps runs, as JSON with --json (see
// bench/llamacpp.sh, which runs both programs and prints the ratios).
//   --mismatch N: instead, how far the engine's log-probs on --rollout-dtype weights are from the
// fp32 model's (what a trainer computes): N sampled sequences, the |dlogp| of every token.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "bench_util.h"
#include "engine/engine.h"
#include "util/thread_pool.h"
#include "util/threads.h"

using namespace rlcpp;
using namespace rlcpp::bench;

namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

ModelConfig tiny_config() {
  nlohmann::json json = {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 512},
                         {"hidden_size", 64}, {"intermediate_size", 160}, {"num_hidden_layers", 2},
                         {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6},
                         {"rope_theta", 10000.0}, {"tie_word_embeddings", true}};
  return ModelConfig::from_json(json, "tiny");
}

std::vector<GenerationRequest> requests_of(int64_t n_prompts, int64_t group, int64_t prompt_len, int64_t new_tokens,
                                           int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<GenerationRequest> out;
  for (int64_t r = 0; r < n_prompts; ++r) {
    GenerationRequest request;
    for (int64_t k = 0; k < prompt_len; ++k) request.prompt_ids.push_back(static_cast<int32_t>(rng() % vocab));
    request.params.temperature = 1.0;
    request.params.max_new_tokens = new_tokens;  // no stop tokens: every sequence runs to the length
    request.n = group;
    request.seed = rng();
    out.push_back(request);
  }
  return out;
}

struct Run {
  double seconds;
  double decode_tokens_per_s;  // generated tokens / wall time
  EngineStats stats;
};

Run run(Engine& engine, const std::vector<GenerationRequest>& requests) {
  auto start = std::chrono::steady_clock::now();
  engine.generate(requests);
  Run r{seconds_since(start), 0, engine.last_stats()};
  r.decode_tokens_per_s = r.stats.n_generated_tokens / r.seconds;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  rlcpp::prepare_process(argv);  // OpenMP's wait policy (util/threads.h)
  std::string shape = "tiny";
  int64_t layers = 24, prompt_len = 32, new_tokens = 32, group_prompt = 256, group_new = 16, groups = 4, group_size = 8;
  std::vector<int64_t> concurrency = {1, 8, 32, 64};
  int threads = 0;
  CLI::App app{"bench/generate: engine tokens/s, batching and prefix sharing"};
  app.add_option("--shape", shape, "tiny | 0.5b")->capture_default_str();
  app.add_option("--layers", layers, "decoder layers of the 0.5b shape")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens in the concurrency runs")->capture_default_str();
  app.add_option("--new-tokens", new_tokens, "generated tokens per sequence")->capture_default_str();
  app.add_option("--concurrency", concurrency, "concurrent sequences to measure");
  app.add_option("--group-prompt", group_prompt, "prompt tokens in the group workload")->capture_default_str();
  app.add_option("--group-new", group_new, "generated tokens per sample in the group workload")->capture_default_str();
  app.add_option("--groups", groups, "prompts in the group workload")->capture_default_str();
  app.add_option("-g,--group-size", group_size, "samples per prompt")->capture_default_str();
  app.add_option("--threads", threads, "intra-op threads (0: default)")->capture_default_str();
  int64_t lora_rank = 0;
  std::string frozen_dtype;
  app.add_option("--lora-rank", lora_rank, "LoRA adapters of this rank on every linear layer, unmerged (0: none)")
      ->capture_default_str();
  app.add_option("--frozen-dtype", frozen_dtype, "weights stored in this dtype, computed in fp32 (bfloat16, float16)");
  std::string model_dir, rollout_dtype, kv_dtype, json_path;
  bool llama_workload = false;
  int64_t pp = 256, tg = 64, par_steps = 32, reps = 3;
  std::vector<int64_t> par = {8, 32, 64};
  app.add_option("--model", model_dir, "a Hugging Face model directory instead of random weights of --shape");
  app.add_option("--rollout-dtype", rollout_dtype, "the engine's weights: " + rollout_dtypes().names(", ") + " (rlcpp train's flag)");
  app.add_option("--kv-cache-dtype", kv_dtype, "the engine's KV cache dtype");
  app.add_flag("--llama-workload", llama_workload, "llama.cpp's anchor workload: pp, tg and par (see the top of this file)");
  app.add_option("--pp", pp, "prompt tokens of the prefill measurement")->capture_default_str();
  app.add_option("--tg", tg, "decode steps of the one-sequence measurement")->capture_default_str();
  app.add_option("--par", par, "concurrent sequences of the parallel measurements");
  app.add_option("--par-steps", par_steps, "decode steps of the parallel measurements")->capture_default_str();
  app.add_option("--reps", reps, "runs of each measurement (the median is reported)")->capture_default_str();
  app.add_option("--json", json_path, "also write the llama-workload figures here");
  int64_t mismatch = 0;
  app.add_option("--mismatch", mismatch,
                 "instead: N sampled sequences (temperature 1) of --new-tokens on the rollout weights, each token's "
                 "log-prob scored again by the fp32 model as a trainer does; prints the |dlogp| distribution");
  EngineConfig engine_config;
  bool no_chunked = false;
  app.add_option("--max-num-seqs", engine_config.scheduler.max_num_seqs, "sequences running at once")->capture_default_str();
  app.add_option("--max-num-batched-tokens", engine_config.scheduler.max_num_batched_tokens, "tokens per engine step")
      ->capture_default_str();
  app.add_flag("--no-chunked-prefill", no_chunked, "prefill whole prompts in steps of their own (the group workload runs both)");
  CLI11_PARSE(app, argc, argv);
  configure_threads(threads);

  ModelOptions options;
  if (!frozen_dtype.empty()) options.frozen_dtype = dtypes().parse(frozen_dtype, "--frozen-dtype");
  std::shared_ptr<Transformer> model;
  if (!model_dir.empty()) {
    model = Transformer::from_pretrained(model_dir, options);
  } else {
    model = std::make_shared<Transformer>(shape == "tiny" ? tiny_config() : qwen25_05b_config(layers), options);
    model->init_weights(0.02, 0);
  }
  const ModelConfig& config = model->config();
  if (lora_rank > 0) {
    LoraConfig lora;
    lora.rank = lora_rank;
    model->add_adapters(lora, 0);
  }
  model->eval();
  engine_config.scheduler.chunked_prefill = !no_chunked;
  engine_config.kv_cache_mb = 2048;
  engine_config.weights_dtype = rollout_dtype_or_default(rollout_dtype, "--rollout-dtype");
  engine_config.kv_dtype = dtype_or_default(kv_dtype, "--kv-cache-dtype");
  Engine engine(model, engine_config);
  if (mismatch > 0) {
    const auto samples = engine.generate(requests_of(mismatch, 1, prompt_len, new_tokens, config.vocab_size, 7));
    const auto requests = requests_of(mismatch, 1, prompt_len, new_tokens, config.vocab_size, 7);
    std::vector<double> diffs;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < samples.size(); ++i) {
      std::vector<int64_t> ids(requests[i].prompt_ids.begin(), requests[i].prompt_ids.end());
      ids.insert(ids.end(), samples[i].token_ids.begin(), samples[i].token_ids.end());
      const auto n = static_cast<int64_t>(ids.size());
      auto input = torch::tensor(ids).narrow(0, 0, n - 1).unsqueeze(0);
      auto targets = torch::tensor(ids).narrow(0, 1, n - 1).clone();
      targets.narrow(0, 0, prompt_len - 1).fill_(-100);
      const auto logp = model->token_logprobs(input, targets.unsqueeze(0), 1.0).squeeze(0);
      for (size_t t = 0; t < samples[i].logprobs.size(); ++t) {
        const double trainer = logp[prompt_len - 1 + static_cast<int64_t>(t)].item<double>();
        diffs.push_back(std::abs(trainer - samples[i].logprobs[t]));
      }
    }
    std::sort(diffs.begin(), diffs.end());
    double sum = 0;
    for (double d : diffs) sum += d;
    auto at = [&](double q) { return diffs[std::min(diffs.size() - 1, static_cast<size_t>(q * diffs.size()))]; };
    std::printf("rollout %-8s |dlogp| vs the fp32 model over %zu tokens: mean %.2e  p50 %.2e  p90 %.2e  p99 %.2e  max %.2e\n",
                rollout_dtype.empty() ? "float32" : rollout_dtype.c_str(), diffs.size(), sum / diffs.size(), at(0.5),
                at(0.9), at(0.99), diffs.back());
    return 0;
  }
  if (llama_workload) {
    run(engine, requests_of(1, 1, 16, 2, config.vocab_size, 0));  // warm-up, and the rollout copy made
    nlohmann::json results = {{"rollout_dtype", rollout_dtype.empty() ? "float32" : rollout_dtype},
                              {"kv_dtype", kv_dtype.empty() ? "float32" : kv_dtype},
                              {"threads", ThreadPool::global().size()}, {"tests", nlohmann::json::array()}};
    auto report = [&](const std::string& name, const std::vector<double>& tps) {
      std::printf("rlcpp %-10s t/s  median %8.2f  runs", name.c_str(), median(tps));
      for (double x : tps) std::printf(" %.2f", x);
      std::printf("\n");
      std::fflush(stdout);
      results["tests"].push_back({{"name", name}, {"median", median(tps)}, {"runs", tps}});
    };
    std::vector<double> tps;
    for (int64_t r = 0; r < reps; ++r) {  // prefill: one sequence, one new token
      run(engine, requests_of(1, 1, pp, 1, config.vocab_size, 10 + r));
      tps.push_back(pp / engine.last_stats().prefill_seconds);
    }
    report("pp" + std::to_string(pp), tps);
    tps.clear();
    for (int64_t r = 0; r < reps; ++r) {  // decode from an (almost) empty cache: a 1-token prompt
      const Run x = run(engine, requests_of(1, 1, 1, tg + 1, config.vocab_size, 20 + r));
      tps.push_back(x.stats.n_decode_tokens / x.stats.decode_seconds);
    }
    report("tg" + std::to_string(tg), tps);
    for (int64_t s : par) {
      tps.clear();
      for (int64_t r = 0; r < reps; ++r) {
        const Run x = run(engine, requests_of(s, 1, 1, par_steps + 1, config.vocab_size, 30 + r));
        tps.push_back(x.stats.n_decode_tokens / x.stats.decode_seconds);
      }
      report("par" + std::to_string(s) + "x" + std::to_string(par_steps), tps);
    }
    if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
    return 0;
  }
  if (!model_dir.empty()) shape = model_dir;
  std::printf("shape %s: %ld layers, %.1f M parameters, fp32%s%s%s%s, LoRA rank %ld, %d intra-op threads; KV cache %.0f MiB allocated\n",
              shape.c_str(), static_cast<long>(config.num_hidden_layers), config.parameter_count() / 1e6,
              frozen_dtype.empty() ? "" : " computed, stored in ", frozen_dtype.c_str(),
              rollout_dtype.empty() ? "" : ", rollout weights ", rollout_dtype.c_str(), static_cast<long>(lora_rank),
              torch::get_num_threads(), engine_config.kv_cache_mb * 1.0);
  run(engine, requests_of(1, 1, 8, 4, config.vocab_size, 0));  // warm-up
  double single_decode = 0;
  std::printf("decode at fixed lengths (prompt %ld, %ld new tokens per sequence):\n", static_cast<long>(prompt_len),
              static_cast<long>(new_tokens));
  for (int64_t c : concurrency) {
    const Run r = run(engine, requests_of(c, 1, prompt_len, new_tokens, config.vocab_size, 1));
    const double kv_mb = r.stats.scheduler.peak_blocks_used * engine.config().block_size * 2.0 *
                         config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4 / 1048576.0;
    const double decode_only = r.stats.n_decode_tokens / std::max(r.stats.decode_seconds, 1e-9);
    if (c == concurrency.front()) single_decode = decode_only;
    const double steps = static_cast<double>(std::max<int64_t>(r.stats.n_decode_steps, 1));
    std::printf("  %3ld sequences  %8.1f tokens/s overall (%.2f s)  decode steps alone %8.1f tokens/s  x%.1f vs %ld"
                "  KV used %.1f MiB  per decode step: %.0f buffers, %.2f fresh, %.2f page faults\n",
                static_cast<long>(c), r.decode_tokens_per_s, r.seconds, decode_only, decode_only / single_decode,
                static_cast<long>(concurrency.front()), kv_mb, r.stats.decode_buffer_allocations / steps,
                r.stats.decode_fresh_allocations / steps, r.stats.decode_page_faults / steps);
  }
  std::printf("groups: %ld prompts x G=%ld samples, prompt %ld tokens, %ld new tokens per sample:\n",
              static_cast<long>(groups), static_cast<long>(group_size), static_cast<long>(group_prompt),
              static_cast<long>(group_new));
  // Prefix sharing on and off, and chunked prefill on and off (the longest wait of a running
  // sequence between two tokens shows what a prompt's prefill step costs the running ones).
  double first_s = 0;
  struct Variant {
    bool sharing, chunked;
  };
  for (Variant v : {Variant{true, engine_config.scheduler.chunked_prefill}, Variant{true, !engine_config.scheduler.chunked_prefill},
                    Variant{false, engine_config.scheduler.chunked_prefill}}) {
    EngineConfig c = engine_config;
    c.scheduler.prefix_sharing = v.sharing;
    c.scheduler.chunked_prefill = v.chunked;
    Engine e(model, c);
    const Run r = run(e, requests_of(groups, group_size, group_prompt, group_new, config.vocab_size, 2));
    if (first_s == 0) first_s = r.seconds;
    const double kv_mb = r.stats.scheduler.peak_blocks_used * c.block_size * 2.0 * config.num_hidden_layers *
                         config.num_key_value_heads * config.head_dim * 4 / 1048576.0;
    std::printf("  prefix sharing %-3s chunked prefill %-3s  %.2f s (x%.2f)  %8.1f generated tokens/s  longest "
                "inter-token wait %.2f s  peak KV %.1f MiB  copy-on-write %ld\n",
                v.sharing ? "on" : "off", v.chunked ? "on" : "off", r.seconds, r.seconds / first_s,
                r.decode_tokens_per_s, r.stats.max_inter_token_seconds, kv_mb,
                static_cast<long>(r.stats.scheduler.n_copies));
  }
  return 0;
}
