// JSON helpers: parse a file with errors naming it, and typed field access whose errors name the
// file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

#include "util/error.h"

namespace rlcpp {

using Json = nlohmann::json;

// Parses a JSON file; a missing file or a syntax error is a UserError naming the path.
Json load_json_file(const std::filesystem::path& path);

// Reads `key` from `object` as T; `where` names the source for the error (e.g. ".../config.json").
template <typename T>
T json_get(const Json& object, const std::string& key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw_user_error("{}: missing field \"{}\"", where, key);
  try {
    return it->template get<T>();
  } catch (const nlohmann::json::exception&) {
    throw_user_error("{}: field \"{}\" has the wrong type ({}): {}", where, key, it->type_name(), it->dump());
  }
}

// Like json_get, but absent or null fields give `fallback`.
template <typename T>
T json_get_or(const Json& object, const std::string& key, const T& fallback, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  return json_get<T>(object, key, where);
}

}  // namespace rlcpp
