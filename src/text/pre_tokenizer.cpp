#include "text/pre_tokenizer.h"

#include "text/regex.h"
#include "util/error.h"

namespace rlcpp {

namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// GPT-2's pre-tokenisation regex, used by ByteLevel with use_regex.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits `text` at the matches of `regex` according to `behavior` (as Hugging Face's
// NormalizedString::split); empty pieces are dropped.
void split_text(const Regex& regex, Behavior behavior, bool invert, const std::string& text,
                std::vector<std::string>* out) {
  struct Segment {
    size_t begin, end;
    bool match;
  };
  std::vector<Segment> segments;
  size_t last = 0;
  for (auto [begin, end] : regex.find_all(text)) {
    if (begin > last) segments.push_back({last, begin, false});
    segments.push_back({begin, end, true});
    last = end;
  }
  if (last < text.size()) segments.push_back({last, text.size(), false});
  if (invert) {
    for (auto& s : segments) s.match = !s.match;
  }
  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : segments) {
        if (!s.match) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case Behavior::kIsolated:
      for (const auto& s : segments) pieces.emplace_back(s.begin, s.end);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.match && !pieces.empty() && !previous_match) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (previous_match && !s.match) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.match == previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    }
  }
  for (auto [begin, end] : pieces) {
    if (end > begin) out->push_back(text.substr(begin, end - begin));
  }
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const std::string& pattern, Behavior behavior, bool invert, const std::string& where)
      : regex_(pattern, where), behavior_(behavior), invert_(invert) {}
  void split(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    for (const auto& piece : *pieces) split_text(regex_, behavior_, invert_, piece, &out);
    *pieces = std::move(out);
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, where);
  }
  void split(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    for (auto piece : *pieces) {
      if (add_prefix_space_ && piece.rfind(' ', 0) != 0) piece.insert(piece.begin(), ' ');
      if (regex_) {
        split_text(*regex_, Behavior::kIsolated, false, piece, &out);
      } else if (!piece.empty()) {
        out.push_back(std::move(piece));
      }
    }
    *pieces = std::move(out);
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<std::string>* pieces) const override {
    for (const auto& part : parts_) part->split(pieces);
  }
  bool byte_level() const override {
    for (const auto& part : parts_) {
      if (part->byte_level()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw_user_error("{}: split behavior \"{}\" is not supported (Removed, Isolated, MergedWithPrevious, "
                   "MergedWithNext, Contiguous)", where, name);
}

}  // namespace

std::unique_ptr<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return nullptr;
  const std::string type = json.value("type", "");
  const std::string here = where + " pre_tokenizer " + type;
  if (type == "Split") {
    const std::string regex = pattern_from_json(json.at("pattern"), here);
    return std::make_unique<SplitPreTokenizer>(regex, parse_behavior(json.value("behavior", "Isolated"), here),
                                               json.value("invert", false), here);
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(json.value("add_prefix_space", false),
                                                   json.value("use_regex", true), here);
  }
  if (type == "Digits") {
    const bool individual = json.value("individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(individual ? "\\p{Nd}" : "\\p{Nd}+", Behavior::kIsolated, false, here);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& part : json.at("pretokenizers")) {
      if (auto p = from_json(part, where)) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  throw_user_error("{}: pre_tokenizer type \"{}\" is not supported (supported: Split, ByteLevel, Digits, Sequence); "
                   "rlcpp runs byte-level BPE tokenizers", where, type);
}

}  // namespace rlcpp
