#include "util/yaml.h"

#include <yaml-cpp/yaml.h>

#include "util/file.h"

namespace rlcpp {

namespace {

constexpr int kMaxDepth = 64;

Json to_json(const YAML::Node& node, const std::string& where, int depth = 0) {
  if (depth > kMaxDepth) throw_user_error("{}:{}: nested deeper than {} levels", where, node.Mark().line + 1, kMaxDepth);
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return node.Scalar();
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(to_json(item, where, depth + 1));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& item : node) {
        const std::string key = item.first.as<std::string>();
        if (out.contains(key)) {
          throw_user_error("{}:{}: \"{}\" is given twice", where, item.first.Mark().line + 1, key);
        }
        out[key] = to_json(item.second, where, depth + 1);
      }
      return out;
    }
  }
  return nullptr;
}

}  // namespace

Json load_yaml_file(const std::filesystem::path& path) { return parse_yaml(read_file(path), path.string()); }

Json parse_yaml(const std::string& text, const std::string& where) {
  try {
    return to_json(YAML::Load(text), where);
  } catch (const YAML::Exception& e) {
    throw_user_error("{}:{}: invalid YAML: {}", where, e.mark.line + 1, e.msg);
  }
}

}  // namespace rlcpp
