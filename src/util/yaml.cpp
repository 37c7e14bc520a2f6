#include "util/yaml.h"

#include <yaml-cpp/yaml.h>

#include "util/file.h"

namespace rlcpp {

namespace {

Json to_json(const YAML::Node& node, const std::string& where) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return node.Scalar();
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(to_json(item, where));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& item : node) {
        const std::string key = item.first.as<std::string>();
        if (out.contains(key)) {
          throw_user_error("{}:{}: \"{}\" is given twice", where, item.first.Mark().line + 1, key);
        }
        out[key] = to_json(item.second, where);
      }
      return out;
    }
  }
  return nullptr;
}

}  // namespace

Json load_yaml_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  try {
    return to_json(YAML::Load(text), path.string());
  } catch (const YAML::Exception& e) {
    throw_user_error("{}:{}: invalid YAML: {}", path.string(), e.mark.line + 1, e.msg);
  }
}

}  // namespace rlcpp
