// Prompt datasets: the reference format, errors naming file and line, --skip-bad-lines, the
// shuffling cursor and its exact save/restore.
#include <fstream>

#include "io/prompt_dataset.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
using rlcpp::testing::TempDir;

namespace {
std::filesystem::path write_lines(const TempDir& dir, const std::vector<std::string>& lines) {
  const auto path = dir / "data.jsonl";
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path;
}
}  // namespace

TEST(PromptDataset, ReferenceFormatObjectOrList) {
  TempDir dir;
  auto path = write_lines(dir, {R"({"messages": {"role": "user", "content": "1+1?"}, "gt_answer": "2", "id": 7})", "",
                                R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], "gt_answer": 3})"});
  auto ds = load_prompt_dataset(path);
  ASSERT_EQ(ds.records.size(), 2u);
  EXPECT_EQ(ds.records[0].messages.size(), 1u);
  EXPECT_EQ(ds.records[0].gt_answer, "2");
  EXPECT_EQ(ds.records[0].metadata["id"], 7);
  EXPECT_EQ(ds.records[1].messages.size(), 2u);
  EXPECT_EQ(ds.records[1].gt_answer, "3");
  EXPECT_EQ(ds.records[1].line, 3);
}

TEST(PromptDataset, TheBundledGsm8kLoads) {
  const auto dir = std::filesystem::path(RLCPP_SOURCE_DIR) / "examples" / "gsm8k";
  auto ds = load_prompt_dataset(dir / "test.jsonl");
  EXPECT_EQ(ds.records.size(), 1319u);
  EXPECT_EQ(load_prompt_dataset(dir / "train.jsonl").records.size(), 7473u);
  EXPECT_EQ(ds.records[0].gt_answer, "18");
  EXPECT_TRUE(ds.records[0].metadata.contains("solution"));
}

TEST(PromptDatasetErrors, NameFileAndLine) {
  TempDir dir;
  const std::string good = R"({"messages": {"role": "user", "content": "q"}, "gt_answer": "1"})";
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {good, "{oops"})), UserError, "data.jsonl:2", "not valid JSON",
                   "--skip-bad-lines");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {R"({"gt_answer": "1"})"})), UserError, "data.jsonl:1",
                   "missing \"messages\"");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {R"({"messages": {"role": "user", "content": "q"}})"})),
                   UserError, "missing \"gt_answer\"");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {R"({"messages": {"role": "user", "content": 5}, "gt_answer": "1"})"})),
                   UserError, "messages[0]");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {R"({"messages": [], "gt_answer": "1"})"})), UserError,
                   "non-empty list");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {R"({"messages": {"role": "user", "content": "q"}, "gt_answer": [1]})"})),
                   UserError, "\"gt_answer\" must be a string or a number");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {"", "  "})), UserError, "no usable records");
  const std::string huge = R"({"messages": {"role": "user", "content": ")" + std::string(5 << 20, 'x') + R"("}, "gt_answer": "1"})";
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {good, huge})), UserError, "data.jsonl:2", "5.0 MiB", "over the 4 MiB");
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {good, R"({"messages": [{"role": "narrator", "content": "q"}], "gt_answer": "1"})"})),
                   UserError, "data.jsonl:2", "messages[0] has role \"narrator\"", "system, user, assistant and tool");
  EXPECT_THROW_MSG(load_prompt_dataset(dir / "missing.jsonl"), UserError, "missing.jsonl");
}

TEST(PromptDatasetErrors, SkipBadLinesCounts) {
  TempDir dir;
  const std::string good = R"({"messages": {"role": "user", "content": "q"}, "gt_answer": "1"})";
  DatasetOptions options;
  options.skip_bad_lines = true;
  auto ds = load_prompt_dataset(write_lines(dir, {good, "{oops", R"({"gt_answer": 1})", good}), options);
  EXPECT_EQ(ds.records.size(), 2u);
  EXPECT_EQ(ds.n_bad_lines, 2);
  EXPECT_EQ(ds.records[1].line, 4);
  EXPECT_THROW_MSG(load_prompt_dataset(write_lines(dir, {"{oops"}), options), UserError, "no usable records");
}

TEST(PreferenceDataset, TrlFormsBecomeWholeConversations) {
  TempDir dir;
  const auto path = write_lines(dir, {
      // explicit prompt, text
      R"({"prompt": "Q1", "chosen": "good", "rejected": "bad", "margin": 0.5})",
      // explicit prompt, conversational (the "messages" spelling)
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q2"}], "chosen": [{"role": "assistant", "content": "c"}], "rejected": {"role": "assistant", "content": "r"}})",
      // implicit prompt: each side the whole conversation
      R"({"chosen": [{"role": "user", "content": "Q3"}, {"role": "assistant", "content": "c3"}], "rejected": [{"role": "user", "content": "Q3"}, {"role": "assistant", "content": "r3"}]})"});
  const auto ds = load_preference_dataset(path);
  ASSERT_EQ(ds.records.size(), 3u);
  using OJ = nlohmann::ordered_json;
  EXPECT_EQ(ds.records[0].chosen, OJ::parse(R"([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "good"}])"));
  EXPECT_EQ(ds.records[0].rejected, OJ::parse(R"([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "bad"}])"));
  EXPECT_EQ(ds.records[0].margin, 0.5);
  EXPECT_EQ(ds.records[1].chosen.size(), 3u);
  EXPECT_EQ(ds.records[1].rejected.back()["content"], "r");
  EXPECT_EQ(ds.records[1].margin, 0.0);
  EXPECT_EQ(ds.records[2].chosen.back()["content"], "c3");
  EXPECT_EQ(ds.records[2].line, 3);
}

TEST(PreferenceDatasetErrors, NameFileLineAndTheFix) {
  TempDir dir;
  EXPECT_THROW_MSG(load_preference_dataset(write_lines(dir, {R"({"prompt": "Q", "chosen": "c"})"})), UserError,
                   "data.jsonl:1: missing \"rejected\"");
  EXPECT_THROW_MSG(load_preference_dataset(write_lines(dir, {R"({"chosen": "c", "rejected": "r"})"})), UserError,
                   "\"chosen\" is text but the record has no \"prompt\"");
  EXPECT_THROW_MSG(load_preference_dataset(write_lines(dir, {R"({"prompt": "Q", "chosen": [{"role": "user", "content": "c"}], "rejected": "r"})"})),
                   UserError, "\"chosen\" must end with the assistant's reply");
  EXPECT_THROW_MSG(load_preference_dataset(write_lines(dir, {R"({"prompt": "Q", "chosen": "c", "rejected": "r", "margin": "1"})"})),
                   UserError, "\"margin\" must be a number");
  EXPECT_THROW_MSG(load_preference_dataset(write_lines(dir, {R"({"prompt": 3, "chosen": "c", "rejected": "r"})"})), UserError,
                   "\"prompt\" must be an object or a non-empty list");
  // --skip-bad-lines keeps the good ones.
  const auto ds = load_preference_dataset(write_lines(dir, {"{", R"({"prompt": "Q", "chosen": "c", "rejected": "r"})"}), true);
  EXPECT_EQ(ds.records.size(), 1u);
  EXPECT_EQ(ds.n_bad_lines, 1);
}

TEST(DatasetCursor, DeterministicShuffleAndExactRestore) {
  DatasetCursor a(10, 123, true), b(10, 123, true), other_seed(10, 124, true);
  std::vector<int64_t> first, second, third;
  for (int k = 0; k < 25; ++k) first.push_back(a.next());
  for (int k = 0; k < 25; ++k) second.push_back(b.next());
  for (int k = 0; k < 25; ++k) third.push_back(other_seed.next());
  EXPECT_EQ(first, second);
  EXPECT_NE(first, third);
  // Each epoch is a permutation, and epochs differ.
  std::vector<int64_t> epoch0(first.begin(), first.begin() + 10), epoch1(first.begin() + 10, first.begin() + 20);
  EXPECT_NE(epoch0, epoch1);
  std::sort(epoch0.begin(), epoch0.end());
  for (int64_t k = 0; k < 10; ++k) EXPECT_EQ(epoch0[k], k);
  EXPECT_EQ(a.epoch(), 2);
  // Save mid-epoch, restore into a fresh cursor: the continuation is identical.
  DatasetCursor c(10, 123, true);
  for (int k = 0; k < 13; ++k) c.next();
  const auto state = c.state();
  DatasetCursor d(10, 123, true);
  d.restore(state);
  for (int k = 13; k < 25; ++k) EXPECT_EQ(d.next(), first[k]) << k;
  DatasetCursor wrong(11, 123, true);
  EXPECT_THROW_MSG(wrong.restore(state), UserError, "10 records", "11");
  DatasetCursor ordered(4, 1, false);
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(ordered.next(), k % 4);
}
