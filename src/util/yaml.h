// YAML files as JSON values: every scalar becomes a JSON string (the reader of a setting decides
// its type, so "007" stays "007" for a name and becomes 7 for a count), sequences become arrays
// and mappings objects. Errors name the file and the line.
#pragma once

#include <filesystem>

#include "util/json.h"

namespace rlcpp {

Json load_yaml_file(const std::filesystem::path& path);
// The same for YAML text; errors name `where` (a file) and the line. Nesting deeper than 64 levels is
// an error (a run file nests three).
Json parse_yaml(const std::string& text, const std::string& where);

}  // namespace rlcpp
