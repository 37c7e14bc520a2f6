// Prompt datasets in the reference JSONL format: one object per line,
//   {"messages": {"role": "user", "content": ...} | [{"role", "content"}, ...], "gt_answer": "3", ...}
// (a code task carries its tests, "tests" or "test_code", instead of a gt_answer) with any other
// fields kept as metadata; and a cursor that walks it in a seeded shuffled order,
// epoch after epoch, whose position can be saved and restored exactly (for resume).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace rlcpp {

struct PromptRecord {
  nlohmann::ordered_json messages;  // array of {"role", "content"} objects
  std::string gt_answer;
  nlohmann::ordered_json metadata;  // every other field of the line
  int64_t line = 0;                 // 1-based line number in the file
};

// Prompts (RL, evaluation) need "gt_answer"; chats (SFT) need an assistant message instead; open
// prompts (rewarded by a reward model) need neither.
enum class DatasetKind { kPrompts, kChats, kOpenPrompts };

struct DatasetOptions {
  bool skip_bad_lines = false;  // count and warn about malformed lines instead of failing
  DatasetKind kind = DatasetKind::kPrompts;
  // A further check of each record (the reward's: are a code task's tests usable?): throws a
  // UserError saying what is wrong, reported with the file and line like any malformed line.
  std::function<void(const PromptRecord&)> check;
};

struct PromptDataset {
  std::filesystem::path path;
  std::vector<PromptRecord> records;
  int64_t n_bad_lines = 0;  // skipped with skip_bad_lines
};

// Reads a JSONL dataset. A line that is not JSON, lacks "messages"/"gt_answer" or has the wrong
// types is a UserError naming the file and line (or, with skip_bad_lines, a counted warning).
// gt_answer may be a string or a number (numbers are kept as written). Blank lines are ignored.
// A dataset with no usable record is an error.
PromptDataset load_prompt_dataset(const std::filesystem::path& path, const DatasetOptions& options = {});

// A record's message list (`field` names it in errors): one {"role", "content"} object or a
// non-empty list of them, roles those chat templates know; else a UserError naming `where`.
nlohmann::ordered_json parse_messages(const nlohmann::ordered_json& value, const std::string& where, const std::string& field);

// Parses one line; throws UserError naming `where` on a malformed record.
PromptRecord parse_prompt_record(const std::string& line, const std::string& where,
                                 DatasetKind kind = DatasetKind::kPrompts);

// A preference pair in TRL's forms (reward-model training): {"prompt" | "messages", "chosen",
// "rejected"[, "margin"]}, the prompt text or messages, each side the reply's text or its messages;
// or, with no prompt, each side the whole conversation. Both sides end with the assistant's reply.
struct PreferenceRecord {
  nlohmann::ordered_json chosen, rejected;  // the whole conversations, prompt first
  double margin = 0;                        // how far the chosen should score above (TRL's "margin")
  int64_t line = 0;
};

struct PreferenceDataset {
  std::filesystem::path path;
  std::vector<PreferenceRecord> records;
  int64_t n_bad_lines = 0;
};

PreferenceRecord parse_preference_record(const std::string& line, const std::string& where);
// Reads preference pairs as load_prompt_dataset reads prompts (errors name the file and line).
PreferenceDataset load_preference_dataset(const std::filesystem::path& path, bool skip_bad_lines = false);

// Walks indices [0, size) in a shuffled order per epoch, seeded by (seed, epoch), deterministic on
// every platform (mt19937_64 + Fisher-Yates). shuffle = false walks in file order.
class DatasetCursor {
 public:
  DatasetCursor(int64_t size, uint64_t seed, bool shuffle);
  int64_t next();  // the next record index; moves to the next epoch at the end
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // within the epoch
  int64_t consumed() const { return consumed_; }   // in total
  nlohmann::json state() const;
  // Restores a saved state; a state from a dataset of another size or seed is a UserError.
  void restore(const nlohmann::json& state);

 private:
  void reshuffle();
  int64_t size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0, position_ = 0, consumed_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace rlcpp
