// The settings table and run files: every field of ChatLearn's configuration reference has a fate
// (and a run file using all of them loads, each mapped value landing where it should), refusals
// name the plan for the feature, enum settings take their help from their tables, and the README's
// ChatLearn table is the one the code prints.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "rl/chatlearn_fields.h"
#include "rl/run_config.h"
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
  const fs::path seed = kSource / ".." / "shared" / "seeds" / "chatlearn-config-reference.txt";
  if (!fs::exists(seed)) GTEST_SKIP() << seed << " is not here (shared/ sits beside the checkout)";
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
  EXPECT_EQ(c.num_episodes, 2);
  EXPECT_EQ(c.train_batch_size, 2);        // sample_per_episode 16 / G 8
  EXPECT_EQ(c.train_minibatch_size, 1);    // train_global_batch_size 8 / G 8
  EXPECT_EQ(c.train_microbatch_size, 4);
  EXPECT_EQ(c.inference_microbatch_size, 2);  // runtime's 2; the model block's -1 leaves it
  EXPECT_EQ(c.save_interval, 5);
  EXPECT_EQ(c.log_interval, 2);
  EXPECT_EQ(c.dataset, "train.jsonl");
  EXPECT_EQ(c.max_checkpoints, 3);
  EXPECT_TRUE(c.algo.dynamic_batching);    // stream_data_loader_type: dynamic
  EXPECT_EQ(c.sync_bucket_mb, 50);
  EXPECT_EQ(c.param_sync_comm_type, SyncMode::kP2p);
  EXPECT_EQ(c.consumed_samples, 4);
  EXPECT_EQ(c.project, "chatlearn-run");
  EXPECT_EQ(c.save_dir, "/tmp/chatlearn-out");
  EXPECT_EQ(c.num_trainers, 1);            // num_replica
  EXPECT_EQ(c.sync_frequency, 1);
  EXPECT_TRUE(c.ranking);
  EXPECT_EQ(c.min_prompt_length, 3);
  EXPECT_EQ(c.model, "model-dir");
}

TEST(ChatLearnFields, RefusedFeaturesNameTheirPlanAndOffValuesPass) {
  EXPECT_THROW_MSG(load("model:\n  lora:\n    enable_lora: true\n"), UserError, "lora.enable_lora = true", "LoRA",
                   "issue 19", "set it to false");
  EXPECT_THROW_MSG(load("model:\n  lora:\n    lora_dim: 16\n"), UserError, "lora.lora_dim = 16", "issue 19");
  EXPECT_THROW_MSG(load("model:\n  zero_size: 2\n"), UserError, "zero_size = 2", "issue 22");
  EXPECT_THROW_MSG(load("model:\n  tensor_model_parallel_size: 2\n"), UserError, "issue 23");
  EXPECT_THROW_MSG(load("model:\n  offload_weights: true\n"), UserError, "offload_weights", "issue 25");
  EXPECT_THROW_MSG(load("runtime:\n  max_relay_episode: -1\n"), UserError, "max_relay_episode", "issue 17");
  EXPECT_THROW_MSG(load("runtime:\n  cpu_schedule_strategy: ROUND\n"), UserError, "PACK or SPREAD", "--map-by");
  EXPECT_THROW_MSG(load("runtime:\n  stream_data_loader_type: streaming\n"), UserError, "use fixed or dynamic");
  EXPECT_THROW_MSG(load("runtime:\n  no_such_field: 1\n"), UserError, "unknown setting \"no_such_field\"");
  EXPECT_NO_THROW(load("model:\n  lora:\n    enable_lora: false\n  offload_weights: no\n  zero_size: 1\n"));
  EXPECT_FALSE(load("runtime:\n  stream_data_loader_type: fixed\n").algo.dynamic_batching);
}

TEST(ChatLearnFields, TheReadmeTableIsTheOneTheCodePrints) {
  const std::string readme = read_text(kSource / "README.md");
  EXPECT_NE(readme.find(chatlearn_fields_markdown()), std::string::npos)
      << "README.md's ChatLearn table is out of date: paste `rlcpp train --chatlearn-fields` into it";
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
  EXPECT_EQ(load("train:\n  lr_schedule: cosine\n").optimizer.lr_schedule, LrSchedule::kCosine);
  EXPECT_EQ(load("runtime:\n  dtype: bf16\n").dtype, "bfloat16");  // aliases are stored by their name
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
