// Typed readers of raw setting values. A value is a JSON scalar, or (from YAML and flags) a string
// to be parsed; a value of the wrong kind is a UserError naming `where` (the flag or file:key).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "util/json.h"

namespace rlcpp {

std::string scalar_text(const Json& v);
int64_t read_int(const Json& v, const std::string& where);
double read_double(const Json& v, const std::string& where);
bool read_bool(const Json& v, const std::string& where);
std::string read_string(const Json& v, const std::string& where);
// [low, high] from a YAML list, a JSON list in a flag ("[0.01, 0.99]"), "0.01,0.99", or none/null.
std::optional<std::pair<double, double>> read_range(const Json& v, const std::string& where);

}  // namespace rlcpp
