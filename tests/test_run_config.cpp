// The settings table and run files: every field of ChatLearn's configuration reference has a fate
// (and a run file using all of them loads, each mapped value landing where it should), refusals
// name the plan for the feature, enum settings take their help from their tables, and docs/configuration.md's
// ChatLearn table is the one the code prints.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "rl/config/chatlearn_fields.h"
#include "rl/rollout/rollout.h"
#include "rl/config/run_config.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
using namespace rlcpp::testing;

namespace {

const fs::path kSource = RLCPP_SOURCE_DIR;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

RunConfig load(const std::string& yaml) {
  TempDir dir;
  const fs::path file = dir / "run.yaml";
  std::ofstream(file) << yaml;
  RawSettings raw;
  read_run_file(file, raw);
  return resolve_run_config(raw, /*check_files=*/false);
}

}  // namespace

TEST(ChatLearnFields, EveryFieldOfTheReferenceHasAFate) {
  const fs::path seed = kSource / "docs" / "reference" / "chatlearn-config-reference.txt";
  ASSERT_TRUE(fs::exists(seed)) << seed << " is missing: the repository keeps ChatLearn's config reference there";
  // "name: type = default" or "name = default", under "class chatlearn.utils.arguments.X".
  const std::regex field(R"(^([a-z_][a-z0-9_]*)(: [^=]+)? = .*)"), section(R"(^class chatlearn\.utils\.arguments\.(\w+))");
  std::istringstream in(read_text(seed));
  std::string line, current;
  int n = 0;
  for (std::smatch m; std::getline(in, line);) {
    if (std::regex_match(line, m, section)) current = m[1];
    if (!std::regex_match(line, m, field)) continue;
    const std::string prefix = current == "LoraConfig" ? "lora." : current == "BatchGenerationConfig" ? "batch_generation." : "";
    const std::string name = prefix + m[1].str();
    if (m[2].str().find("Config") != std::string::npos) {  // a nested block (lora:, batch_generation:)
      EXPECT_NE(find_chatlearn_field(name + (name == "lora" ? ".enable_lora" : ".ranking")), nullptr) << name;
      continue;
    }
    const ChatLearnField* f = find_chatlearn_field(name);
    ASSERT_NE(f, nullptr) << current << "." << name << " has no fate in chatlearn_fields()";
    EXPECT_NE(f->section.find(current), std::string::npos) << name << ": " << f->section << " vs " << current;
    if (f->fate == FieldFate::kImplemented || f->fate == FieldFate::kMapped) {
      EXPECT_NE(find_setting(f->setting), nullptr) << name << " -> " << f->setting;
    } else {
      EXPECT_FALSE(f->note.empty()) << name << " is refused or ignored without saying why";
    }
    ++n;
  }
  EXPECT_GE(n, 60) << "the reference lists about 65 fields; the pattern above stopped matching them";
}

TEST(ChatLearnFields, ARunFileUsingEveryFieldLoadsAndMapsTheValues) {
  const RunConfig c = load(read_text(kSource / "tests" / "data" / "chatlearn_all_fields.yaml"));
  EXPECT_EQ(c.runtime.num_episodes, 2);
  EXPECT_EQ(c.train.train_batch_size, 2);        // sample_per_episode 16 / G 8
  EXPECT_EQ(c.train.train_minibatch_size, 1);    // train_global_batch_size 8 / G 8
  EXPECT_EQ(c.train.train_microbatch_size, 4);
  EXPECT_EQ(c.rollout.inference_microbatch_size, 2);  // runtime's 2; the model block's -1 leaves it
  EXPECT_EQ(c.logging.save_interval, 5);
  EXPECT_EQ(c.logging.log_interval, 2);
  EXPECT_EQ(c.runtime.dataset, "train.jsonl");
  EXPECT_EQ(c.logging.max_checkpoints, 3);
  EXPECT_TRUE(c.algo.dynamic_batching);    // stream_data_loader_type: dynamic
  EXPECT_EQ(c.parallel.sync_bucket_mb, 50);
  EXPECT_EQ(c.parallel.param_sync_comm_type, SyncMode::kP2p);
  EXPECT_EQ(c.runtime.consumed_samples, 4);
  EXPECT_EQ(c.logging.project, "chatlearn-run");
  EXPECT_EQ(c.logging.save_dir, "/tmp/chatlearn-out");
  EXPECT_EQ(c.parallel.num_trainers, 1);            // num_replica
  EXPECT_EQ(c.staleness.sync_frequency, 1);
  EXPECT_TRUE(c.rollout.ranking);
  EXPECT_EQ(c.rollout.min_prompt_length, 3);
  EXPECT_EQ(c.model.path, "model-dir");
}

TEST(ChatLearnFields, RefusedFeaturesNameTheirPlanAndOffValuesPass) {
  EXPECT_THROW_MSG(load("model:\n  zero_size: 2\n"), UserError, "-zero/--zero-stage 3", "the colocated mode has one trainer");
  EXPECT_EQ(load("runtime:\n  num_trainers: 2\n  num_inferencers: 2\nmodel:\n  zero_size: 2\n").parallel.zero, 3);
  EXPECT_EQ(load("model:\n  zero_size: 1\n").parallel.zero, 0);
  EXPECT_EQ(load("model:\n  tensor_model_parallel_size: 2\n").parallel.tp, 2);  // the trainer's (--train-tp)
  EXPECT_EQ(load("model:\n  tensor_model_parallel_size: null\n").parallel.tp, 1);
  EXPECT_THROW_MSG(load("model:\n  offload_weights: true\n"), UserError, "offload_weights", "issue 25");
  EXPECT_THROW_MSG(load("runtime:\n  cpu_schedule_strategy: ROUND\n"), UserError, "PACK or SPREAD", "--map-by");
  EXPECT_THROW_MSG(load("runtime:\n  stream_data_loader_type: streaming\n"), UserError, "use fixed or dynamic");
  EXPECT_THROW_MSG(load("runtime:\n  no_such_field: 1\n"), UserError, "unknown setting \"no_such_field\"");
  EXPECT_NO_THROW(load("model:\n  lora:\n    enable_lora: false\n  offload_weights: no\n  zero_size: 1\n"));
  EXPECT_FALSE(load("runtime:\n  stream_data_loader_type: fixed\n").algo.dynamic_batching);
}

TEST(ChatLearnFields, LoraConfigMapsOntoTheLoraSettings) {
  const RunConfig on = load("model:\n  lora:\n    enable_lora: true\n");
  EXPECT_EQ(on.model.lora.rank, 8);  // ChatLearn's default lora_dim
  EXPECT_EQ(on.model.lora.scaling(), 1.0);
  EXPECT_TRUE(on.model.lora.targets.empty());  // all linear layers
  const RunConfig full = load("model:\n  lora:\n    enable_lora: true\n    lora_dim: 16\n    lora_scaling: 2.0\n"
                              "    lora_dropout: 0.1\n    column_only_qkv: true\n    part_module_name: layers.0.\n"
                              "    lora_layer: ColumnParallelLinear,Embedding,LinearLayer,RowParallelLinear,VocabParallelEmbedding\n");
  EXPECT_EQ(full.model.lora.rank, 16);
  EXPECT_EQ(full.model.lora.alpha, 32.0);
  EXPECT_EQ(full.model.lora.scaling(), 2.0);
  EXPECT_EQ(full.model.lora.dropout, 0.1);
  EXPECT_EQ(full.model.lora.targets, (std::vector<std::string>{"q_proj", "k_proj", "v_proj"}));
  EXPECT_EQ(full.model.lora.name_scope, "layers.0.");
  EXPECT_TRUE(full.model.lora.adapts("model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(full.model.lora.adapts("model.layers.0.self_attn.o_proj"));
  EXPECT_FALSE(full.model.lora.adapts("model.layers.1.self_attn.q_proj"));
  EXPECT_FALSE(load("model:\n  lora:\n    enable_lora: false\n    lora_dim: 16\n").model.lora.enabled());
  EXPECT_THROW_MSG(load("model:\n  lora:\n    enable_lora: true\n    lora_layer: Embedding\n"), UserError, "lora_layer");
  EXPECT_THROW_MSG(load("model:\n  lora_rank: 8\n  lora_alpha: 16\n  lora:\n    lora_scaling: 2\n"), UserError,
                   "lora_scaling", "lora_alpha");
  // The printed configuration reads back to the same adapters.
  const RunConfig again = load(run_config_yaml(full));
  EXPECT_EQ(again.model.lora.rank, 16);
  EXPECT_EQ(again.model.lora.scaling(), 2.0);
  EXPECT_EQ(again.model.lora.targets, full.model.lora.targets);
}

TEST(ChatLearnFields, TheDocsTableIsTheOneTheCodePrints) {
  const std::string page = read_text(kSource / "docs" / "configuration.md");
  EXPECT_NE(page.find(chatlearn_fields_markdown()), std::string::npos)
      << "docs/configuration.md's ChatLearn table is out of date: paste `rlcpp train --chatlearn-fields` into it";
}

TEST(RunSettings, EnumSettingsTakeTheirNamesAndHelpFromTheTable) {
  // The drift the tables remove: help naming a value the parser rejects.
  const Setting* adv = find_setting("algorithm.advantage_estimator");
  ASSERT_NE(adv, nullptr);
  for (const auto& e : advantage_estimators().entries()) {
    EXPECT_NE(adv->help.find(std::string(e.name)), std::string::npos) << e.name;
    EXPECT_NE(adv->help.find(std::string(e.help)), std::string::npos) << e.help;
  }
  EXPECT_EQ(adv->help.find("reinforce_pp |"), std::string::npos);
  EXPECT_EQ(load("algorithm:\n  kl_estimator: k2\n").algo.loss.kl_estimator, KlEstimator::kK2);
  EXPECT_EQ(load("algorithm:\n  kl_estimator: low_var_kl\n").algo.loss.kl_estimator, KlEstimator::kK3);
  EXPECT_EQ(load("train:\n  lr_schedule: cosine\n").train.optimizer.lr_schedule, LrSchedule::kCosine);
  EXPECT_EQ(load("runtime:\n  dtype: bf16\n").runtime.dtype, "bfloat16");  // aliases are stored by their name
  EXPECT_THROW_MSG(load("train:\n  lr_schedule: step\n"), UserError, "train.lr_schedule", "unknown learning-rate schedule \"step\"",
                   "constant, linear, cosine");
  // Every enum setting's printed value parses back (the --print-config round trip).
  const RunConfig defaults;
  for (const auto& s : run_settings()) {
    const Json v = s.get(defaults);
    if (!s.converts_to.empty()) continue;
    RunConfig c;
    RawSettings raw;
    EXPECT_NO_THROW(s.apply(c, v, s.name, raw)) << s.name << " = " << v.dump();
  }
}

TEST(RunSettings, AlgorithmKnobsAreReachable) {
  const RunConfig c = load(
      "algorithm:\n  algo: GSPO\n  dual_clip: 3\n  entropy_coeff: 0.001\n  kl_clamp: 5\n  adv_eps: 1e-6\n"
      "  adv_std: biased\n  tis_cap: 2\n  tis_level: sequence\n  skip_threshold: 10\n  skip_mode: sequence_geomean\n"
      "runtime:\n  max_relay_episode: -1\n  relay_episode_offset: 2\n");
  EXPECT_EQ(c.algo.name, "GSPO");
  EXPECT_EQ(c.algo.loss.ratio_level, ImportanceLevel::kSequence);
  ASSERT_TRUE(c.algo.loss.clip_ratio_c.has_value());
  EXPECT_DOUBLE_EQ(*c.algo.loss.clip_ratio_c, 3.0);
  EXPECT_DOUBLE_EQ(c.algo.loss.entropy_coef, 0.001);
  EXPECT_DOUBLE_EQ(c.algo.loss.kl_clamp, 5.0);
  EXPECT_DOUBLE_EQ(c.algo.advantage.eps, 1e-6);
  EXPECT_FALSE(c.algo.advantage.std_unbiased);
  EXPECT_DOUBLE_EQ(c.algo.loss.tis_cap, 2.0);
  EXPECT_EQ(c.algo.loss.tis_level, ImportanceLevel::kSequence);
  EXPECT_DOUBLE_EQ(c.algo.loss.skip_threshold, 10.0);
  EXPECT_EQ(c.algo.loss.skip_mode, SkipMode::kSequenceGeoMean);
  EXPECT_EQ(c.staleness.max_relay_episode, -1);
  EXPECT_EQ(c.staleness.relay_episode_offset, 2);
  // The preset comes first, single settings over it; the reference's names and aliases load.
  EXPECT_EQ(load("algorithm:\n  algo: REINFORCE_PP\n").algo.name, "REINFORCE_PPB");
  EXPECT_FALSE(load("algorithm:\n  algo: DAPO\n  dual_clip: 0\n").algo.loss.clip_ratio_c.has_value());
  EXPECT_DOUBLE_EQ(load("algorithm:\n  clip_ratio_c: 4\n").algo.loss.clip_ratio_c.value_or(0), 4.0);
  EXPECT_THROW_MSG(load("algorithm:\n  dual_clip: 0.5\n"), UserError, "algorithm.dual_clip", "must exceed 1");
  EXPECT_THROW_MSG(load("algorithm:\n  tis_level: sample\n"), UserError, "algorithm.tis_level", "token, sequence");
  EXPECT_THROW_MSG(load("staleness:\n  max_relay_episode: -2\n"), UserError, "staleness.max_relay_episode",
                   "below the minimum -1");
  // A key in the group it had before the groups followed the option structs: read the same, and
  // an error names the place the file gave.
  EXPECT_EQ(load("runtime:\n  max_relay_episode: 3\n").staleness.max_relay_episode, 3);
  EXPECT_THROW_MSG(load("runtime:\n  max_relay_episode: -2\n"), UserError, "runtime.max_relay_episode",
                   "below the minimum -1");
  EXPECT_THROW_MSG(load("algorithm:\n  algo: TRPO\n"), UserError, "unknown algorithm", "REINFORCE_PPB", "GSPO", "PPO");
  // PPO's knobs, under their own names and verl's and OpenRLHF's.
  const RunConfig ppo = load("algorithm:\n  algo: PPO\n  gamma: 0.99\n  lambd: 0.9\n  cliprange_value: 0.2\n"
                             "  kl_coeff: 0.05\n  use_kl_in_reward: true\ntrain:\n  critic_lr: 2.0e-5\n  critic_warmup_steps: 3\n");
  EXPECT_TRUE(ppo.algo.uses_critic());
  EXPECT_DOUBLE_EQ(ppo.algo.ppo.gamma, 0.99);
  EXPECT_DOUBLE_EQ(ppo.algo.ppo.lam, 0.9);
  EXPECT_DOUBLE_EQ(ppo.algo.ppo.value_clip, 0.2);
  EXPECT_TRUE(ppo.algo.ppo.kl_in_reward);
  EXPECT_DOUBLE_EQ(ppo.train.critic.lr, 2e-5);
  EXPECT_EQ(ppo.train.critic.warmup_steps, 3);
  EXPECT_THROW_MSG(load("algorithm:\n  algo: PPO\n  gamma: 1.5\n"), UserError, "algorithm.gamma", "in [0, 1]");
  EXPECT_THROW_MSG(load("algorithm:\n  lam: 0.9\n"), UserError, "--lam 0.9", "settings of a critic, which -a GRPO");
  // -a's help lists every preset with its settings.
  const Setting* algo = find_setting("algorithm.algo");
  ASSERT_NE(algo, nullptr);
  for (const char* name : {"GRPO:", "DAPO:", "DR_GRPO:", "RLOO:", "REINFORCE_PPB (alias REINFORCE_PP):", "GSPO:", "PPO:"}) {
    EXPECT_NE(algo->help.find(name), std::string::npos) << name << " in " << algo->help;
  }
}

TEST(RunSettings, EngineSchedulingReachesTheEngine) {
  // vLLM's names for the scheduler's knobs, into the EngineConfig every rollout path builds.
  const EngineConfig defaults = run_engine_config(load(""));
  EXPECT_TRUE(defaults.scheduler.chunked_prefill);
  EXPECT_EQ(defaults.scheduler.max_num_batched_tokens, 512);
  const EngineConfig e = run_engine_config(
      load("rollout:\n  max_num_seqs: 16\n  max_num_batched_tokens: 64\n  enable_chunked_prefill: false\n"));
  EXPECT_EQ(e.scheduler.max_num_seqs, 16);
  EXPECT_EQ(e.scheduler.max_num_batched_tokens, 64);
  EXPECT_FALSE(e.scheduler.chunked_prefill);
  EXPECT_THROW_MSG(load("rollout:\n  max_num_batched_tokens: 0\n"), UserError, "rollout.max_num_batched_tokens",
                   "below the minimum 1");
}

TEST(RunSettings, NumbersMustBeFiniteAndInRange) {
  EXPECT_THROW_MSG(load("train:\n  learning_rate: .inf\n"), UserError, "train.learning_rate", "expected a finite number");
  EXPECT_THROW_MSG(load("train:\n  weight_decay: nan\n"), UserError, "train.weight_decay", "expected a finite number");
  EXPECT_THROW_MSG(load("algorithm:\n  kl_coeff: nan\n"), UserError, "algorithm.kl_coeff", "finite");
  EXPECT_THROW_MSG(load("rollout:\n  temperature: nan\n"), UserError, "rollout.temperature", "finite");
  EXPECT_THROW_MSG(load("algorithm:\n  clip_eps_low: 2\n"), UserError, "algorithm.clip_eps_low", "2 must be in [0, 1)");
  EXPECT_THROW_MSG(load("train:\n  learning_rate: -1e-6\n"), UserError, "train.learning_rate", "must be >= 0");
  EXPECT_THROW_MSG(load("rollout:\n  top_p: 0\n"), UserError, "rollout.top_p", "must be in (0, 1]");
  EXPECT_THROW_MSG(load("algorithm:\n  kl_clamp: 0\n"), UserError, "algorithm.kl_clamp", "must be > 0");
  EXPECT_THROW_MSG(load("train:\n  min_lr_ratio: 1.5\n"), UserError, "train.min_lr_ratio", "in [0, 1]");
  EXPECT_THROW_MSG(load("algorithm:\n  filter_range: [0.1, .nan]\n"), UserError, "algorithm.filter_range", "finite");
  EXPECT_NO_THROW(load("train:\n  learning_rate: 0\nalgorithm:\n  clip_eps_low: 0.999\n"));
}

// A checkpoint written before a setting existed records no value for it: it resumes under the
// setting's default (the behaviour it had), and a run asking for another value is refused.
TEST(RunSettings, ResumeTreatsASettingTheCheckpointPredatesAsItsDefault) {
  const RunConfig given = load("rollout:\n  temperature: 0.7\n");
  nlohmann::ordered_json recorded = run_config_json(given);
  EXPECT_TRUE(incompatible_settings(recorded, given).empty());
  recorded["rollout"].erase("overflow");
  EXPECT_TRUE(incompatible_settings(recorded, given).empty());
  const auto differing = incompatible_settings(recorded, load("rollout:\n  temperature: 0.7\n  overflow: drop\n"));
  ASSERT_EQ(differing.size(), 1u);
  EXPECT_EQ(differing[0], "rollout.overflow: (absent: default \"truncate_left\") -> \"drop\"");
  EXPECT_EQ(incompatible_settings(recorded, load("rollout:\n  temperature: 0.9\n")).size(), 1u);
}

// The YAML groups are RunConfig's members, printed in its order; a checkpoint's configuration
// recorded when most settings sat under runtime: and rollout: resumes as one recorded now.
TEST(RunSettings, GroupsFollowTheOptionStructsAndOldRecordsStillResume) {
  EXPECT_EQ(run_groups(), (std::vector<std::string>{"runtime", "parallel", "staleness", "model", "rollout", "remote",
                                                    "reward", "episode", "algorithm", "train", "eval", "logging"}));
  const RunConfig given = load("parallel:\n  num_trainers: 2\n  num_inferencers: 2\nstaleness:\n  n_behind: 1\n"
                               "remote:\n  rollout_timeout: 30\nreward:\n  reward_type: answer_line\n"
                               "eval:\n  eval_n: 4\nrollout:\n  kv_cache_mb: 64\n");
  EXPECT_EQ(given.parallel.trainers(), 2);
  EXPECT_EQ(given.staleness.n_behind, 1);
  EXPECT_EQ(given.remote.timeout, 30);
  EXPECT_EQ(given.reward.type, RewardType::kAnswerLine);
  EXPECT_EQ(given.eval.n, 4);
  EXPECT_EQ(given.rollout.engine.kv_cache_mb, 64);
  const auto now = run_config_json(given);
  std::vector<std::string> printed;
  for (const auto& [group, entries] : now.items()) printed.push_back(group);
  EXPECT_EQ(printed, run_groups());
  // The same settings as an old checkpoint recorded them.
  nlohmann::ordered_json old = now;
  auto move = [&](const std::string& from, const std::string& to, const std::string& key) {
    old[to][key] = old[from][key];
    old[from].erase(key);
  };
  for (const char* key : {"num_trainers", "num_inferencers", "tensor_parallel_size", "zero_stage"}) move("parallel", "runtime", key);
  move("staleness", "runtime", "max_relay_episode");
  move("reward", "rollout", "reward_type");
  move("rollout", "model", "kv_cache_mb");
  for (const char* group : {"parallel", "staleness", "reward"}) {
    if (old[group].empty()) old.erase(group);
  }
  EXPECT_TRUE(incompatible_settings(old, given).empty());
  old["rollout"]["reward_type"] = "boxed";  // a real difference is still found under its old group
  const auto differing = incompatible_settings(old, given);
  ASSERT_EQ(differing.size(), 1u);
  EXPECT_EQ(differing[0], "reward.reward_type: \"boxed\" -> \"answer_line\"");
}

// A resume onto another trainer count keeps the global batch (-t × -tbs, -t × -tMbs), not -tbs.
TEST(RunSettings, ResumeOntoAnotherTrainerCountKeepsTheGlobalBatch) {
  auto layout = [](int t, int tbs) {
    return load(fmt::format("runtime:\n  num_trainers: {0}\n  num_inferencers: {0}\ntrain:\n  train_batch_size: {1}\n"
                            "  train_minibatch_size: {1}\n", t, tbs));
  };
  const auto recorded = run_config_json(layout(2, 3));
  EXPECT_TRUE(incompatible_settings(recorded, layout(3, 2)).empty());
  EXPECT_TRUE(incompatible_settings(recorded, layout(1, 6)).empty());
  const auto differing = incompatible_settings(recorded, layout(3, 3));
  ASSERT_EQ(differing.size(), 2u);
  EXPECT_EQ(differing[0], "train.train_batch_size × the data-parallel replicas (the global batch): 6 -> 9");
}

// Under pipeline stages -tbs is per replica of --pp ranks: a resume onto another --pp keeps
// -t / --pp × -tbs.
TEST(RunSettings, ResumeOntoAnotherPipelineSizeKeepsTheGlobalBatch) {
  auto layout = [](int t, int pp, int tbs) {
    return load(fmt::format("runtime:\n  num_trainers: {0}\n  num_inferencers: 2\nparallel:\n  pipeline_parallel_size: {1}\n"
                            "train:\n  train_batch_size: {2}\n  train_minibatch_size: {2}\n", t, pp, tbs));
  };
  const auto recorded = run_config_json(layout(2, 2, 3));
  EXPECT_TRUE(incompatible_settings(recorded, layout(3, 3, 3)).empty());
  EXPECT_TRUE(incompatible_settings(recorded, layout(1, 1, 3)).empty());
  EXPECT_TRUE(incompatible_settings(recorded, layout(4, 2, 1)).size() == 2u);  // two replicas of 1 prompt: 2, not 3
}

TEST(RunSettings, ProjectIsOneFolderName) {
  for (const char* bad : {"../../escape", "a/b", "\"\"", ".", ".."}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW_MSG(load(std::string("logging:\n  project: ") + bad + "\n"), UserError, "-p/--project", "one folder name");
  }
  EXPECT_EQ(load("logging:\n  project: my-run.2\n").logging.project, "my-run.2");
}

TEST(RunSettings, RoundsThatCannotFitInMemoryAreRefused) {
  EXPECT_THROW_MSG(load("rollout:\n  num_generations: 100000000\n"), UserError, "-g 100000000", "GiB", "lower -g");
  EXPECT_NO_THROW(load("rollout:\n  num_generations: 64\n"));
}

// -zero and ColossalChat's plugin_config form of it (a JSON map, as a flag or in a run file).
TEST(RunSettings, ZeroStageAndThePluginConfigForm) {
  const std::string dist = "parallel:\n  num_trainers: 2\n  num_inferencers: 2\n";
  EXPECT_EQ(load(dist + "  zero_stage: 2\n").parallel.zero, 2);
  const auto c = load(dist + "  plugin_config: '{\"zero_stage\": 1, \"tp_size\": 1, \"pp_size\": 1, \"max_norm\": 0.5, "
                             "\"microbatch_size\": 2}'\n");
  EXPECT_EQ(c.parallel.zero, 1);
  EXPECT_EQ(c.train.optimizer.max_grad_norm, 0.5);
  EXPECT_EQ(load(dist + "  plugin_config:\n    zero_stage: 2\n").parallel.zero, 2);
  EXPECT_THROW_MSG(load(dist + "  zero_stage: 1\n  plugin_config: '{\"zero_stage\": 2}'\n"), UserError, "zero_stage",
                   "give it once");
  EXPECT_THROW_MSG(load(dist + "  plugin_config: '{\"zero_stag\": 2}'\n"), UserError, "plugin_config key \"zero_stag\"");
  EXPECT_EQ(load(dist + "  plugin_config: '{\"tp_size\": 2}'\n").parallel.tp, 2);  // one replica of the 2 trainers
  EXPECT_THROW_MSG(load(dist + "  plugin_config: '{\"tp_size\": 3}'\n"), UserError, "-t 2 --train-tp 3",
                   "make -t a multiple of --train-tp");
  EXPECT_THROW_MSG(load(dist + "  plugin_config: '[1]'\n"), UserError, "parallel.plugin_config", "expected a map");
  EXPECT_EQ(load(dist + "  zero_stage: 3\n").parallel.zero, 3);
  EXPECT_THROW_MSG(load(dist + "  zero_stage: 4\n"), UserError, "a ZeRO stage is 0");
  EXPECT_THROW_MSG(load("runtime:\n  zero_stage: 1\n"), UserError, "the colocated mode has one trainer");
  EXPECT_EQ(load("runtime:\n  plugin_config: null\n").parallel.zero, 0);  // as printed configurations show it
}
