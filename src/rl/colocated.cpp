#include "rl/colocated.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>

#include "algo/advantages.h"
#include "algo/dapo.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void validate(const RunConfig& c) {
  if (c.num_generations < 1) throw_user_error("-g/--num-generations {}: must be at least 1", c.num_generations);
  if (c.train_batch_size < 1) throw_user_error("-tbs/--train-batch-size {}: must be at least 1", c.train_batch_size);
  if (c.train_minibatch_size < 1 || c.train_minibatch_size > c.train_batch_size) {
    throw_user_error("-tMbs/--train-minibatch-size {} must be between 1 and -tbs {} (train_batch_size >= "
                     "train_minibatch_size >= ...)", c.train_minibatch_size, c.train_batch_size);
  }
  if (c.train_batch_size % c.train_minibatch_size != 0) {
    throw_user_error("-tbs {} must be a multiple of -tMbs {}", c.train_batch_size, c.train_minibatch_size);
  }
  if (c.train_microbatch_size < 1) throw_user_error("-tmbs/--train-microbatch-size {}: must be at least 1", c.train_microbatch_size);
}

// Writes save_dir/project/step-N: the policy as a Hugging Face directory plus trainer_state/
// (state.json, optimizer.pt with the AdamW moments), into a temp dir renamed at the end, then `latest`.
void save_checkpoint_dir(const Transformer& policy, Trainer& trainer, const fs::path& model_dir, const fs::path& run_dir,
                         int64_t step, const nlohmann::json& state) {
  const fs::path final_dir = run_dir / fmt::format("step-{}", step);
  const fs::path tmp = run_dir / fmt::format(".step-{}.tmp", step);
  fs::remove_all(tmp);
  policy.save_pretrained(tmp);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"}) {
    if (fs::exists(model_dir / name)) fs::copy_file(model_dir / name, tmp / name, fs::copy_options::overwrite_existing);
  }
  fs::create_directories(tmp / "trainer_state");
  write_file_atomic(tmp / "trainer_state" / "state.json", state.dump(2) + "\n");
  torch::save(trainer.optimizer(), (tmp / "trainer_state" / "optimizer.pt").string());
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  write_file_atomic(run_dir / "latest", fmt::format("step-{}\n", step));
}

}  // namespace

fs::path run_colocated(const RunConfig& c) {
  validate(c);
  const auto run_start = std::chrono::steady_clock::now();
  const ModelOptions options = model_options_from_flags(c.dtype, c.device);
  auto tokenizer = Tokenizer::from_dir(c.model);
  auto policy = Transformer::from_pretrained(c.model, options);
  policy->eval();
  std::shared_ptr<Transformer> reference;
  if (c.algo.loss.kl_coef != 0) {
    reference = Transformer::from_pretrained(c.model, options);
    reference->eval();
  }
  const PromptDataset dataset = load_prompt_dataset(c.dataset);
  const int64_t n_records = static_cast<int64_t>(dataset.records.size());
  DatasetCursor cursor(n_records, c.seed, /*shuffle=*/true);
  PromptOptions prompt_options;
  prompt_options.system_prompt = c.system_prompt_set ? c.system_prompt : default_system_prompt(to_string(c.reward_type));
  prompt_options.max_prompt_tokens = c.max_prompt_tokens;
  PromptBuilder prompts(*tokenizer, prompt_options);
  SamplingParams sampling = c.sampling;
  sampling.stop_token_ids = default_stop_tokens(policy->config(), *tokenizer);
  EngineConfig engine_config;
  engine_config.kv_cache_mb = c.kv_cache_mb;
  Engine engine(policy, engine_config, tokenizer);
  TrainerConfig trainer_config;
  trainer_config.loss = c.algo.loss;
  if (trainer_config.loss.aggregation == LossAggregation::kSeqMeanTokenSumNorm) {
    trainer_config.loss.norm_constant = static_cast<double>(sampling.max_new_tokens);
  }
  trainer_config.optimizer = c.optimizer;
  trainer_config.train_microbatch_size = c.train_microbatch_size;
  trainer_config.temperature = sampling.temperature > 0 ? sampling.temperature : 1.0;
  trainer_config.filter_truncated = c.algo.filter_truncated;
  Trainer trainer(policy, reference, trainer_config);
  RewardFunction reward;
  reward.add_builtin("accuracy", c.reward_type, 1.0, c.reward_scale);

  const fs::path run_dir = fs::path(c.save_dir) / c.project;
  fs::create_directories(run_dir);
  std::ofstream metrics_file(run_dir / "metrics.jsonl", std::ios::app);
  const int64_t steps_per_episode = std::max<int64_t>(1, n_records / c.train_batch_size);
  const int64_t total_steps = c.max_steps > 0 ? c.max_steps : steps_per_episode * c.num_episodes;
  const int64_t G = c.num_generations;
  spdlog::info("training {} on {} ({} prompts): {} steps of {} prompts x {} samples, {}", c.model, c.dataset, n_records,
               total_steps, c.train_batch_size, G, c.algo.name);

  for (int64_t step = 1; step <= total_steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    double t_generate = 0, t_reward = 0, t_logprobs = 0, t_train = 0;
    // Rollouts: groups kept by the filter until train_batch_size of them (dynamic batching), or one round.
    std::vector<TrainSample> kept;
    std::vector<double> rewards_all;
    int64_t n_correct = 0, n_generated = 0, n_truncated = 0, n_kept_groups = 0, n_groups = 0, max_len = 0;
    double sum_len = 0;
    const int64_t rounds = c.algo.dynamic_batching ? 1 + c.max_dynamic_rounds : 1;
    for (int64_t round = 0; round < rounds && n_kept_groups < c.train_batch_size; ++round) {
      std::vector<GenerationRequest> requests;
      std::vector<const PromptRecord*> records;
      while (static_cast<int64_t>(requests.size()) < c.train_batch_size - n_kept_groups) {
        const PromptRecord& record = dataset.records[static_cast<size_t>(cursor.next())];
        auto built = prompts.build(record);
        if (!built) continue;  // dropped by the prompt-length policy
        GenerationRequest request;
        request.prompt_ids = built->ids;
        request.params = sampling;
        request.n = G;
        request.seed = c.seed * 1000003ULL + static_cast<uint64_t>(cursor.consumed());
        requests.push_back(std::move(request));
        records.push_back(&record);
      }
      auto t0 = std::chrono::steady_clock::now();
      const auto samples = engine.generate(requests);
      t_generate += seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      std::vector<RewardInput> inputs;
      for (const auto& s : samples) {
        inputs.push_back({"", s.text, records[static_cast<size_t>(s.request)]->gt_answer, nlohmann::json::object(),
                          s.finish_reason == FinishReason::kLength});
      }
      const auto graded = reward.score(inputs);
      t_reward += seconds_since(t0);
      std::vector<double> rewards(samples.size());
      std::vector<uint8_t> correct(samples.size());
      for (size_t k = 0; k < samples.size(); ++k) {
        double r = graded[k].reward;
        const int64_t len = static_cast<int64_t>(samples[k].token_ids.size());
        if (c.algo.overlong_shaping) {
          const int64_t cache = c.algo.overlong_cache > 0 ? c.algo.overlong_cache : default_overlong_cache(sampling.max_new_tokens);
          r += overlong_penalty(len, sampling.max_new_tokens, cache, c.reward_scale.correct);
        }
        rewards[k] = r;
        correct[k] = graded[k].correct;
        n_correct += graded[k].correct;
        n_truncated += inputs[k].truncated;
        sum_len += static_cast<double>(len);
        max_len = std::max(max_len, len);
        rewards_all.push_back(r);
      }
      n_generated += static_cast<int64_t>(samples.size());
      auto advantages = compute_advantages(torch::tensor(rewards, torch::kFloat64), G, c.algo.advantage);
      torch::Tensor keep;
      if (c.algo.filter_range) {
        auto correct_t = torch::tensor(std::vector<int64_t>(correct.begin(), correct.end())).to(torch::kBool);
        keep = filter_groups_by_accuracy(correct_t, G, c.algo.filter_range->first, c.algo.filter_range->second);
      }
      for (int64_t group = 0; group < static_cast<int64_t>(requests.size()); ++group) {
        ++n_groups;
        if (keep.defined() && !keep[group].item<bool>()) continue;
        if (n_kept_groups >= c.train_batch_size) break;
        ++n_kept_groups;
        for (int64_t s = 0; s < G; ++s) {
          const auto& sample = samples[static_cast<size_t>(group * G + s)];
          TrainSample t{requests[static_cast<size_t>(group)].prompt_ids, sample.token_ids,
                        advantages[group * G + s].item<double>(), sample.finish_reason == FinishReason::kLength,
                        sample.logprobs};
          if (!t.response_ids.empty()) kept.push_back(std::move(t));
        }
      }
    }
    std::map<std::string, double> train_metrics;
    if (!kept.empty()) {
      auto t0 = std::chrono::steady_clock::now();
      const auto old_logprobs = trainer.policy_logprobs(kept);
      const auto ref_logprobs = reference ? trainer.reference_logprobs(kept) : std::vector<std::vector<float>>{};
      t_logprobs = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      const size_t per_minibatch = static_cast<size_t>(c.train_minibatch_size * G);
      int64_t n_updates = 0;
      for (size_t begin = 0; begin < kept.size(); begin += per_minibatch) {
        const size_t end = std::min(kept.size(), begin + per_minibatch);
        std::vector<TrainSample> mb(kept.begin() + static_cast<long>(begin), kept.begin() + static_cast<long>(end));
        std::vector<std::vector<float>> old_mb(old_logprobs.begin() + static_cast<long>(begin), old_logprobs.begin() + static_cast<long>(end));
        std::vector<std::vector<float>> ref_mb;
        if (reference) ref_mb.assign(ref_logprobs.begin() + static_cast<long>(begin), ref_logprobs.begin() + static_cast<long>(end));
        const auto m = trainer.step(mb, old_mb, ref_mb).values;
        for (const auto& [k, v] : m) train_metrics[k] += v;
        ++n_updates;
      }
      for (auto& [k, v] : train_metrics) v /= static_cast<double>(n_updates);
      t_train = seconds_since(t0);
      engine.set_version(engine.version() + 1);
    }
    const double step_seconds = seconds_since(step_start);
    double reward_mean = 0;
    for (double r : rewards_all) reward_mean += r;
    reward_mean /= std::max<size_t>(1, rewards_all.size());
    nlohmann::ordered_json line;
    line["step"] = step;
    line["reward_mean"] = reward_mean;
    line["accuracy"] = static_cast<double>(n_correct) / std::max<int64_t>(1, n_generated);
    line["kept_groups"] = n_kept_groups;
    line["sample_utilization"] = static_cast<double>(n_kept_groups) / std::max<int64_t>(1, n_groups);
    line["response_length_mean"] = sum_len / std::max<int64_t>(1, n_generated);
    line["response_length_max"] = max_len;
    line["truncated_fraction"] = static_cast<double>(n_truncated) / std::max<int64_t>(1, n_generated);
    for (const char* key : {"loss", "pg_loss", "kl", "entropy", "clip_frac_low", "clip_frac_high", "grad_norm", "lr"}) {
      line[key] = train_metrics.count(key) ? train_metrics[key] : 0.0;
    }
    line["tokens_per_s"] = sum_len / std::max(step_seconds, 1e-9);
    line["time"] = {{"generate", t_generate}, {"reward", t_reward}, {"logprobs", t_logprobs}, {"train", t_train}, {"total", step_seconds}};
    line["policy_version"] = engine.version();
    metrics_file << line.dump() << "\n";
    metrics_file.flush();
    spdlog::info("step {}/{} reward {:.3f} acc {:.3f} kept {} len {:.0f}/{} trunc {:.2f} loss {:.4f} kl {:.4f} "
                 "clip {:.3f} gnorm {:.3f} lr {:.2e} | gen {:.1f}s reward {:.2f}s logp {:.1f}s train {:.1f}s",
                 step, total_steps, reward_mean, line["accuracy"].get<double>(), n_kept_groups,
                 line["response_length_mean"].get<double>(), max_len, line["truncated_fraction"].get<double>(),
                 line["loss"].get<double>(), line["kl"].get<double>(), line["clip_frac_high"].get<double>(),
                 line["grad_norm"].get<double>(), line["lr"].get<double>(), t_generate, t_reward, t_logprobs, t_train);
    if ((c.save_interval > 0 && step % c.save_interval == 0) || step == total_steps) {
      nlohmann::json state = {{"step", step}, {"policy_version", engine.version()}, {"data_cursor", cursor.state()},
                              {"optimizer_steps", trainer.n_steps()}};
      save_checkpoint_dir(*policy, trainer, c.model, run_dir, step, state);
    }
  }
  spdlog::info("done in {:.1f} s; run directory {}", seconds_since(run_start), run_dir.string());
  return run_dir;
}

}  // namespace rlcpp
