#include "text/normalizer.h"

#include <vector>

#include "text/regex.h"
#include "text/unicode.h"
#include "util/error.h"

namespace rlcpp {

namespace {

class FormNormalizer : public Normalizer {
 public:
  explicit FormNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(const std::string& text) const override { return unicode_normalize(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override { return unicode_lowercase(text); }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const std::string& pattern, std::string content, const std::string& where)
      : regex_(pattern, where), content_(std::move(content)) {}
  std::string normalize(const std::string& text) const override {
    std::string out;
    size_t last = 0;
    for (auto [begin, end] : regex_.find_all(text)) {
      out.append(text, last, begin - last);
      out += content_;
      last = end;
    }
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  Regex regex_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(const std::string& text) const override { return text.empty() ? text : prefix_ + text; }

 private:
  std::string prefix_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(const std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_unicode_whitespace(utf8_next(text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
        size_t pos = start;
        if (!is_unicode_whitespace(utf8_next(text, &pos))) break;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(const std::string& text) const override {
    std::string out = text;
    for (const auto& part : parts_) out = part->normalize(out);
    return out;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> Normalizer::from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return nullptr;
  const std::string type = json.value("type", "");
  const std::string here = where + " normalizer " + type;
  if (type == "NFC") return std::make_unique<FormNormalizer>(NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<FormNormalizer>(NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<FormNormalizer>(NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<FormNormalizer>(NormalForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(pattern_from_json(json.at("pattern"), here), json.value("content", ""), here);
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json.value("prepend", ""));
  if (type == "Strip") return std::make_unique<StripNormalizer>(json.value("strip_left", true), json.value("strip_right", true));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& part : json.at("normalizers")) {
      if (auto n = from_json(part, where)) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  throw_user_error("{}: normalizer type \"{}\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, "
                   "Prepend, Strip, Sequence)", where, type);
}

}  // namespace rlcpp
