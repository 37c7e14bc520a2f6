// One table per enum: each value with its name (what flags, YAML and checkpoints spell), other
// accepted spellings and a line of help. parse, name and the help text all come from the table,
// so a flag's help can never list a name its parser rejects.
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace rlcpp {

template <typename E>
struct EnumEntry {
  E value;
  std::string_view name;     // the canonical spelling
  std::string_view help;     // one line
  std::vector<std::string_view> aliases = {};  // also accepted by parse (e.g. "fp32" for float32)
};

template <typename E>
class EnumTable {
 public:
  // `what` names the kind of value in errors ("loss aggregation").
  EnumTable(std::string_view what, std::initializer_list<EnumEntry<E>> entries) : what_(what), entries_(entries) {}

  // The value spelled `text`; anything else is a UserError naming `flag` and listing the names.
  E parse(std::string_view text, std::string_view flag) const {
    for (const auto& e : entries_) {
      if (e.name == text) return e.value;
      for (const auto& alias : e.aliases) {
        if (alias == text) return e.value;
      }
    }
    throw_user_error("{}: unknown {} \"{}\" (use {})", flag, what_, text, names(", "));
  }

  std::string name(E value) const {
    for (const auto& e : entries_) {
      if (e.value == value) return std::string(e.name);
    }
    return "?";
  }

  // "a | b | c": the names for a flag's help.
  std::string names(std::string_view separator = " | ") const {
    std::string out;
    for (const auto& e : entries_) out += (out.empty() ? "" : std::string(separator)) + std::string(e.name);
    return out;
  }

  // One line per value, "name: help", for --help texts and the README.
  std::string help_lines(std::string_view indent = "  ") const {
    std::string out;
    for (const auto& e : entries_) out += fmt::format("{}{}: {}\n", indent, e.name, e.help);
    return out;
  }

  const std::vector<EnumEntry<E>>& entries() const { return entries_; }

 private:
  std::string_view what_;
  std::vector<EnumEntry<E>> entries_;
};

}  // namespace rlcpp
