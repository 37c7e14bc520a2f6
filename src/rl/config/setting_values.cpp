#include "rl/config/setting_values.h"

#include <charconv>
#include <cmath>

namespace rlcpp {

std::string scalar_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

int64_t read_int(const Json& v, const std::string& where) {
  if (v.is_number_integer()) return v.get<int64_t>();
  const std::string s = scalar_text(v);
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end != s.data() + s.size()) throw_user_error("{}: expected an integer, got \"{}\"", where, s);
  return out;
}

double read_double(const Json& v, const std::string& where) {
  const std::string s = scalar_text(v);
  double out = std::nan("");
  if (v.is_number()) {
    out = v.get<double>();
  } else {
    try {
      size_t used = 0;
      out = std::stod(s, &used);
      if (used != s.size()) out = std::nan("");
    } catch (const std::exception&) {
    }
  }
  // No setting means anything by nan or inf: they would only reach the weights.
  if (!std::isfinite(out)) throw_user_error("{}: expected a finite number, got \"{}\"", where, s);
  return out;
}

bool read_bool(const Json& v, const std::string& where) {
  if (v.is_boolean()) return v.get<bool>();
  std::string s = scalar_text(v);
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  throw_user_error("{}: expected true or false, got \"{}\"", where, scalar_text(v));
}

std::string read_string(const Json& v, const std::string& where) {
  if (v.is_null()) return "";
  if (v.is_object() || v.is_array()) return v.dump();  // e.g. the eval-dataset map written in YAML
  (void)where;
  return scalar_text(v);
}

std::optional<std::pair<double, double>> read_range(const Json& v, const std::string& where) {
  Json list = v;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "none" || s == "null" || s == "~" || s.empty()) return std::nullopt;
    list = Json::parse(s.front() == '[' ? s : "[" + s + "]", nullptr, /*allow_exceptions=*/false);
  }
  if (v.is_null()) return std::nullopt;
  if (!list.is_array() || list.size() != 2) {
    throw_user_error("{}: expected a range [low, high] such as [0.01, 0.99], got {}", where, scalar_text(v));
  }
  const double low = read_double(list[0], where), high = read_double(list[1], where);
  if (!(low <= high)) throw_user_error("{}: range [{}, {}] has low above high", where, low, high);
  return std::make_pair(low, high);
}

}  // namespace rlcpp
