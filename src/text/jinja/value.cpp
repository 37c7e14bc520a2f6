#include "text/jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rlcpp::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0.0;
    case Kind::kString: return !s.empty();
    case Kind::kList: return !list->empty();
    case Kind::kDict: return !dict->items.empty() || is_namespace;
    case Kind::kCallable: return true;
  }
  return false;
}

namespace {

// Python's repr of a float: shortest round-trip digits, always with a '.' or exponent.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", x);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string quote_python(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) out += '\\';
        out += c;
    }
  }
  return out + q;
}

}  // namespace

std::string Value::repr() const {
  if (kind == Kind::kString) return quote_python(s);
  return str();
}

std::string Value::str() const {
  switch (kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b ? "True" : "False";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return float_repr(f);
    case Kind::kString: return s;
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].repr();
      return out + "]";
    }
    case Kind::kDict: {
      if (is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : dict->items) {
        out += (first ? "" : ", ") + quote_python(key) + ": " + value.repr();
        first = false;
      }
      return out + "}";
    }
    case Kind::kCallable: return "<function>";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return is_namespace ? "namespace" : "dict";
    case Kind::kCallable: return "callable";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if ((a.kind == Value::Kind::kBool || b.kind == Value::Kind::kBool) && (a.is_number() || b.is_number())) {
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.b == b.b;
    case Value::Kind::kString: return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, value] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (other == nullptr || !equal(value, *other)) return false;
      }
      return true;
    default: return a.fn == b.fn;
  }
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value dict = Value::make_dict();
      for (auto it = json.begin(); it != json.end(); ++it) dict.dict->set(it.key(), from_json(it.value()));
      return dict;
    }
    default: return Value();
  }
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void dump(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  const std::string newline = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const std::string comma = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.b ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.i); return;
    case Value::Kind::kFloat: *out += float_repr(v.f); return;
    case Value::Kind::kString: *out += json_string(v.s); return;
    case Value::Kind::kCallable: *out += "null"; return;
    case Value::Kind::kList:
      if (v.list->empty()) {
        *out += "[]";
        return;
      }
      *out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        *out += (k ? comma : "") + newline;
        dump((*v.list)[k], indent, sort_keys, depth + 1, out);
      }
      *out += close + "]";
      return;
    case Value::Kind::kDict: {
      if (v.dict->items.empty()) {
        *out += "{}";
        return;
      }
      auto items = v.dict->items;
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      *out += "{";
      for (size_t k = 0; k < items.size(); ++k) {
        *out += (k ? comma : "") + newline + json_string(items[k].first) + ": ";
        dump(items[k].second, indent, sort_keys, depth + 1, out);
      }
      *out += close + "}";
      return;
    }
  }
}

}  // namespace

std::string to_json(const Value& value, int indent, bool sort_keys) {
  std::string out;
  dump(value, indent, sort_keys, 0, &out);
  return out;
}

}  // namespace rlcpp::jinja
