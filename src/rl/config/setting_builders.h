// The builders of the run-settings table (run_settings.cpp and the groups kept in files of their
// own): a setting from its YAML name, flags, help and the RunConfig field it holds, read and
// checked by kind (an integer with a minimum, a number in an interval, a flag, a string, a dtype,
// an enum by its table's names).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "model/model_options.h"
#include "rl/config/run_config.h"
#include "rl/config/setting_values.h"
#include "util/error.h"

namespace rlcpp {

inline void at_least(int64_t value, int64_t min, const std::string& where) {
  if (value < min) throw_user_error("{}: {} is below the minimum {}", where, value, min);
}

using Apply = std::function<void(RunConfig&, const Json&, const std::string&, const RawSettings&)>;
using Get = std::function<Json(const RunConfig&)>;

inline Setting make(std::string name, std::string flags, std::vector<std::string> aliases, std::string help, Apply apply, Get get,
             bool may_differ, std::string converts_to = "") {
  Setting s;
  s.name = std::move(name);
  s.flags = std::move(flags);
  s.aliases = std::move(aliases);
  s.help = std::move(help);
  s.apply = std::move(apply);
  s.get = std::move(get);
  s.resume_may_differ = may_differ;
  s.converts_to = std::move(converts_to);
  return s;
}

template <typename Ref>
Setting int_setting(std::string name, std::string flags, std::string help, Ref ref, int64_t min,
                    std::vector<std::string> aliases = {}, bool may_differ = false) {
  return make(std::move(name), std::move(flags), std::move(aliases), std::move(help),
          [ref, min](RunConfig& c, const Json& v, const std::string& where, const RawSettings&) {
            const int64_t x = read_int(v, where);
            at_least(x, min, where);
            ref(c) = static_cast<std::remove_reference_t<decltype(ref(c))>>(x);
          },
          [ref](const RunConfig& c) { return Json(ref(const_cast<RunConfig&>(c))); }, may_differ);
}

// A setting held in one field of RunConfig (`ref` returns it), parsed from its raw value by `read`.
template <typename Ref, typename Read>
Setting field_setting(std::string name, std::string flags, std::string help, Ref ref, Read read,
                      std::vector<std::string> aliases, bool may_differ) {
  return make(std::move(name), std::move(flags), std::move(aliases), std::move(help),
          [ref, read](RunConfig& c, const Json& v, const std::string& where, const RawSettings&) { ref(c) = read(v, where); },
          [ref](const RunConfig& c) { return Json(ref(const_cast<RunConfig&>(c))); }, may_differ);
}

// The values a number setting takes: an interval, either end open.
struct Bounds {
  double min = -INFINITY, max = INFINITY;
  bool min_open = false, max_open = false;
  bool contains(double x) const { return (min_open ? x > min : x >= min) && (max_open ? x < max : x <= max); }
  std::string text() const {
    if (std::isinf(max)) return fmt::format("{} {}", min_open ? ">" : ">=", min);
    return fmt::format("in {}{}, {}{}", min_open ? "(" : "[", min, max, max_open ? ")" : "]");
  }
};
constexpr Bounds kAnyNumber{};
constexpr Bounds kNonNegative{0};
constexpr Bounds kPositive{0, INFINITY, true};
constexpr Bounds kFraction{0, 1};  // [0, 1]

template <typename Ref>
Setting double_setting(std::string name, std::string flags, std::string help, Ref ref, Bounds bounds,
                       std::vector<std::string> aliases = {}, bool may_differ = false) {
  auto read = [bounds](const Json& v, const std::string& where) {
    const double x = read_double(v, where);
    if (!bounds.contains(x)) throw_user_error("{}: {} must be {}", where, x, bounds.text());
    return x;
  };
  return field_setting(std::move(name), std::move(flags), std::move(help), ref, read, std::move(aliases), may_differ);
}

template <typename Ref>
Setting bool_setting(std::string name, std::string flags, std::string help, Ref ref,
                     std::vector<std::string> aliases = {}, bool may_differ = false) {
  return field_setting(std::move(name), std::move(flags), std::move(help), ref, read_bool, std::move(aliases), may_differ);
}

template <typename Ref>
Setting string_setting(std::string name, std::string flags, std::string help, Ref ref,
                       std::vector<std::string> aliases = {}, bool may_differ = false) {
  return field_setting(std::move(name), std::move(flags), std::move(help), ref, read_string, std::move(aliases),
                       may_differ);
}

// A dtype by any of its names in `table`, stored as its canonical name ("" when empty: the
// default). `allowed`: the dtypes it may take (empty: any of the table's).
template <typename Ref>
Setting dtype_setting(std::string name, std::string flags, std::string help, Ref ref,
                      std::vector<torch::ScalarType> allowed = {}, bool may_differ = false,
                      const EnumTable<torch::ScalarType>& table = dtypes()) {
  auto read = [allowed, &table](const Json& v, const std::string& where) -> std::string {
    const std::string text = read_string(v, where);
    if (text.empty()) return "";
    const auto dtype = table.parse(text, where);
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), dtype) == allowed.end()) {
      std::string names;
      for (auto a : allowed) names += (names.empty() ? "" : ", ") + table.name(a);
      throw_user_error("{}: {} is not one of {}", where, text, names);
    }
    return table.name(dtype);
  };
  return field_setting(std::move(name), std::move(flags), std::move(help), ref, read, {}, may_differ);
}

// A setting held in an enum field, spelled by its table; the help lists the table's names.
template <typename E, typename Ref>
Setting enum_setting(std::string name, std::string flags, std::string help, const EnumTable<E>& table, Ref ref,
                     bool may_differ = false) {
  // "help: a | b | c" and then one line per value: the table's own help.
  return make(std::move(name), std::move(flags), {},
              help + (help.empty() ? "" : ": ") + table.names() + "\n" + table.help_lines(),
              [&table, ref](RunConfig& c, const Json& v, const std::string& where, const RawSettings&) {
                ref(c) = table.parse(read_string(v, where), where);
              },
              [&table, ref](const RunConfig& c) { return Json(table.name(ref(const_cast<RunConfig&>(c)))); }, may_differ);
}

// The reward group's settings (reward_settings.cpp), appended in table order.
void add_reward_settings(std::vector<Setting>& s);

}  // namespace rlcpp
