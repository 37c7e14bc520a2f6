#include "util/json.h"

#include "util/file.h"

namespace rlcpp {

Json load_json_file(const std::filesystem::path& path) {
  const std::string text = read_file(path, "JSON file");
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw_user_error("'{}' is not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace rlcpp
