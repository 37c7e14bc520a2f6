#include "rl/config/run_config.h"

#include <fmt/format.h>

#include <unistd.h>

#include <charconv>
#include <set>
#include <sstream>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "model/model_config.h"
#include "model/tensor_parallel.h"
#include "rl/config/chatlearn_fields.h"
#include "rl/config/config_checks.h"
#include "rl/config/setting_values.h"
#include "util/error.h"
#include "util/yaml.h"

namespace rlcpp {

namespace fs = std::filesystem;

// "-t 4" or "-t 4 / --train-tp 2 = 2 replicas", and the same of the engines.
std::string replicas_text(const RunConfig& c) {
  const auto& p = c.parallel;
  if (p.tp == 1 && p.pp == 1) return fmt::format("-t {}", p.trainers());
  if (p.pp == 1) return fmt::format("-t {} / --train-tp {} = {} replicas", p.trainers(), p.tp, p.replicas());
  if (p.tp == 1) return fmt::format("-t {} / --pp {} = {} replicas", p.trainers(), p.pp, p.replicas());
  return fmt::format("-t {} / (--train-tp {} x --pp {}) = {} replicas", p.trainers(), p.tp, p.pp, p.replicas());
}

std::string engines_text(const RunConfig& c) {
  if (c.parallel.ptp == 1 || !c.parallel.distributed()) return fmt::format("-i {}", c.parallel.inferencers());
  return fmt::format("-i {} / --rollout-tp {} = {} engines", c.parallel.inferencers(), c.parallel.ptp, c.parallel.engines());
}

void RawSettings::set(const std::string& name, Json value, std::string where) {
  values[name] = std::move(value);
  source[name] = std::move(where);
}

void RawSettings::set_override(const std::string& name, Json value, std::string where) {
  for (const auto& s : run_settings()) {
    if (s.converts_to == name && values.contains(s.name)) {
      values.erase(s.name);
      source.erase(s.name);
    }
  }
  set(name, std::move(value), std::move(where));
}

namespace {

// The setting for `key` found under `group` ("" at the top level): its canonical name, another
// accepted name, or its key alone (keys are unique across groups, and ChatLearn keeps most under
// runtime:); nullptr when there is none.
const Setting* lookup(const std::string& group, const std::string& key) {
  if (const Setting* s = find_setting(group + "." + key)) return s;
  for (const auto& s : run_settings()) {
    for (const auto& alias : s.aliases) {
      if (alias == key) return &s;
    }
  }
  for (const auto& s : run_settings()) {
    if (s.name.substr(s.name.find('.') + 1) == key) return &s;
  }
  return nullptr;
}

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Whether `value` is one of `accepted` (case-insensitive; YAML's yes/no/on/off as booleans).
bool one_of(const Json& value, const std::vector<std::string>& accepted) {
  const std::string text = value.is_null() ? "null" : lower(scalar_text(value));
  for (const auto& a : accepted) {
    const std::string want = lower(a);
    if (want == text || (want == "false" && (text == "no" || text == "off")) ||
        (want == "true" && (text == "yes" || text == "on"))) {
      return true;
    }
  }
  return false;
}

// A ChatLearn field's value, by its fate: the rlcpp setting it sets, with its value in `out`
// (nullptr when it sets none).
const Setting* apply_chatlearn_field(const ChatLearnField& f, const Json& value, const std::string& where, Json& out) {
  switch (f.fate) {
    case FieldFate::kImplemented:
    case FieldFate::kMapped:
      out = f.convert ? f.convert(value, where) : value;
      return find_setting(f.setting);
    case FieldFate::kRefused:
      if (one_of(value, f.off)) return nullptr;
      throw_user_error("{} = {}: {}; remove it or set it to {}", where, scalar_text(value), f.note, f.off.front());
    case FieldFate::kNotice:
      if (!f.off.empty() && !one_of(value, f.off)) {
        throw_user_error("{} = {}: expected {}; {}", where, scalar_text(value), fmt::join(f.off, " or "), f.note);
      }
      spdlog::info("{}: ChatLearn's {} has no effect in rlcpp ({})", where, f.name, f.note);
      return nullptr;
  }
  return nullptr;
}

void read_group(const std::filesystem::path& path, const std::string& group, const Json& entries, const std::string& prefix,
                RawSettings& raw) {
  for (const auto& [key, value] : entries.items()) {
    const std::string dotted = prefix.empty() ? key : prefix + "." + key;
    const std::string where = fmt::format("{}: {}{}", path.string(), group.empty() ? "" : group + ".", dotted);
    Json given = value;
    const Setting* s = nullptr;
    if (const ChatLearnField* field = find_chatlearn_field(dotted)) {
      s = apply_chatlearn_field(*field, value, where, given);
      if (s == nullptr || given.is_discarded()) continue;
    } else {
      s = lookup(group, dotted);
    }
    if (s == nullptr && value.is_object() && value.size() > 0) {  // a nested ChatLearn block (batch_generation, lora)
      read_group(path, group, value, dotted, raw);
      continue;
    }
    if (s == nullptr) {
      throw_user_error("{}: unknown setting \"{}\" (rlcpp train --print-config lists every setting with its group; "
                       "docs/configuration.md lists ChatLearn's fields)", where, dotted);
    }
    if (raw.values.contains(s->name) && raw.source[s->name].rfind(path.string(), 0) == 0) {
      throw_user_error("{}: {} is set twice in the file (also as {})", where, s->name, raw.source[s->name]);
    }
    raw.set(s->name, given, where);
  }
}

void reject_unimplemented(const RunConfig& c) {
  const std::string backend = rollout_backend_kinds().name(c.remote.backend);
  if (!c.remote.enabled() && !c.remote.url.empty()) {
    throw_user_error("--rollout-url {}: the servers generate only with -b openai, vllm or sglang (-b is native)", c.remote.url);
  }
  if (c.remote.enabled()) {
    if (c.remote.url.empty()) {
      throw_user_error("-b {}: give the servers with --rollout-url http://HOST:PORT[,http://HOST:PORT...] (start them "
                       "with rlcpp serve --model {} --port PORT)", backend, c.model.path.empty() ? "DIR" : c.model.path);
    }
    if (c.parallel.distributed() || c.parallel.num_trainers > 1) {
      throw_user_error("-b {} with -t {} -i {}: the servers at --rollout-url take the rollout workers' place, and the "
                       "trainer runs as one process; drop -t and -i (and mpirun)", backend, c.parallel.trainers(), c.parallel.num_inferencers);
    }
    if (c.parallel.tp > 1 || c.parallel.pp > 1) {
      throw_user_error("-b {} with --train-tp {} --pp {}: a trainer over several processes with rollout servers is not "
                       "supported; train in one process (LoRA, --frozen-dtype and --gradient-checkpointing shrink it), or "
                       "use -b native", backend, c.parallel.tp, c.parallel.pp);
    }
    if (c.remote.backend == RolloutBackendKind::kVllm && !c.model.lora.enabled()) {
      throw_user_error("-b vllm trains LoRA adapters only: vLLM's server loads adapters at run time "
                       "(/v1/load_lora_adapter) but documents no reload of a whole model from disk; add --lora-rank R, "
                       "or serve with rlcpp serve or SGLang (-b openai or sglang)");
    }
  }
  if (c.parallel.tp < 1 || c.parallel.ptp < 1) {
    throw_user_error("--train-tp {} --rollout-tp {}: tensor-parallel sizes are at least 1", c.parallel.tp, c.parallel.ptp);
  }
  if (!c.parallel.distributed() && c.parallel.ptp != 1 && c.parallel.ptp != c.parallel.tp) {
    throw_user_error("--rollout-tp {} with --train-tp {} in the colocated mode (no -i): the engine generates with the "
                     "trainer's own parts of the weights, so it has the trainer's tensor parallelism; leave --rollout-tp "
                     "at 1 (or {}), or give rollout workers their own (-t T -i I under mpirun)", c.parallel.ptp, c.parallel.tp, c.parallel.tp);
  }
  if (c.parallel.pp < 1) throw_user_error("--pp {}: a pipeline has at least 1 stage", c.parallel.pp);
  if (c.parallel.pp > 1) {
    // What pipeline stages do not (yet) compose with, each refused by name.
    if (c.parallel.zero > 1) {
      throw_user_error("--pp {} with -zero {}: pipeline stages take ZeRO stage 1 only (stages 2 and 3 hand each layer's "
                       "gradients over inside backward, which the stages' schedule does not yet do); use -zero 1, or 0",
                       c.parallel.pp, c.parallel.zero);
    }
  }
  if (c.parallel.zero < 0 || c.parallel.zero > 3) {
    throw_user_error("-zero/--zero-stage {}: a ZeRO stage is 0 (off), 1 (optimizer state sharded), 2 (also gradients) "
                     "or 3 (also parameters)", c.parallel.zero);
  }
  if (c.parallel.zero > 0 && !c.parallel.distributed()) {
    throw_user_error("-zero/--zero-stage {}: ZeRO shards over data-parallel trainers, which need the distributed mode "
                     "(mpirun -np T+I rlcpp train -t T -i I ...); the colocated mode has one trainer: leave -zero at 0",
                     c.parallel.zero);
  }
  if (!c.parallel.master_address.empty() || c.parallel.master_port != 0) {
    throw_user_error("--master_address/--master_port: rlcpp has no Ray or torch rendezvous to point at (mpirun "
                     "provides it: see docs/distributed.md, several machines); remove these flags");
  }
}

void check_eval_sets(const RunConfig& c, bool files) {
  for (const auto& [name, path] : eval_sets(c.eval)) {
    if (files && !fs::is_regular_file(path)) throw_user_error("-ed/--eval-dataset: set \"{}\": no such file {}", name, path);
  }
}

void check_files(const RunConfig& c) {
  if (c.model.path.empty()) throw_user_error("-m/--model (model.path) is required");
  if (c.runtime.dataset.empty()) throw_user_error("-d/--dataset (runtime.dataset) is required");
  if (!fs::is_regular_file(fs::path(c.model.path) / "config.json")) {
    throw_user_error("-m/--model {}: no config.json there; give a Hugging Face model directory", c.model.path);
  }
  const ModelConfig model = ModelConfig::load(c.model.path);  // names an unsupported architecture
  if (model.classifier()) {
    throw_user_error("-m/--model {}: a sequence classifier ({}, a reward model) scores responses; the policy is a "
                     "...ForCausalLM model", c.model.path, model.architecture);
  }
  TpLayout::make(model, static_cast<int>(c.parallel.tp), "--train-tp");  // a model too small to split that many ways
  TpLayout::make(model, static_cast<int>(c.parallel.ptp), "--rollout-tp");
  if (c.parallel.pp > model.num_hidden_layers) {
    throw_user_error("--pp {}: {} has {} decoder layers, and each pipeline stage holds one or more; lower --pp",
                     c.parallel.pp, c.model.path, model.num_hidden_layers);
  }
  if (!fs::is_regular_file(c.runtime.dataset)) throw_user_error("-d/--dataset {}: no such file", c.runtime.dataset);
  if (!c.reward.model.path.empty() && !fs::is_regular_file(fs::path(c.reward.model.path) / "config.json")) {
    throw_user_error("--reward-model {}: no config.json there; give a reward model's directory (rlcpp train-rm writes one)",
                     c.reward.model.path);
  }
  if (!c.reward.judge.template_path.empty() && !fs::is_regular_file(c.reward.judge.template_path)) {
    throw_user_error("--judge-template {}: no such file", c.reward.judge.template_path);
  }
  if (c.algo.uses_critic() && !fs::is_regular_file(fs::path(c.critic_model()) / "config.json")) {
    throw_user_error("{} {}: no config.json there; the critic starts from a whole model directory (a reward model, or a "
                     "causal LM given a fresh value head; a LoRA adapter's merged/ directory, not the adapter)",
                     c.train.critic.model.empty() ? "the critic's model (--reward-model, else -m)" : "--critic-model",
                     c.critic_model());
  }
  if (c.algo.uses_critic() && c.parallel.pp > 1) {
    // The critic is cut into the policy's pipeline stages: the same decoder layers on each.
    const ModelConfig critic = ModelConfig::load(c.critic_model());
    if (critic.num_hidden_layers != model.num_hidden_layers) {
      throw_user_error("-a PPO with --pp {}: the critic ({}) has {} decoder layers and the policy ({}) {}; under --pp the "
                       "critic takes the policy's stages, so give a critic of the policy's depth (--critic-model) or drop "
                       "--pp", c.parallel.pp, c.critic_model(), critic.num_hidden_layers, c.model.path,
                       model.num_hidden_layers);
    }
  }
  check_eval_sets(c, true);
}

// -a PPO's settings: what a critic composes with, and critic settings given to a run without one.
void check_critic_settings(const RunConfig& c) {
  if (!c.algo.uses_critic()) {
    const PpoConfig ppo;
    const CriticOptions critic;
    std::vector<std::string> given;
    if (c.algo.ppo.gamma != ppo.gamma) given.push_back(fmt::format("--gamma {:g}", c.algo.ppo.gamma));
    if (c.algo.ppo.lam != ppo.lam) given.push_back(fmt::format("--lam {:g}", c.algo.ppo.lam));
    if (c.algo.ppo.value_clip != ppo.value_clip) given.push_back(fmt::format("--value-clip {:g}", c.algo.ppo.value_clip));
    if (c.algo.ppo.kl_in_reward) given.push_back("--kl-in-reward");
    if (!c.train.critic.model.empty()) given.push_back("--critic-model " + c.train.critic.model);
    if (c.train.critic.lr != critic.lr) given.push_back(fmt::format("--critic-lr {:g}", c.train.critic.lr));
    if (c.train.critic.warmup_steps != critic.warmup_steps) {
      given.push_back(fmt::format("--critic-warmup-steps {}", c.train.critic.warmup_steps));
    }
    if (!given.empty()) {
      throw_user_error("{}: settings of a critic, which -a {} (--advantage-estimator {}) does not train; use -a PPO or "
                       "drop them", fmt::join(given, ", "), c.algo.name, advantage_estimators().name(c.algo.advantage.estimator));
    }
    return;
  }
  if (c.algo.ppo.kl_in_reward && c.algo.loss.kl_coef == 0) {
    throw_user_error("--kl-in-reward with --kl-coeff 0: the penalty is --kl-coeff x the KL; give --kl-coeff > 0 or drop "
                     "--kl-in-reward");
  }
}

void validate(const RunConfig& c) {
  reject_unimplemented(c);
  if (!c.model.frozen_dtype.empty() && !c.model.lora.enabled() && c.algo.loss.kl_coef == 0) {
    throw_user_error("--frozen-dtype {}: nothing is frozen in this run (it trains every weight and has no reference "
                     "model, -kl 0); drop it or add --lora-rank R", c.model.frozen_dtype);
  }
  check_eval_sets(c, false);
  const auto& loss = c.algo.loss;
  if (loss.is_mask_low > 0 && !loss.masks_by_ratio()) {
    throw_user_error("--is-mask-low {}: the masked band needs its ceiling too; add --is-mask-high (IcePop uses "
                     "--is-mask-low 0.5 --is-mask-high 2)", loss.is_mask_low);
  }
  if (loss.masks_by_ratio() && loss.is_mask_low >= loss.is_mask_high) {
    throw_user_error("--is-mask-low {} --is-mask-high {}: the band of kept ratios is empty; make the floor lower than "
                     "the ceiling", loss.is_mask_low, loss.is_mask_high);
  }
  if (c.train.train_minibatch_size > c.train.train_batch_size) {
    throw_user_error("-tMbs/--train-minibatch-size {} must be between 1 and -tbs {} (train_batch_size >= "
                     "train_minibatch_size >= train_microbatch_size)", c.train.train_minibatch_size, c.train.train_batch_size);
  }
  if (c.train.train_batch_size % c.train.train_minibatch_size != 0) {
    throw_user_error("-tbs {} must be a multiple of -tMbs {}", c.train.train_batch_size, c.train.train_minibatch_size);
  }
  if (c.train.train_microbatch_size > c.train.train_minibatch_size * c.rollout.num_generations) {
    throw_user_error("-tmbs/--train-microbatch-size {} samples exceeds a mini-batch of -tMbs {} × -g {} = {} samples",
                     c.train.train_microbatch_size, c.train.train_minibatch_size, c.rollout.num_generations,
                     c.train.train_minibatch_size * c.rollout.num_generations);
  }
  // Data-parallel replicas (-t / (--train-tp x --pp)) and engines (-i / --rollout-tp) are what the
  // seed's constraints count (its num_trainer / train_pipeline_parallelism_size /
  // train_tensor_parallelism_size, and num_inferencer).
  const int64_t ibs = c.round_prompts(), T = c.parallel.replicas(), I = c.parallel.engines();
  if (c.parallel.distributed() && c.parallel.pp == 1 &&
      (c.parallel.trainers() % c.parallel.tp != 0 || c.parallel.inferencers() % c.parallel.ptp != 0)) {
    throw_user_error("-t {} --train-tp {} -i {} --rollout-tp {}: the trainer ranks form replicas of --train-tp ranks and "
                     "the rollout ranks engines of --rollout-tp ranks; make -t a multiple of --train-tp and -i of "
                     "--rollout-tp", c.parallel.trainers(), c.parallel.tp, c.parallel.inferencers(), c.parallel.ptp);
  }
  if (c.parallel.distributed() && c.parallel.pp > 1 &&
      (c.parallel.trainers() % (c.parallel.tp * c.parallel.pp) != 0 || c.parallel.inferencers() % c.parallel.ptp != 0)) {
    throw_user_error("-t {} --train-tp {} --pp {} -i {} --rollout-tp {}: the trainer ranks form replicas of --train-tp x "
                     "--pp = {} ranks and the rollout ranks engines of --rollout-tp ranks; make -t a multiple of {} and -i "
                     "of --rollout-tp", c.parallel.trainers(), c.parallel.tp, c.parallel.pp, c.parallel.inferencers(),
                     c.parallel.ptp, c.parallel.tp * c.parallel.pp, c.parallel.tp * c.parallel.pp);
  }
  if (c.parallel.reward_ranks > 0) {
    if (!c.parallel.distributed()) {
      throw_user_error("--reward-ranks {}: reward ranks serve rollout workers; give -t T -i I (mpirun -np T+I+{}), or "
                       "drop --reward-ranks to score in this process", c.parallel.reward_ranks, c.parallel.reward_ranks);
    }
    if (c.reward.model.path.empty()) {
      throw_user_error("--reward-ranks {}: reward ranks hold the reward model; give it with --reward-model DIR",
                       c.parallel.reward_ranks);
    }
    if (c.parallel.reward_ranks > c.parallel.engines()) {
      throw_user_error("--reward-ranks {} with {}: each reward rank serves one engine or more; give at most {}",
                       c.parallel.reward_ranks, engines_text(c), c.parallel.engines());
    }
  }
  if (!c.parallel.distributed()) {
    if (c.parallel.num_trainers > 1) {
      throw_user_error("-t {} without -i: trainers need rollout workers; give -i (mpirun -np T+I) or drop -t for the "
                       "colocated mode", c.parallel.num_trainers);
    }
    if (c.staleness.n_behind != 0 && !c.remote.enabled()) {
      throw_user_error("-nb/--n-behind {}: the colocated mode (no -i) is always on-policy; bounded staleness needs "
                       "rollout workers (-t T -i I under mpirun) or rollout servers (-b openai --rollout-url URL)", c.staleness.n_behind);
    }
  } else if (I % T != 0) {
    throw_user_error("{} is not a multiple of {} (num_inferencer % num_trainer == 0)", engines_text(c), replicas_text(c));
  }
  if ((I * ibs) % (T * c.train.train_batch_size) != 0) {
    throw_user_error("-ibs {} with {}: {} prompts per round are not a multiple of {} × -tbs {} = {} "
                     "((num_inferencer × inference_batch_size) % (num_trainer × train_batch_size) == 0{})",
                     ibs, engines_text(c), I * ibs, replicas_text(c), c.train.train_batch_size, T * c.train.train_batch_size,
                     c.parallel.distributed() ? "" : ", with one of each in the colocated mode");
  }
  check_staleness_settings(c);
  // A round's samples live in host memory (token ids, log-probs, text): refuse a round that could
  // not fit before generating any of it.
  {
    const double samples = static_cast<double>(ibs) * static_cast<double>(c.rollout.num_generations);
    const double bytes = samples * (static_cast<double>(c.rollout.sampling.max_new_tokens) * 16.0 + 512.0);
    const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    if (memory > 0 && bytes > memory / 2) {
      throw_user_error("-g {} x -ibs {} = {:.0f} samples per round of up to -mnt {} tokens need about {:.1f} GiB, more than "
                       "half of this machine's {:.1f} GiB; lower -g, -ibs or -mnt",
                       c.rollout.num_generations, ibs, samples, c.rollout.sampling.max_new_tokens, bytes / (1 << 30), memory / (1 << 30));
    }
  }
  if (c.rollout.inference_microbatch_size > ibs) {
    throw_user_error("-imbs {} exceeds -ibs {} (inference_batch_size >= inference_microbatch_size)",
                     c.rollout.inference_microbatch_size, ibs);
  }
  if (c.reward.type == RewardType::kModel && c.reward.model.path.empty()) {
    throw_user_error("-rt model: the reward is a reward model's score; give it with --reward-model DIR (rlcpp train-rm "
                     "makes one)");
  }
  if (c.reward.model.path.empty() && (c.reward.model.normalize || c.reward.model.clip > 0 || !c.reward.model.dtype.empty())) {
    throw_user_error("--normalize-reward, --reward-clip and --reward-model-dtype are for a reward model; give --reward-model DIR");
  }
  if (!grades_answers(c.reward) && c.algo.filter_range) {
    throw_user_error("--filter-range with -rt {}: the filter keeps groups by the share of correct answers, and a {} "
                     "grades none; drop --filter-range, or add a rule reward with -rt and --reward-weights",
                     reward_types().name(c.reward.type), c.reward.type == RewardType::kModel ? "reward model" : "judge");
  }
  if (c.reward.type == RewardType::kJudge && c.reward.judge.url.empty()) {
    throw_user_error("-rt judge: the reward is an LLM judge's score; give its servers with --judge-url http://HOST:PORT[,...] "
                     "and its prompt with --judge-template FILE");
  }
  {
    const JudgeOptions judge;
    const auto& j = c.reward.judge;
    if (j.url.empty() && (!j.template_path.empty() || !j.model.empty() || !j.pattern.empty() || j.max_score != judge.max_score ||
                          j.max_tokens != judge.max_tokens)) {
      throw_user_error("--judge-template, --judge-model, --judge-pattern, --judge-max-score and --judge-max-tokens are for an "
                       "LLM judge; give its servers with --judge-url");
    }
    if (!j.url.empty() && j.template_path.empty()) {
      throw_user_error("--judge-url {}: give the judge's prompt with --judge-template FILE ({{prompt}}, {{response}} and "
                       "{{answer}} are filled in)", j.url);
    }
  }
  reward_weights(c.reward);  // names a malformed list or a component the run lacks
  check_critic_settings(c);
  const bool env_reward = c.reward.type == RewardType::kEnv;
  if (env_reward && c.episode.env_cmd.empty()) {
    throw_user_error("-rt env: the reward is an external environment's; give it with --env-cmd CMD");
  }
  if (!c.episode.env_cmd.empty() && !env_reward && !c.episode.env_reward_add) {
    throw_user_error("--env-cmd with -rt {}: say what the trajectory's reward is: -rt env (the environment's rewards) "
                     "or --env-reward add (the -rt reward of the final answer plus the environment's)",
                     reward_types().name(c.reward.type));
  }
  if (env_reward && c.episode.env_reward_add) {
    throw_user_error("--env-reward add with -rt env: add adds the environment's rewards to another -rt reward; drop one");
  }
  const EpisodeOptions single_turn;
  if (!c.episode.multi_turn() &&
      (c.episode.max_turns != single_turn.max_turns || c.episode.max_tool_calls != single_turn.max_tool_calls ||
       c.episode.max_tokens_per_turn != single_turn.max_tokens_per_turn)) {
    throw_user_error("--max-turns {} --max-tool-calls {} --max-tokens-per-turn {}: turn limits are for multi-turn "
                     "rollouts; give --tools or --env-cmd", c.episode.max_turns, c.episode.max_tool_calls,
                     c.episode.max_tokens_per_turn);
  }
  if (c.rollout.sampling.temperature < 0) throw_user_error("-temp {}: must be >= 0", c.rollout.sampling.temperature);
  if (!(c.rollout.sampling.top_p > 0 && c.rollout.sampling.top_p <= 1)) throw_user_error("-topp {}: must be in (0, 1]", c.rollout.sampling.top_p);
  if (c.train.optimizer.lr < 0) throw_user_error("-lr {}: must be >= 0", c.train.optimizer.lr);
  if (c.runtime.resume != "" && c.runtime.resume != "auto") throw_user_error("--resume \"{}\": use auto, or -cp DIR for a given checkpoint", c.runtime.resume);
  if (c.runtime.resume == "auto" && !c.runtime.checkpoint_path.empty()) {
    throw_user_error("--resume auto and -cp {}: give one of them", c.runtime.checkpoint_path);
  }
  // The run directory is save_dir/project: a project name is one path component.
  if (c.logging.project.empty() || c.logging.project == "." || c.logging.project == ".." || c.logging.project.find('/') != std::string::npos ||
      c.logging.project.find('\\') != std::string::npos) {
    throw_user_error("-p/--project \"{}\": a run name is one folder name under -sd (no '/', not empty, not . or ..)",
                     c.logging.project);
  }
  if (c.runtime.resume_step > 0 && c.runtime.checkpoint_path.empty()) {
    throw_user_error("--resume-step {} (load_data_checkpoint_iteration) needs -cp/--checkpoint-path: the run directory "
                     "whose step-{} to resume", c.runtime.resume_step, c.runtime.resume_step);
  }
}

std::string yaml_scalar(const Json& v) {
  if (v.is_null()) return "null";
  return v.dump();  // JSON scalars are YAML flow scalars; strings come out double-quoted and escaped
}

}  // namespace

void read_run_file(const std::filesystem::path& path, RawSettings& raw) {
  const Json doc = load_yaml_file(path);
  if (doc.is_null()) return;
  if (!doc.is_object()) throw_user_error("{}: expected groups of settings ({}: ...)", path.string(), fmt::join(run_groups(), ":, "));
  // rlcpp's groups, and ChatLearn's runtime_env (its fields are in the ChatLearn table).
  std::set<std::string> groups = {"runtime_env"};
  for (const auto& s : run_settings()) groups.insert(s.name.substr(0, s.name.find('.')));
  for (const auto& [group, entries] : doc.items()) {
    if (groups.count(group) == 0) {
      if (entries.is_object()) {
        throw_user_error("{}: unknown group \"{}\" (use {})", path.string(), group, fmt::join(run_groups(), ", "));
      }
      read_group(path, "", Json{{group, entries}}, "", raw);  // a top-level ChatLearn name
      continue;
    }
    if (entries.is_null()) continue;
    if (!entries.is_object()) throw_user_error("{}: {} must be a mapping of settings", path.string(), group);
    read_group(path, group, entries, "", raw);
  }
}

namespace {

// LoRA's settings as one LoraConfig: ChatLearn's switch and scaling folded into rank and alpha, and
// LoRA settings given while LoRA is off refused.
void resolve_lora(RunConfig& c, const RawSettings& raw) {
  if (c.model.enable_lora) {
    if (!*c.model.enable_lora) c.model.lora.rank = 0;
    else if (c.model.lora.rank == 0) c.model.lora.rank = 8;  // ChatLearn's default lora_dim
  }
  if (c.model.lora_scaling > 0) {
    if (c.model.lora.alpha > 0) {
      throw_user_error("{} and {}: give LoRA's scale once (alpha = scaling x r)", raw.source.at("model.lora_scaling"),
                       raw.source.at("model.lora_alpha"));
    }
    c.model.lora.alpha = c.model.lora_scaling * static_cast<double>(c.model.lora.rank);
  }
  if (c.model.lora.enabled()) return;
  for (const char* name : {"model.lora_alpha", "model.lora_dropout", "model.lora_target_modules", "model.lora_name_scope"}) {
    const auto it = raw.source.find(name);
    if (it != raw.source.end() && it->second.rfind("-", 0) == 0) {
      throw_user_error("{}: LoRA is off; give --lora-rank R (or --lora) to train adapters", it->second);
    }
  }
  if (c.logging.save_merged) {
    throw_user_error("{}: only a LoRA run has something to merge (a full fine-tune's step-N/ already is the whole "
                     "model); drop it, or give --lora-rank R", raw.source.at("logging.save_merged"));
  }
}

}  // namespace

RunConfig resolve_run_config(const RawSettings& raw, bool with_files) {
  RunConfig c;
  for (const auto& setting : run_settings()) {
    auto it = raw.values.find(setting.name);
    if (it == raw.values.end()) continue;
    setting.apply(c, *it, raw.source.at(setting.name), raw);
  }
  resolve_lora(c, raw);
  validate(c);
  if (with_files) check_files(c);
  return c;
}

nlohmann::ordered_json run_config_json(const RunConfig& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& setting : run_settings()) {
    if (!setting.converts_to.empty()) continue;
    const size_t dot = setting.name.find('.');
    out[setting.name.substr(0, dot)][setting.name.substr(dot + 1)] = setting.get(config);
  }
  return out;
}

std::string run_config_yaml(const RunConfig& config) {
  std::ostringstream out;
  const auto resolved = run_config_json(config);
  for (const auto& [group, entries] : resolved.items()) {
    out << group << ":\n";
    for (const auto& [key, value] : entries.items()) out << "  " << key << ": " << yaml_scalar(value) << "\n";
  }
  return out.str();
}

std::vector<std::string> run_groups() {
  std::vector<std::string> groups;
  for (const auto& s : run_settings()) {
    const std::string group = s.name.substr(0, s.name.find('.'));
    if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
  }
  return groups;
}

namespace {

// A recorded configuration's value of `group.key`, or null when it has none. Keys are unique
// across groups, so a configuration recorded before a setting moved group is found by its key.
const nlohmann::ordered_json* recorded_value(const nlohmann::ordered_json& recorded, const std::string& group,
                                             const std::string& key) {
  if (recorded.contains(group) && recorded[group].is_object() && recorded[group].contains(key)) return &recorded[group][key];
  for (const auto& [other, entries] : recorded.items()) {
    if (entries.is_object() && entries.contains(key)) return &entries[key];
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> incompatible_settings(const nlohmann::ordered_json& recorded, const RunConfig& config) {
  const RunConfig default_config;
  const auto now = run_config_json(config), defaults = run_config_json(default_config);
  std::vector<std::string> out;
  for (const auto& setting : run_settings()) {
    if (setting.resume_may_differ || !setting.converts_to.empty()) continue;
    const size_t dot = setting.name.find('.');
    const std::string group = setting.name.substr(0, dot), key = setting.name.substr(dot + 1);
    const auto& current = now[group][key];
    // A setting the checkpoint does not record is newer than it: the run had its default's behaviour.
    const nlohmann::ordered_json* recorded_then = recorded_value(recorded, group, key);
    const bool known = recorded_then != nullptr;
    const auto& then = known ? *recorded_then : defaults[group][key];
    // Per-replica batches may change with the replica count (a resume onto another -t or --pp):
    // what must stay is the global batch, -tbs prompts per step and -tMbs per optimizer step times
    // the data-parallel replicas, -t / (--train-tp × --pp).
    if ((setting.name == "train.train_batch_size" || setting.name == "train.train_minibatch_size") &&
        then.is_number_integer() && current.is_number_integer()) {
      auto replicas = [](const nlohmann::ordered_json& c) {
        auto value = [&](const char* key) {
          const nlohmann::ordered_json* v = recorded_value(c, "parallel", key);
          return std::max<int64_t>(1, v != nullptr && v->is_number_integer() ? v->get<int64_t>() : 0);
        };
        return std::max<int64_t>(1, value("num_trainers") / (value("tensor_parallel_size") * value("pipeline_parallel_size")));
      };
      const int64_t global_then = then.get<int64_t>() * replicas(recorded);
      const int64_t global_now = current.get<int64_t>() * replicas(now);
      if (global_then != global_now) {
        out.push_back(fmt::format("{} × the data-parallel replicas (the global batch): {} -> {}", setting.name,
                                  global_then, global_now));
      }
      continue;
    }
    if (then != current) {
      out.push_back(fmt::format("{}: {} -> {}", setting.name, known ? then.dump() : "(absent: default " + then.dump() + ")",
                                current.dump()));
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> eval_sets(const EvalOptions& eval) {
  std::vector<std::pair<std::string, std::string>> sets;
  if (eval.dataset.empty()) return sets;
  nlohmann::ordered_json map;
  try {
    map = nlohmann::ordered_json::parse(eval.dataset);
  } catch (const nlohmann::json::exception&) {
    throw_user_error("-ed/--eval-dataset '{}': not a JSON map; give '{{\"name\": \"path.jsonl\", ...}}'", eval.dataset);
  }
  if (!map.is_object() || map.empty()) {
    throw_user_error("-ed/--eval-dataset '{}': give a map of set names to JSONL files, e.g. '{{\"gsm8k\": \"test.jsonl\"}}'",
                     eval.dataset);
  }
  for (const auto& [name, path] : map.items()) {
    if (!path.is_string() || name.empty() || name.find_first_of("/\\") != std::string::npos) {
      throw_user_error("-ed/--eval-dataset: \"{}\": {}; each set is \"name\": \"path.jsonl\" with a name without slashes",
                       name, path.dump());
    }
    sets.emplace_back(name, path.get<std::string>());
  }
  return sets;
}

}  // namespace rlcpp
