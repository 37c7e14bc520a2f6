#include "rl/step/evaluate.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "rl/rollout/agent_loop.h"
#include "rl/rollout/model_reward.h"
#include "rl/rollout/rollout.h"
#include "sandbox/sandbox_pool.h"
#include "util/error.h"
#include "util/file.h"
#include "util/trace.h"

namespace rlcpp {

nlohmann::ordered_json EvalResult::summary() const {
  nlohmann::ordered_json out = {{"prompts", prompts},         {"samples", samples},
                                {"accuracy", accuracy},       {"pass_at_n", pass_at_n}, {"maj_at_n", maj_at_n},
                                {"format_accuracy", format_accuracy}, {"reward_mean", reward_mean},
                                {"response_length_mean", response_length_mean}, {"truncated_fraction", truncated_fraction}};
  if (multi_turn) {
    out["tool_call_rate"] = tool_call_rate;
    out["tool_calls_mean"] = tool_calls_mean;
    out["turns_mean"] = turns_mean;
    out["tito_mismatch"] = tito_mismatch;
  }
  out["seconds"] = seconds;
  return out;
}

namespace {

// Every prompt's n samples: the engine's, or multi-turn episodes' (their response is the whole
// trajectory's text; the reward grades their last turn's, set in `graded`).
std::vector<GeneratedSample> eval_generate(Engine& engine, const std::vector<GenerationRequest>& requests,
                                           const std::vector<BuiltPrompt>& built, const EvalSampling& options,
                                           std::vector<std::string>* graded, std::vector<nlohmann::json>* episodes,
                                           std::vector<bool>* truncated) {
  std::vector<GeneratedSample> out;
  if (options.agent == nullptr) {
    out = engine.generate(requests);
    for (const auto& s : out) {
      graded->push_back(s.text);
      episodes->push_back(nullptr);
      truncated->push_back(s.finish_reason == FinishReason::kLength);
    }
    return out;
  }
  std::vector<EpisodePrompt> prompts;
  for (size_t r = 0; r < requests.size(); ++r) {
    prompts.push_back({built[r].messages, built[r].text, built[r].ids, built[r].truncated, nlohmann::json::object(),
                       static_cast<int64_t>(r), requests[r].seed});
  }
  for (auto& e : run_episodes(engine, *options.agent, prompts, options.sampling, options.n)) {
    graded->push_back(std::move(e.final_text));
    episodes->push_back(std::move(e.summary));
    truncated->push_back(e.truncated);
    out.push_back(std::move(e.sample));
  }
  return out;
}

}  // namespace

EvalResult evaluate(Engine& engine, PromptBuilder& prompts, const PromptDataset& dataset, const RewardFunction& reward,
                    const EvalSampling& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<GenerationRequest> requests;
  std::vector<const PromptRecord*> records;
  std::vector<std::string> texts;
  std::vector<BuiltPrompt> built_prompts;
  for (const auto& record : dataset.records) {
    if (options.limit > 0 && static_cast<int64_t>(requests.size()) >= options.limit) break;
    auto built = prompts.build(record);
    if (!built) continue;
    GenerationRequest request;
    request.prompt_ids = built->ids;
    request.params = options.sampling;
    request.n = options.n;
    request.seed = options.seed * 1000003ULL + static_cast<uint64_t>(record.line);
    requests.push_back(std::move(request));
    records.push_back(&record);
    texts.push_back(built->text);
    built_prompts.push_back(std::move(*built));
  }
  std::vector<std::string> graded_texts;
  std::vector<nlohmann::json> episodes;
  std::vector<bool> truncated;
  const auto generated = eval_generate(engine, requests, built_prompts, options, &graded_texts, &episodes, &truncated);
  std::vector<RewardInput> inputs;
  for (size_t k = 0; k < generated.size(); ++k) {
    const auto& s = generated[k];
    const auto& record = *records[static_cast<size_t>(s.request)];
    inputs.push_back({texts[static_cast<size_t>(s.request)], graded_texts[k], record.gt_answer,
                      nlohmann::json(record.metadata), truncated[k],
                      nlohmann::json(built_prompts[static_cast<size_t>(s.request)].messages)});
  }
  const auto graded = reward.score(inputs);
  EvalResult r;
  r.prompts = static_cast<int64_t>(requests.size());
  r.samples = static_cast<int64_t>(generated.size());
  std::vector<uint8_t> solved(requests.size(), 0);
  // Majority vote per prompt over the extracted answers: (answer -> votes, correct), first seen wins ties.
  std::vector<std::vector<std::tuple<std::string, int64_t, bool>>> votes(requests.size());
  for (size_t k = 0; k < generated.size(); ++k) {
    const auto& s = generated[k];
    EvalSample e;
    e.line = records[static_cast<size_t>(s.request)]->line;
    e.prompt = inputs[k].prompt;
    e.response = s.text;
    e.gt_answer = inputs[k].gt_answer;
    e.extracted = graded[k].extracted.value_or("");
    e.reason = graded[k].reason;
    e.reward = graded[k].reward;
    e.correct = graded[k].correct;
    e.format_ok = graded[k].format_ok;
    e.truncated = inputs[k].truncated;
    e.tokens = static_cast<int64_t>(s.token_ids.size());
    e.episode = episodes[k];
    if (e.episode.is_object()) {
      r.multi_turn = true;
      const int64_t calls = e.episode.value("tool_calls", int64_t{0});
      r.tool_call_rate += calls > 0;
      r.tool_calls_mean += static_cast<double>(calls);
      r.turns_mean += static_cast<double>(e.episode.value("n_turns", int64_t{0}));
      r.tito_mismatch += e.episode.value("tito", std::string()) == "mismatch";
    }
    solved[static_cast<size_t>(s.request)] |= e.correct;
    if (e.format_ok) {
      auto& list = votes[static_cast<size_t>(s.request)];
      auto it = std::find_if(list.begin(), list.end(), [&](const auto& v) { return std::get<0>(v) == e.extracted; });
      if (it == list.end()) list.emplace_back(e.extracted, 1, e.correct);
      else ++std::get<1>(*it);
    }
    r.accuracy += e.correct;
    r.format_accuracy += e.format_ok;
    r.reward_mean += e.reward;
    r.response_length_mean += static_cast<double>(e.tokens);
    r.truncated_fraction += e.truncated;
    r.per_sample.push_back(std::move(e));
  }
  const double n = std::max<double>(1.0, static_cast<double>(r.samples));
  r.accuracy /= n;
  r.format_accuracy /= n;
  r.reward_mean /= n;
  r.response_length_mean /= n;
  r.truncated_fraction /= n;
  r.tool_call_rate /= n;
  r.tool_calls_mean /= n;
  r.turns_mean /= n;
  for (uint8_t v : solved) r.pass_at_n += v;
  for (const auto& list : votes) {
    const auto best = std::max_element(list.begin(), list.end(),
                                       [](const auto& a, const auto& b) { return std::get<1>(a) < std::get<1>(b); });
    if (best != list.end() && std::get<2>(*best)) r.maj_at_n += 1;
  }
  r.maj_at_n /= std::max<double>(1.0, static_cast<double>(r.prompts));
  r.pass_at_n /= std::max<double>(1.0, static_cast<double>(r.prompts));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string eval_samples_jsonl(const EvalResult& r) {
  std::string text;
  for (const auto& s : r.per_sample) {
    nlohmann::ordered_json line = {{"line", s.line},           {"prompt", s.prompt},       {"response", s.response},
                                   {"gt_answer", s.gt_answer}, {"extracted", s.extracted}, {"correct", s.correct},
                                   {"format_ok", s.format_ok}, {"truncated", s.truncated}, {"tokens", s.tokens},
                                   {"reward", s.reward}};
    if (!s.reason.empty()) line["reason"] = s.reason;
    if (s.episode.is_object()) {
      line["turns"] = s.episode.at("turns");
      line["tool_calls"] = s.episode.value("tool_calls", int64_t{0});
      line["ended_by"] = s.episode.value("ended_by", std::string());
    }
    text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return text;
}

RunEvaluator::RunEvaluator(const RunConfig& c, const ModelConfig& model_config, const Tokenizer& tokenizer,
                           const std::filesystem::path& run_dir, RowScorer reward_model_scorer)
    : c_(c), out_dir_(c.eval.save_dir.empty() ? run_dir / "eval" : std::filesystem::path(c.eval.save_dir) / c.logging.project) {
  // What accuracy is reported against: the -rt grader (-rt model or judge: the mean reward, the
  // reward model loaded and the judge reached only when there are sets to evaluate).
  const auto sets = eval_sets(c.eval);
  reward_ = !grades_answers(c.reward) && !sets.empty()
                ? make_run_reward(c.reward, c.runtime.device, c.runtime.dtype, std::move(reward_model_scorer))
                : make_grader(c.reward);
  DatasetOptions options;
  options.kind = grades_answers(c.reward) ? DatasetKind::kPrompts : DatasetKind::kOpenPrompts;
  for (const auto& [name, path] : sets) sets_.emplace_back(name, load_prompt_dataset(path, checked_by(reward_, options)));
  PromptOptions prompt_options;
  prompt_options.system_prompt = c.rollout.system_prompt ? *c.rollout.system_prompt : default_system_prompt(c.reward.type);
  prompt_options.max_prompt_tokens = c.rollout.max_prompt_tokens;
  prompt_options.context_tokens = model_config.max_position_embeddings;
  prompt_options.overflow = c.rollout.overflow;
  if (c.episode.multi_turn() && !sets_.empty()) {
    // Held-out prompts run as the training episodes do, with the same tools (no environment: an
    // evaluation grades the final answer with -rt).
    EpisodeOptions episode = c.episode;
    episode.env_cmd.clear();
    if (episode.tools.find("python") != std::string::npos) {
      tool_sandbox_ = std::make_unique<SandboxPool>(static_cast<int>(c.reward.code.workers));
    }
    SandboxLimits limits;
    limits.memory_mb = c.reward.code.memory_mb;
    agent_ = std::make_unique<Agent>(tokenizer, episode, prompt_options.template_variables, tool_sandbox_.get(), limits);
    prompt_options.template_variables = agent_->template_variables();
    options_.agent = agent_.get();
  }
  prompts_ = std::make_unique<PromptBuilder>(tokenizer, prompt_options);
  options_.sampling = c.rollout.sampling;
  options_.sampling.temperature = c.eval.greedy ? 0.0 : c.eval.temperature;
  if (c.eval.max_new_tokens > 0) options_.sampling.max_new_tokens = c.eval.max_new_tokens;
  options_.sampling.stop_token_ids = default_stop_tokens(model_config, tokenizer);
  options_.n = c.eval.n;
  options_.limit = c.eval.limit;
  options_.seed = c.runtime.seed;  // the same sampling noise at every evaluation, so the curve compares like with like
}

RunEvaluator::~RunEvaluator() = default;

bool evaluation_due(const EvalOptions& eval, int64_t step, int64_t total_steps) {
  return !eval_sets(eval).empty() && ((eval.interval > 0 && step % eval.interval == 0) || step == total_steps);
}

void serve_evaluation_if_due(Engine& engine, const EvalOptions& eval, int64_t step, int64_t total_steps) {
  if (evaluation_due(eval, step, total_steps)) engine.serve();
}

bool RunEvaluator::due(int64_t step, int64_t total_steps) const {
  return !sets_.empty() && evaluation_due(c_.eval, step, total_steps);
}

double RunEvaluator::run_if_due(Engine* engine, int64_t step, int64_t total_steps, nlohmann::ordered_json& extra) {
  if (!due(step, total_steps)) return 0;
  RLCPP_CHECK(engine != nullptr, "evaluation due at step {} without an engine", step);
  const auto start = std::chrono::steady_clock::now();
  extra["eval"] = run(*engine, step);
  engine->release_followers();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::ordered_json RunEvaluator::run(Engine& engine, int64_t step) {
  nlohmann::ordered_json figures = nlohmann::ordered_json::object();
  trace::Span span("eval");
  for (const auto& [name, dataset] : sets_) {
    const EvalResult r = evaluate(engine, *prompts_, dataset, reward_, options_);
    auto summary = r.summary();
    figures[name] = summary;
    std::filesystem::create_directories(out_dir_ / name);
    write_file_atomic(out_dir_ / name / fmt::format("step-{}.jsonl", step), eval_samples_jsonl(r));
    spdlog::info("eval {} at step {}: accuracy {:.1f}% (pass@{} {:.1f}%, maj@{} {:.1f}%), format {:.1f}%, length {:.1f}, "
                 "truncated {:.1f}%, {:.1f} s", name, step, 100 * r.accuracy, options_.n, 100 * r.pass_at_n, options_.n,
                 100 * r.maj_at_n, 100 * r.format_accuracy, r.response_length_mean, 100 * r.truncated_fraction, r.seconds);
  }
  return figures;
}

}  // namespace rlcpp
