#include "io/prompt_dataset.h"

#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <fstream>
#include <random>

#include "util/error.h"

namespace rlcpp {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

OJson parse_messages(const OJson& value, const std::string& where, const std::string& field) {
  OJson list = value.is_object() ? OJson::array({value}) : value;
  if (!list.is_array() || list.empty()) {
    throw_user_error("{}: \"{}\" must be an object or a non-empty list of objects, got {}", where, field, value.type_name());
  }
  for (size_t k = 0; k < list.size(); ++k) {
    const auto& m = list[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      throw_user_error("{}: {}[{}] must be {{\"role\": string, \"content\": string}}, got {}", where, field, k,
                       m.dump().substr(0, 200));
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      throw_user_error("{}: {}[{}] has role \"{}\"; chat templates know system, user, assistant and tool", where, field, k,
                       role.substr(0, 40));
    }
  }
  return list;
}

PromptRecord parse_prompt_record(const std::string& line, const std::string& where, DatasetKind kind) {
  OJson json;
  try {
    json = OJson::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw_user_error("{}: not valid JSON ({})", where, e.what());
  }
  if (!json.is_object()) throw_user_error("{}: expected a JSON object, got {}", where, json.type_name());
  PromptRecord record;
  auto messages = json.find("messages");
  if (messages == json.end()) throw_user_error("{}: missing \"messages\"", where);
  OJson list = parse_messages(*messages, where, "messages");
  record.messages = std::move(list);
  if (kind == DatasetKind::kChats) {
    bool has_assistant = false;
    for (const auto& m : record.messages) has_assistant |= m["role"] == "assistant";
    if (!has_assistant) throw_user_error("{}: no assistant message to learn from (SFT needs {{\"role\": \"assistant\"}})", where);
  }
  auto answer = json.find("gt_answer");
  if (answer == json.end()) {
    const bool code_task = json.contains("tests") || json.contains("test_code");
    if (kind == DatasetKind::kPrompts && !code_task) throw_user_error("{}: missing \"gt_answer\" (or a code task's \"tests\")", where);
  } else if (answer->is_string()) {
    record.gt_answer = answer->get<std::string>();
  } else if (answer->is_number()) {
    record.gt_answer = answer->dump();
  } else {
    throw_user_error("{}: \"gt_answer\" must be a string or a number, got {}", where, answer->type_name());
  }
  record.metadata = OJson::object();
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() != "messages" && it.key() != "gt_answer") record.metadata[it.key()] = it.value();
  }
  return record;
}

namespace {

constexpr size_t kMaxLineBytes = size_t{4} << 20;

// Reads a JSONL file record by record: `parse` (line text, "file:line", line number) for every
// non-blank line. A malformed line is a UserError naming it, or with skip_bad_lines a counted
// warning; returns the count skipped. A file with no usable record is an error.
int64_t read_jsonl(const fs::path& path, bool skip_bad_lines,
                   const std::function<void(const std::string&, const std::string&, int64_t)>& parse) {
  std::ifstream in(path);
  if (!in) throw_user_error("cannot open dataset '{}': no such file or not readable", path.string());
  std::string line;
  int64_t line_no = 0, n_bad = 0, n_good = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_no);
    try {
      // A record is a prompt: a line of megabytes is a broken file (or an attack), not a question.
      if (line.size() > kMaxLineBytes) {
        throw_user_error("{}: the line is {:.1f} MiB, over the {} MiB a record may have", where,
                         static_cast<double>(line.size()) / (1 << 20), kMaxLineBytes >> 20);
      }
      parse(line, where, line_no);
      ++n_good;
    } catch (const UserError& e) {
      if (!skip_bad_lines) {
        throw UserError(std::string(e.what()) + " (fix the line, or pass --skip-bad-lines to skip such lines)");
      }
      ++n_bad;
      if (n_bad <= 5) spdlog::warn("skipping bad line: {}", e.what());
    }
  }
  if (n_bad > 0) spdlog::warn("{}: skipped {} malformed line(s) of {}", path.string(), n_bad, line_no);
  if (n_good == 0) {
    throw_user_error("dataset '{}' has no usable records ({} lines read, {} malformed)", path.string(), line_no, n_bad);
  }
  return n_bad;
}

// One side of a preference record: text is the assistant's reply, a message or list is the
// conversation's tail (or, with no prompt, all of it).
OJson preference_side(const OJson& value, const OJson& prompt, const std::string& where, const std::string& field) {
  OJson side;
  if (value.is_string()) {
    if (prompt.empty()) {
      throw_user_error("{}: \"{}\" is text but the record has no \"prompt\" (or \"messages\"): give the prompt, or "
                       "\"{}\" as the whole conversation (a list of messages)", where, field, field);
    }
    side = OJson::array({{{"role", "assistant"}, {"content", value.get<std::string>()}}});
  } else {
    side = parse_messages(value, where, field);
  }
  OJson whole = prompt;
  for (const auto& m : side) whole.push_back(m);
  if (whole.back()["role"] != "assistant") {
    throw_user_error("{}: \"{}\" must end with the assistant's reply (its last message has role {})", where, field,
                     whole.back()["role"].dump());
  }
  return whole;
}

}  // namespace

PromptDataset load_prompt_dataset(const fs::path& path, const DatasetOptions& options) {
  PromptDataset dataset;
  dataset.path = path;
  dataset.n_bad_lines = read_jsonl(path, options.skip_bad_lines, [&](const std::string& line, const std::string& where,
                                                                     int64_t line_no) {
    PromptRecord record = parse_prompt_record(line, where, options.kind);
    record.line = line_no;
    if (options.check) {
      try {
        options.check(record);
      } catch (const UserError& e) {
        throw_user_error("{}: {}", where, e.what());
      }
    }
    dataset.records.push_back(std::move(record));
  });
  return dataset;
}

PreferenceRecord parse_preference_record(const std::string& line, const std::string& where) {
  OJson json;
  try {
    json = OJson::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw_user_error("{}: not valid JSON ({})", where, e.what());
  }
  if (!json.is_object()) throw_user_error("{}: expected a JSON object, got {}", where, json.type_name());
  for (const char* field : {"chosen", "rejected"}) {
    if (!json.contains(field)) {
      throw_user_error("{}: missing \"{}\" (a preference pair is {{\"prompt\", \"chosen\", \"rejected\"}})", where, field);
    }
  }
  OJson prompt = OJson::array();
  const char* prompt_field = json.contains("prompt") ? "prompt" : json.contains("messages") ? "messages" : nullptr;
  if (prompt_field != nullptr) {
    const OJson& value = json[prompt_field];
    prompt = value.is_string() ? OJson::array({{{"role", "user"}, {"content", value.get<std::string>()}}})
                               : parse_messages(value, where, prompt_field);
  }
  PreferenceRecord record;
  record.chosen = preference_side(json["chosen"], prompt, where, "chosen");
  record.rejected = preference_side(json["rejected"], prompt, where, "rejected");
  if (json.contains("margin")) {
    if (!json["margin"].is_number()) throw_user_error("{}: \"margin\" must be a number, got {}", where, json["margin"].type_name());
    record.margin = json["margin"].get<double>();
  }
  return record;
}

PreferenceDataset load_preference_dataset(const fs::path& path, bool skip_bad_lines) {
  PreferenceDataset dataset;
  dataset.path = path;
  dataset.n_bad_lines = read_jsonl(path, skip_bad_lines, [&](const std::string& line, const std::string& where, int64_t line_no) {
    PreferenceRecord record = parse_preference_record(line, where);
    record.line = line_no;
    dataset.records.push_back(std::move(record));
  });
  return dataset;
}

DatasetCursor::DatasetCursor(int64_t size, uint64_t seed, bool shuffle) : size_(size), seed_(seed), shuffle_(shuffle) {
  RLCPP_CHECK(size > 0, "dataset cursor over {} records", size);
  reshuffle();
}

void DatasetCursor::reshuffle() {
  order_.resize(static_cast<size_t>(size_));
  for (int64_t k = 0; k < size_; ++k) order_[static_cast<size_t>(k)] = k;
  if (!shuffle_) return;
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch_));
  for (int64_t k = size_ - 1; k > 0; --k) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(k + 1));
    std::swap(order_[static_cast<size_t>(k)], order_[static_cast<size_t>(j)]);
  }
}

int64_t DatasetCursor::next() {
  if (position_ >= size_) {
    ++epoch_;
    position_ = 0;
    reshuffle();
  }
  ++consumed_;
  return order_[static_cast<size_t>(position_++)];
}

nlohmann::json DatasetCursor::state() const {
  return {{"size", size_}, {"seed", seed_}, {"shuffle", shuffle_}, {"epoch", epoch_}, {"position", position_},
          {"consumed", consumed_}};
}

void DatasetCursor::restore(const nlohmann::json& state) {
  const int64_t size = state.at("size").get<int64_t>();
  const uint64_t seed = state.at("seed").get<uint64_t>();
  const bool shuffle = state.at("shuffle").get<bool>();
  if (size != size_ || seed != seed_ || shuffle != shuffle_) {
    throw_user_error("data cursor was saved for a dataset of {} records (seed {}, shuffle {}) but this one has {} "
                     "(seed {}, shuffle {}): resume with the same dataset and seed", size, seed, shuffle, size_, seed_,
                     shuffle_);
  }
  epoch_ = state.at("epoch").get<int64_t>();
  position_ = state.at("position").get<int64_t>();
  consumed_ = state.at("consumed").get<int64_t>();
  reshuffle();
}

}  // namespace rlcpp
