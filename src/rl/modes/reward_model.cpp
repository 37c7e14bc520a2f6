#include "rl/modes/reward_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/utils.h>

#include <chrono>
#include <optional>

#include "io/prompt_dataset.h"
#include "model/lora.h"
#include "model/model_options.h"
#include "rl/modes/sft.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "train/zero.h"
#include "util/error.h"
#include "util/file.h"
#include "util/json.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A file's pairs tokenised: each side's whole conversation through the chat template (no
// generation prompt: the reply and its end-of-turn are the last tokens, where the score is read).
// Pairs longer than the model's positions are left out and counted.
std::vector<PreferencePair> tokenize_pairs(const PreferenceDataset& data, const Tokenizer& tokenizer,
                                           const ChatTemplate& chat_template, int64_t max_positions) {
  std::vector<PreferencePair> pairs;
  int64_t n_long = 0;
  for (const auto& record : data.records) {
    PreferencePair pair;
    pair.chosen = tokenizer.encode(chat_template.render(record.chosen, false));
    pair.rejected = tokenizer.encode(chat_template.render(record.rejected, false));
    pair.margin = record.margin;
    const auto longest = static_cast<int64_t>(std::max(pair.chosen.size(), pair.rejected.size()));
    if (max_positions > 0 && longest > max_positions) {
      ++n_long;
      continue;
    }
    pairs.push_back(std::move(pair));
  }
  if (pairs.empty()) throw_user_error("{}: every pair is longer than the model's {} positions", data.path.string(), max_positions);
  if (n_long > 0) spdlog::warn("{}: {} pairs longer than {} positions left out", data.path.string(), n_long, max_positions);
  return pairs;
}

void refuse_unsupported(const RunConfig& c) {
  if (c.model.path.empty()) throw_user_error("-m/--model is required: the base model (a causal LM) or a reward model");
  if (!fs::is_regular_file(fs::path(c.model.path) / "config.json")) {
    throw_user_error("-m/--model {}: no config.json there; give a Hugging Face model directory", c.model.path);
  }
  if (c.runtime.dataset.empty()) throw_user_error("-d/--dataset is required: preference pairs as JSONL");

  if (!fs::is_regular_file(c.runtime.dataset)) throw_user_error("-d/--dataset {}: no such file", c.runtime.dataset);
  for (const auto& [name, path] : eval_sets(c.eval)) {
    if (!fs::is_regular_file(path)) throw_user_error("-ed/--eval-dataset: set \"{}\": no such file {}", name, path);
  }
}

}  // namespace

// The reward model of the run: the classifier of -m (a fresh head on a causal LM), or the
// checkpoint resumed from; under LoRA, the base (frozen, in --frozen-dtype) with fresh adapters or
// the checkpoint's, the head trained whole beside them.
std::shared_ptr<Transformer> load_reward_model(const RunConfig& c, const std::optional<fs::path>& resume_from,
                                               std::shared_ptr<Communicator> tp_group, const PipelineStage& stage) {
  ModelOptions options = model_options_from_flags(c.runtime.dtype, c.runtime.device);
  options.gradient_checkpointing = c.train.gradient_checkpointing;
  options.tp_group = std::move(tp_group);
  options.stage = stage;
  if (!c.model.lora.enabled()) {
    return Transformer::classifier_from_pretrained(resume_from ? *resume_from : fs::path(c.model.path), options, 1, c.runtime.seed);
  }
  if (!c.model.frozen_dtype.empty()) options.frozen_dtype = dtypes().parse(c.model.frozen_dtype, "--frozen-dtype");
  auto model = Transformer::classifier_from_pretrained(c.model.path, options, 1, c.runtime.seed);
  if (resume_from) {
    if (!is_peft_adapter_dir(*resume_from)) {
      throw_user_error("{}: a checkpoint of full weights, not a LoRA adapter ({} missing); resume it without --lora-rank",
                       resume_from->string(), kAdapterConfigFile);
    }
    model->load_adapter(*resume_from);
  } else {
    model->add_adapters(c.model.lora, c.runtime.seed);
  }
  model->eval();
  return model;
}

fs::path run_reward_model_training(const RunConfig& config) {
  const auto run_start = Clock::now();
  RunConfig c = config;
  // Under LoRA each checkpoint also holds the merged model: the ...ForSequenceClassification
  // directory transformers and --reward-model load whole.
  if (c.model.lora.enabled()) c.logging.save_merged = true;
  refuse_unsupported(c);
  const auto topology = supervised_topology(c, "train-rm");
  RunPlan plan = shared_plan(c, topology ? topology->world.get() : nullptr);
  const fs::path& run_dir = plan.run_dir;
  const auto& resume_from = plan.resume_from;
  auto tokenizer = Tokenizer::from_dir(c.model.path);
  const ChatTemplate chat_template(*tokenizer);
  torch::manual_seed(c.runtime.seed);  // LoRA dropout; a resume restores the generator's state
  ModelConfig classifier = ModelConfig::load(c.model.path);
  classifier.num_labels = 1;  // the stages are the reward model's: a score head on the last
  auto model = load_reward_model(c, resume_from, topology ? topology->tp_group : nullptr,
                                 supervised_stage(c, classifier, topology.get()));
  const int64_t max_positions = model->config().max_position_embeddings;

  const auto pairs = tokenize_pairs(load_preference_dataset(c.runtime.dataset, c.runtime.skip_bad_lines), *tokenizer,
                                    chat_template, max_positions);
  std::vector<std::pair<std::string, std::vector<PreferencePair>>> held_out;
  for (const auto& [name, path] : eval_sets(c.eval)) {
    held_out.emplace_back(name, tokenize_pairs(load_preference_dataset(path, c.runtime.skip_bad_lines), *tokenizer,
                                               chat_template, max_positions));
  }
  const int64_t n = static_cast<int64_t>(pairs.size());
  const int64_t total_steps = plan.total_steps = run_total_steps(c, n, c.train.train_batch_size);
  check_steps_left(plan);
  TrainerConfig trainer_config;
  trainer_config.preference = c.train.preference;
  SupervisedRun run(c, plan, model, n, trainer_config, topology);
  const int64_t first_step = plan.first_step();
  if (run.leader()) {
    spdlog::info("reward model from {} on {} ({} pairs{}): steps {}..{} of {} pairs", c.model.path, c.runtime.dataset, n,
                 held_out.empty() ? "" : fmt::format(", {} held-out sets", held_out.size()), first_step, total_steps,
                 c.train.train_batch_size);
  }
  // The scores' mean and std written with each checkpoint: over the first held-out set, else over
  // (up to 512 of) the training pairs.
  const std::vector<PreferencePair> calibration =
      held_out.empty() ? std::vector<PreferencePair>(pairs.begin(), pairs.begin() + std::min<int64_t>(n, 512)) : held_out.front().second;
  start_profile(c.logging, topology != nullptr ? topology->world->rank() : 0, "rlcpp train-rm");
  for (int64_t step = first_step; step <= total_steps; ++step) {
    trace::Span step_span("step");
    const auto step_start = Clock::now();
    std::vector<PreferencePair> batch;
    for (const int64_t k : run.next_batch()) batch.push_back(pairs[static_cast<size_t>(k)]);
    // Normalised by the step's whole count: each process's figures are its shares of the step's.
    auto m = run.trainer().preference_step(batch, static_cast<double>(c.train.train_batch_size)).values;
    const std::vector<const char*> shared = {"loss", "accuracy", "chosen", "rejected", "margin"};
    std::vector<double> shares;
    for (const char* key : shared) shares.push_back(m[key]);
    shares = run.sum(shares);
    for (size_t k = 0; k < shared.size(); ++k) m[shared[k]] = shares[k];
    const double train_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    nlohmann::ordered_json line;
    line["step"] = step;
    line["episode"] = run.cursor.epoch();
    for (const char* key : {"loss", "accuracy", "chosen", "rejected", "margin", "grad_norm", "lr"}) line[key] = m[key];
    line["optimizer_steps"] = run.trainer().n_steps();
    std::string eval_text;
    const bool eval_due = step == total_steps || (c.eval.interval > 0 && step % c.eval.interval == 0);
    // The first replica scores the held-out sets (under ZeRO-3 gathered to it whole; under tensor
    // parallelism its ranks together).
    std::optional<GatheredParameters> whole;
    whole.emplace(run.trainer().zero(), eval_due && !held_out.empty(), /*root=*/0);
    if (eval_due && !held_out.empty() && run.first_replica()) {
      trace::Span eval_span("evaluate");
      for (const auto& [name, set] : held_out) {
        const auto f = run.trainer().preference_figures(set);
        line["eval"][name] = {{"accuracy", f.at("accuracy")}, {"loss", f.at("loss")}, {"margin", f.at("margin")},
                              {"pairs", f.at("n_pairs")}};
        eval_text += fmt::format(" | {} acc {:.3f} margin {:.3f}", name, f.at("accuracy"), f.at("margin"));
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    line["time"] = {{"train", train_seconds}, {"total", seconds}};
    run.write(line, total_steps,
                  fmt::format("step {}/{} epoch {} loss {:.4f} acc {:.3f} margin {:.3f} gnorm {:.3f} lr {:.2e}{} | {:.2f}s",
                              step, total_steps, run.cursor.epoch(), m["loss"], m["accuracy"], m["margin"], m["grad_norm"],
                              m["lr"], eval_text, seconds));
    whole.reset();
    if (checkpoint_due(c.logging, step, total_steps) && !run.first_replica()) {
      { GatheredParameters calibrated(run.trainer().zero(), true, /*root=*/0); }  // the first replica's calibration below
      run.save(step);  // its shard of the optimizer, under ZeRO
    } else if (checkpoint_due(c.logging, step, total_steps)) {
      const auto figures = [&] {
        GatheredParameters calibrated(run.trainer().zero(), true, /*root=*/0);
        return run.trainer().preference_figures(calibration);
      }();
      const fs::path dir = run.save(step);
      if (!run.leader()) continue;
      // OpenRLHF's normalisation statistics beside the model's config (rlcpp train --normalize-reward).
      const fs::path config_file = (c.model.lora.enabled() ? dir / "merged" : dir) / "config.json";
      Json model_config = load_json_file(config_file);
      model_config["mean"] = figures.at("score_mean");
      model_config["std"] = figures.at("score_std");
      write_file_atomic(config_file, model_config.dump(2) + "\n");
    }
  }
  run.finish();
  if (run.leader()) {
    spdlog::info("done in {:.1f} s; run directory {}", std::chrono::duration<double>(Clock::now() - run_start).count(),
                 run_dir.string());
  }
  return run_dir;
}

}  // namespace rlcpp
