#include "text/jinja/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>

#include "util/error.h"

namespace rlcpp::jinja {

namespace {

// ---- string helpers (Python's semantics)

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  auto in_set = [&](char c) { return chars.is_string() ? chars.s.find(c) != std::string::npos : is_space(c); };
  size_t b = 0, e = s.size();
  if (left) while (b < e && in_set(s[b])) ++b;
  if (right) while (e > b && in_set(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Value split_string(const std::string& s, const Value& sep, int64_t maxsplit) {
  List parts;
  if (!sep.is_string()) {  // whitespace runs, no empty strings
    size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && is_space(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::string(strip_chars(s.substr(k), Value(), false, true)));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_space(s[e])) ++e;
      parts.push_back(Value::string(s.substr(k, e - k)));
      k = e;
    }
    return Value::make_list(std::move(parts));
  }
  if (sep.s.empty()) throw_user_error("chat template: split() with an empty separator");
  size_t k = 0;
  while (true) {
    const size_t found = s.find(sep.s, k);
    if (found == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(Value::string(s.substr(k)));
      break;
    }
    parts.push_back(Value::string(s.substr(k, found - k)));
    k = found + sep.s.size();
  }
  return Value::make_list(std::move(parts));
}

std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  size_t k = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    k = s.find(from, k);
    if (k == std::string::npos) break;
    s.replace(k, from.size(), to);
    k += to.size();
  }
  return s;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      c = start ? static_cast<char>(std::toupper(c)) : static_cast<char>(std::tolower(c));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string capitalize(const std::string& s) { return s.empty() ? s : upper(s.substr(0, 1)) + lower(s.substr(1)); }

int64_t int_or(const Value& v, int64_t fallback) { return v.kind == Value::Kind::kInt ? v.i : fallback; }

// ---- string methods: s.name(args)

using StringMethod = Value (*)(const std::string& s, const List& args, const KwArgs& kwargs);

Value affix(const std::string& s, const List& args, const KwArgs& kwargs, bool prefix) {
  const List candidates = !args.empty() && args[0].is_list() ? *args[0].list : List{arg(args, kwargs, 0, "prefix")};
  for (const auto& c : candidates) {
    const std::string& x = c.s;
    if (x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

template <int (*Is)(int)>
Value all_chars(const std::string& s, const List&, const KwArgs&) {
  if (s.empty()) return Value::boolean(false);
  return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return Is(static_cast<unsigned char>(c)) != 0; }));
}

const std::map<std::string, StringMethod>& string_methods() {
  static const std::map<std::string, StringMethod> table = {
      {"startswith", [](const std::string& s, const List& a, const KwArgs& k) { return affix(s, a, k, true); }},
      {"endswith", [](const std::string& s, const List& a, const KwArgs& k) { return affix(s, a, k, false); }},
      {"strip", [](const std::string& s, const List& a, const KwArgs& k) { return Value::string(strip_chars(s, arg(a, k, 0, "chars"), true, true)); }},
      {"lstrip", [](const std::string& s, const List& a, const KwArgs& k) { return Value::string(strip_chars(s, arg(a, k, 0, "chars"), true, false)); }},
      {"rstrip", [](const std::string& s, const List& a, const KwArgs& k) { return Value::string(strip_chars(s, arg(a, k, 0, "chars"), false, true)); }},
      {"split", [](const std::string& s, const List& a, const KwArgs& k) { return split_string(s, arg(a, k, 0, "sep"), int_or(arg(a, k, 1, "maxsplit"), -1)); }},
      {"upper", [](const std::string& s, const List&, const KwArgs&) { return Value::string(upper(s)); }},
      {"lower", [](const std::string& s, const List&, const KwArgs&) { return Value::string(lower(s)); }},
      {"title", [](const std::string& s, const List&, const KwArgs&) { return Value::string(title_case(s)); }},
      {"capitalize", [](const std::string& s, const List&, const KwArgs&) { return Value::string(capitalize(s)); }},
      {"replace",
       [](const std::string& s, const List& a, const KwArgs& k) {
         return Value::string(replace_all(s, arg(a, k, 0, "old").str(), arg(a, k, 1, "new").str(), int_or(arg(a, k, 2, "count"), -1)));
       }},
      {"find",
       [](const std::string& s, const List& a, const KwArgs& k) {
         const size_t at = s.find(arg(a, k, 0, "sub").str());
         return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(at));
       }},
      {"count",
       [](const std::string& s, const List& a, const KwArgs& k) {
         const std::string sub = arg(a, k, 0, "sub").str();
         int64_t n = 0;
         for (size_t at = sub.empty() ? std::string::npos : s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
         return Value::integer(n);
       }},
      {"join",
       [](const std::string& s, const List& a, const KwArgs& k) {
         std::string out;
         const Value items = arg(a, k, 0, "iterable");
         if (items.is_list()) {
           for (size_t i = 0; i < items.list->size(); ++i) out += (i ? s : "") + (*items.list)[i].str();
         }
         return Value::string(out);
       }},
      {"isdigit", all_chars<std::isdigit>},
      {"isalpha", all_chars<std::isalpha>},
      {"isspace", all_chars<std::isspace>},
      {"format",  // positional {} only
       [](const std::string& s, const List& a, const KwArgs&) {
         std::string out;
         size_t next = 0;
         for (size_t i = 0; i < s.size(); ++i) {
           if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '}') {
             out += next < a.size() ? a[next++].str() : "";
             ++i;
           } else {
             out += s[i];
           }
         }
         return Value::string(out);
       }},
  };
  return table;
}

// ---- dict and list methods: d.items(), l.index(x), ...

Value dict_method(const std::shared_ptr<Dict>& dict, const std::string& name) {
  return Value::callable([dict, name](List& args, KwArgs&) {
    if (name == "get") {
      const Value* v = args.empty() ? nullptr : dict->find(args[0].str());
      return v ? *v : (args.size() > 1 ? args[1] : Value::none());
    }
    List out;
    for (const auto& [k, v] : dict->items) {
      if (name == "items") out.push_back(Value::make_list({Value::string(k), v}));
      else if (name == "keys") out.push_back(Value::string(k));
      else out.push_back(v);
    }
    return Value::make_list(std::move(out));
  });
}

Value list_method(const std::shared_ptr<List>& list, const std::string& name) {
  return Value::callable([list, name](List& args, KwArgs&) {
    int64_t count = 0;
    for (size_t k = 0; k < list->size(); ++k) {
      if (!args.empty() && equal((*list)[k], args[0])) {
        if (name == "index") return Value::integer(static_cast<int64_t>(k));
        ++count;
      }
    }
    return name == "index" ? Value::integer(-1) : Value::integer(count);
  });
}

// ---- globals

using Global = Value (*)(const Pos& pos);

const std::map<std::string, Global>& globals() {
  static const std::map<std::string, Global> table = {
      {"raise_exception",
       [](const Pos& pos) {
         return Value::callable([pos](List& args, KwArgs&) -> Value {
           throw_user_error("chat template {}: raise_exception: {}", pos.str(), args.empty() ? "" : args[0].str());
         });
       }},
      {"range",
       [](const Pos& pos) {
         return Value::callable([pos](List& args, KwArgs&) {
           int64_t start = 0, stop = 0, step = 1;
           if (args.size() == 1) stop = args[0].i;
           else if (args.size() >= 2) { start = args[0].i; stop = args[1].i; }
           if (args.size() >= 3) step = args[2].i;
           if (step == 0) fail(pos, "range() step must not be zero");
           List out;
           for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
             out.push_back(Value::integer(k));
             if (out.size() > 1000000) fail(pos, "range() too large");
           }
           return Value::make_list(std::move(out));
         });
       }},
      {"namespace", [](const Pos&) { return Value::callable([](List& a, KwArgs& k) {
         Value v = Value::make_dict();
         v.is_namespace = true;
         if (!a.empty() && a[0].is_dict()) v.dict->items = a[0].dict->items;
         for (const auto& [name, value] : k) v.dict->set(name, value);
         return v; }); }},
      {"dict", [](const Pos&) { return Value::callable([](List& a, KwArgs& k) {
         Value v = Value::make_dict();
         if (!a.empty() && a[0].is_dict()) v.dict->items = a[0].dict->items;
         for (const auto& [name, value] : k) v.dict->set(name, value);
         return v; }); }},
      {"strftime_now",
       [](const Pos&) {
         return Value::callable([](List& args, KwArgs&) {
           const std::time_t now = std::time(nullptr);
           std::tm tm{};
           localtime_r(&now, &tm);
           char buffer[256];
           const size_t n = std::strftime(buffer, sizeof buffer, args.empty() ? "%d %b %Y" : args[0].str().c_str(), &tm);
           return Value::string(std::string(buffer, n));
         });
       }},
  };
  return table;
}

// ---- tests: `v is name` (unary) and `v is name(other)` (binary)

struct Test {
  bool binary;
  bool (*fn)(const Value& v, const Value& other, const Pos& pos);
};

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_list()) {
    return std::any_of(haystack.list->begin(), haystack.list->end(), [&](const Value& x) { return equal(x, needle); });
  }
  if (haystack.is_string()) return haystack.s.find(needle.str()) != std::string::npos;
  if (haystack.is_dict()) return haystack.dict->find(needle.str()) != nullptr;
  return false;
}

bool parity(const Value& v, const Pos& pos, bool odd) {
  if (v.kind != Value::Kind::kInt) fail(pos, fmt::format("'{}' test on a {}", odd ? "odd" : "even", v.type_name()));
  return (((v.i % 2) + 2) % 2 == 1) == odd;
}

using V = const Value&;
using P = const Pos&;

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {
      {"defined", {false, [](V v, V, P) { return !v.is_undefined(); }}},
      {"undefined", {false, [](V v, V, P) { return v.is_undefined(); }}},
      {"none", {false, [](V v, V, P) { return v.is_none(); }}},
      {"string", {false, [](V v, V, P) { return v.is_string(); }}},
      {"number", {false, [](V v, V, P) { return v.is_number(); }}},
      {"integer", {false, [](V v, V, P) { return v.kind == Value::Kind::kInt; }}},
      {"float", {false, [](V v, V, P) { return v.kind == Value::Kind::kFloat; }}},
      {"boolean", {false, [](V v, V, P) { return v.kind == Value::Kind::kBool; }}},
      {"true", {false, [](V v, V, P) { return v.kind == Value::Kind::kBool && v.b; }}},
      {"false", {false, [](V v, V, P) { return v.kind == Value::Kind::kBool && !v.b; }}},
      {"mapping", {false, [](V v, V, P) { return v.is_dict(); }}},
      {"iterable", {false, [](V v, V, P) { return v.is_list() || v.is_dict() || v.is_string(); }}},
      {"sequence", {false, [](V v, V, P) { return v.is_list() || v.is_string() || v.is_dict(); }}},
      {"callable", {false, [](V v, V, P) { return v.kind == Value::Kind::kCallable; }}},
      {"lower", {false, [](V v, V, P) { return v.is_string() && lower(v.s) == v.s; }}},
      {"upper", {false, [](V v, V, P) { return v.is_string() && upper(v.s) == v.s; }}},
      {"odd", {false, [](V v, V, P pos) { return parity(v, pos, true); }}},
      {"even", {false, [](V v, V, P pos) { return parity(v, pos, false); }}},
      {"divisibleby", {true, [](V v, V o, P) { return o.i != 0 && v.kind == Value::Kind::kInt && v.i % o.i == 0; }}},
      {"eq", {true, [](V v, V o, P) { return equal(v, o); }}},
      {"equalto", {true, [](V v, V o, P) { return equal(v, o); }}},
      {"==", {true, [](V v, V o, P) { return equal(v, o); }}},
      {"sameas", {true, [](V v, V o, P) { return equal(v, o); }}},
      {"ne", {true, [](V v, V o, P) { return !equal(v, o); }}},
      {"!=", {true, [](V v, V o, P) { return !equal(v, o); }}},
      {"in", {true, [](V v, V o, P) { return contains(o, v); }}},
      {"lt", {true, [](V v, V o, P) { return v.as_double() < o.as_double(); }}},
      {"<", {true, [](V v, V o, P) { return v.as_double() < o.as_double(); }}},
      {"gt", {true, [](V v, V o, P) { return v.as_double() > o.as_double(); }}},
      {">", {true, [](V v, V o, P) { return v.as_double() > o.as_double(); }}},
      {"le", {true, [](V v, V o, P) { return v.as_double() <= o.as_double(); }}},
      {"<=", {true, [](V v, V o, P) { return v.as_double() <= o.as_double(); }}},
      {"ge", {true, [](V v, V o, P) { return v.as_double() >= o.as_double(); }}},
      {">=", {true, [](V v, V o, P) { return v.as_double() >= o.as_double(); }}},
  };
  return table;
}

// ---- filters: `v | name(rest, kwargs)`

using Filter = Value (*)(const Value& v, const List& rest, const KwArgs& kwargs, const Pos& pos);

int64_t length_of(const Value& x, const Pos& pos) {
  if (x.is_string()) {
    int64_t n = 0;
    for (unsigned char c : x.s) n += (c & 0xc0) != 0x80;
    return n;
  }
  if (x.is_list()) return static_cast<int64_t>(x.list->size());
  if (x.is_dict()) return static_cast<int64_t>(x.dict->items.size());
  fail(pos, fmt::format("length of a {}", x.type_name()));
}

Value first_or_last(const Value& v, const Pos& pos, bool first) {
  const List items = iterate(v, pos);
  if (items.empty()) return Value();
  return first ? items.front() : items.back();
}

Value fold(const Value& v, const Pos& pos, const std::string& name) {
  const List items = iterate(v, pos);
  if (name == "sum") {
    Value total = Value::integer(0);
    for (const auto& item : items) {
      total = total.kind == Value::Kind::kInt && item.kind == Value::Kind::kInt ? Value::integer(total.i + item.i)
                                                                                : Value::number(total.as_double() + item.as_double());
    }
    return total;
  }
  if (items.empty()) return Value();
  Value best = items[0];
  for (const auto& item : items) {
    const bool less = item.is_string() ? item.s < best.s : item.as_double() < best.as_double();
    if (name == "min" ? less : (!less && !equal(item, best))) best = item;
  }
  return best;
}

// select/reject (by the item) and selectattr/rejectattr (by an attribute), with an optional test.
Value select(const Value& v, const List& rest, const Pos& pos, bool by_attribute, bool keep_if) {
  List out;
  for (const auto& item : iterate(v, pos)) {
    size_t k = 0;
    const Value subject = by_attribute ? index_value(item, rest.at(k++), pos) : item;
    bool result;
    if (k < rest.size()) {
      List test_args{subject};
      test_args.insert(test_args.end(), rest.begin() + static_cast<long>(k) + 1, rest.end());
      result = apply_test(rest[k].str(), test_args, pos);
    } else {
      result = subject.truthy();
    }
    if (result == keep_if) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

Value indent(const Value& v, const List& rest, const KwArgs& kwargs) {
  const Value width = arg(rest, kwargs, 0, "width");
  const std::string pad = width.is_string() ? width.s : std::string(static_cast<size_t>(int_or(width, 4)), ' ');
  const bool first = arg(rest, kwargs, 1, "first").truthy();
  const bool blank = arg(rest, kwargs, 2, "blank").truthy();
  const std::string s = v.str();
  std::string out;
  size_t start = 0;
  bool first_line = true;
  while (true) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    first_line = false;
  }
  return Value::string(out);
}

using R = const List&;
using K = const KwArgs&;

Value default_value(V v, R rest, K kwargs, P) {
  const Value fallback = arg(rest, kwargs, 0, "default_value");
  if (v.is_undefined() || (arg(rest, kwargs, 1, "boolean").truthy() && !v.truthy())) {
    return fallback.is_undefined() ? Value::string("") : fallback;
  }
  return v;
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"trim", [](V v, R r, K k, P) { return Value::string(strip_chars(v.str(), arg(r, k, 0, "chars"), true, true)); }},
      {"tojson",
       [](V v, R r, K k, P) {
         return Value::string(to_json(v, static_cast<int>(int_or(arg(r, k, 0, "indent"), -1)), arg(r, k, 1, "sort_keys").truthy()));
       }},
      {"length", [](V v, R, K, P pos) { return Value::integer(length_of(v, pos)); }},
      {"count", [](V v, R, K, P pos) { return Value::integer(length_of(v, pos)); }},
      {"upper", [](V v, R, K, P) { return Value::string(upper(v.str())); }},
      {"lower", [](V v, R, K, P) { return Value::string(lower(v.str())); }},
      {"title", [](V v, R, K, P) { return Value::string(title_case(v.str())); }},
      {"capitalize", [](V v, R, K, P) { return Value::string(capitalize(v.str())); }},
      {"string", [](V v, R, K, P) { return Value::string(v.str()); }},
      {"safe", [](V v, R, K, P) { return v; }},
      {"e", [](V v, R, K, P) { return v; }},
      {"escape", [](V v, R, K, P) { return v; }},
      {"list", [](V v, R, K, P pos) { return Value::make_list(iterate(v, pos)); }},
      {"first", [](V v, R, K, P pos) { return first_or_last(v, pos, true); }},
      {"last", [](V v, R, K, P pos) { return first_or_last(v, pos, false); }},
      {"reverse",
       [](V v, R, K, P pos) {
         if (v.is_string()) return Value::string(std::string(v.s.rbegin(), v.s.rend()));
         List items = iterate(v, pos);
         std::reverse(items.begin(), items.end());
         return Value::make_list(std::move(items));
       }},
      {"join",
       [](V v, R r, K k, P pos) {
         const Value sep = arg(r, k, 0, "d"), attribute_name = arg(r, k, 1, "attribute");
         std::string out;
         const List items = iterate(v, pos);
         for (size_t i = 0; i < items.size(); ++i) {
           const Value item = attribute_name.is_string() ? index_value(items[i], attribute_name, pos) : items[i];
           out += (i ? sep.str() : "") + item.str();
         }
         return Value::string(out);
       }},
      {"default", default_value},
      {"d", default_value},
      {"int",
       [](V v, R, K, P) {
         if (v.kind == Value::Kind::kInt) return v;
         if (v.kind == Value::Kind::kFloat) return Value::integer(static_cast<int64_t>(v.f));
         if (v.kind == Value::Kind::kBool) return Value::integer(v.b);
         try { return Value::integer(std::stoll(v.str())); } catch (...) { return Value::integer(0); }
       }},
      {"float",
       [](V v, R, K, P) {
         if (v.is_number()) return Value::number(v.as_double());
         try { return Value::number(std::stod(v.str())); } catch (...) { return Value::number(0.0); }
       }},
      {"abs", [](V v, R, K, P) { return v.kind == Value::Kind::kInt ? Value::integer(std::llabs(v.i)) : Value::number(std::fabs(v.as_double())); }},
      {"round",
       [](V v, R r, K k, P) {
         const double scale = std::pow(10.0, static_cast<double>(int_or(arg(r, k, 0, "precision"), 0)));
         return Value::number(std::round(v.as_double() * scale) / scale);
       }},
      {"replace",
       [](V v, R r, K k, P) {
         return Value::string(replace_all(v.str(), arg(r, k, 0, "old").str(), arg(r, k, 1, "new").str(), int_or(arg(r, k, 2, "count"), -1)));
       }},
      {"items",
       [](V v, R, K, P pos) {
         if (!v.is_dict()) fail(pos, fmt::format("items of a {}", v.type_name()));
         List out;
         for (const auto& [key, value] : v.dict->items) out.push_back(Value::make_list({Value::string(key), value}));
         return Value::make_list(std::move(out));
       }},
      {"indent", [](V v, R r, K k, P) { return indent(v, r, k); }},
      {"unique",
       [](V v, R, K, P pos) {
         List out;
         for (const auto& item : iterate(v, pos)) {
           if (std::none_of(out.begin(), out.end(), [&](const Value& x) { return equal(x, item); })) out.push_back(item);
         }
         return Value::make_list(std::move(out));
       }},
      {"sum", [](V v, R, K, P pos) { return fold(v, pos, "sum"); }},
      {"max", [](V v, R, K, P pos) { return fold(v, pos, "max"); }},
      {"min", [](V v, R, K, P pos) { return fold(v, pos, "min"); }},
      {"map",
       [](V v, R r, K k, P pos) {
         const Value attribute_name = arg({}, k, 0, "attribute");
         List out;
         for (const auto& item : iterate(v, pos)) {
           if (attribute_name.is_string()) {
             out.push_back(index_value(item, attribute_name, pos));
           } else if (!r.empty()) {
             List filter_args{item};
             filter_args.insert(filter_args.end(), r.begin() + 1, r.end());
             out.push_back(apply_filter(r[0].str(), filter_args, {}, pos));
           }
         }
         return Value::make_list(std::move(out));
       }},
      {"select", [](V v, R r, K, P pos) { return select(v, r, pos, false, true); }},
      {"reject", [](V v, R r, K, P pos) { return select(v, r, pos, false, false); }},
      {"selectattr", [](V v, R r, K, P pos) { return select(v, r, pos, true, true); }},
      {"rejectattr", [](V v, R r, K, P pos) { return select(v, r, pos, true, false); }},
      {"wordcount", [](V v, R, K, P) { return Value::integer(static_cast<int64_t>(split_string(v.str(), Value(), -1).list->size())); }},
  };
  return table;
}

}  // namespace

Value arg(const List& args, const KwArgs& kwargs, size_t index, const std::string& name) {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return Value();
}

std::vector<int64_t> slice_indices(int64_t length, const Value& start, const Value& stop, const Value& step_v) {
  const int64_t step = step_v.is_undefined() || step_v.is_none() ? 1 : step_v.i;
  std::vector<int64_t> out;
  if (step == 0) return out;
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    int64_t x = v.i;
    if (x < 0) x += length;
    if (step > 0) return std::clamp<int64_t>(x, 0, length);
    return std::clamp<int64_t>(x, -1, length - 1);
  };
  const int64_t begin = clamp(start, step > 0 ? 0 : length - 1);
  const int64_t end = clamp(stop, step > 0 ? length : -1);
  for (int64_t k = begin; step > 0 ? k < end : k > end; k += step) out.push_back(k);
  return out;
}

List iterate(const Value& v, const Pos& pos) {
  if (v.is_list()) return *v.list;
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, value] : v.dict->items) keys.push_back(Value::string(k));
    return keys;
  }
  if (v.is_string()) {
    List chars;
    size_t k = 0;
    while (k < v.s.size()) {
      size_t len = 1;
      const unsigned char lead = static_cast<unsigned char>(v.s[k]);
      if (lead >= 0xF0) len = 4; else if (lead >= 0xE0) len = 3; else if (lead >= 0xC0) len = 2;
      chars.push_back(Value::string(v.s.substr(k, len)));
      k += len;
    }
    return chars;
  }
  if (v.is_undefined() || v.is_none()) return {};
  fail(pos, fmt::format("cannot iterate over a {}", v.type_name()));
}

Value index_value(const Value& base, const Value& key, const Pos& pos) {
  if ((base.is_list() || base.is_string()) && key.kind == Value::Kind::kInt) {
    const int64_t n = base.is_list() ? static_cast<int64_t>(base.list->size()) : static_cast<int64_t>(base.s.size());
    const int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value();
    return base.is_list() ? (*base.list)[static_cast<size_t>(k)] : Value::string(base.s.substr(static_cast<size_t>(k), 1));
  }
  if (base.is_dict() && key.is_string()) {
    const Value* v = base.dict->find(key.s);
    return v ? *v : Value();
  }
  if (base.is_undefined() || base.is_none()) return Value();
  fail(pos, fmt::format("cannot index a {} with a {}", base.type_name(), key.type_name()));
}

Value attribute(const Value& base, const std::string& name, const Pos& pos) {
  if (base.is_dict()) {
    const bool method = name == "items" || name == "keys" || name == "values" || name == "get";
    if (!method || base.is_namespace) {
      const Value* v = base.dict->find(name);
      return v ? *v : Value();
    }
    return dict_method(base.dict, name);
  }
  if (base.is_string()) {
    const auto it = string_methods().find(name);
    if (it == string_methods().end()) fail(pos, fmt::format("string method '{}' is not supported", name));
    const std::string s = base.s;
    const StringMethod method = it->second;
    return Value::callable([s, method](List& args, KwArgs& kwargs) { return method(s, args, kwargs); });
  }
  if (base.is_list() && (name == "index" || name == "count")) return list_method(base.list, name);
  if (base.is_undefined() || base.is_none() || base.is_list() || base.is_number()) return Value();
  fail(pos, fmt::format("a {} has no attribute '{}'", base.type_name(), name));
}

Value global(const std::string& name, const Pos& pos) {
  const auto it = globals().find(name);
  return it == globals().end() ? Value() : it->second(pos);
}

bool apply_test(const std::string& name, const List& args, const Pos& pos) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail(pos, fmt::format("test '{}' is not supported", name));
  if (it->second.binary && args.size() < 2) fail(pos, fmt::format("test '{}' needs an argument", name));
  return it->second.fn(args[0], it->second.binary ? args[1] : Value(), pos);
}

Value apply_filter(const std::string& name, const List& args, const KwArgs& kwargs, const Pos& pos) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail(pos, fmt::format("filter '{}' is not supported by rlcpp's template engine", name));
  const List rest(args.begin() + 1, args.end());
  return it->second(args[0], rest, kwargs, pos);
}

}  // namespace rlcpp::jinja
