// The values of the Jinja subset rlcpp renders chat templates with: undefined, none, bool, int,
// float, string, list, dict (insertion-ordered, string keys; also Jinja namespaces) and callables.
// Conversions follow Python: str(), truthiness, equality, and tojson as transformers' filter.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rlcpp::jinja {

struct Value;
using List = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

using Function = std::function<Value(List& args, KwArgs& kwargs)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;
  bool is_namespace = false;

  static Value none() { Value v; v.kind = Kind::kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value make_list(List items = {}) { Value v; v.kind = Kind::kList; v.list = std::make_shared<List>(std::move(items)); return v; }
  static Value make_dict() { Value v; v.kind = Kind::kDict; v.dict = std::make_shared<Dict>(); return v; }
  static Value callable(Function fn) { Value v; v.kind = Kind::kCallable; v.fn = std::make_shared<Function>(std::move(fn)); return v; }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(i) : kind == Kind::kBool ? b : f; }

  bool truthy() const;
  std::string str() const;   // Python str(); undefined renders as ""
  std::string repr() const;  // Python repr() (inside lists and dicts)
  std::string type_name() const;
};

bool equal(const Value& a, const Value& b);
Value from_json(const nlohmann::ordered_json& json);
// json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as transformers' tojson.
std::string to_json(const Value& value, int indent, bool sort_keys);

}  // namespace rlcpp::jinja
