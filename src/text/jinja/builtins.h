// The built-ins of rlcpp's Jinja subset as name -> function tables: filters (`x | trim`), tests
// (`x is defined`), string methods (`s.startswith(...)`) and globals (`range`, `namespace`,
// `raise_exception`, ...), with the value operations they share with the evaluator (indexing,
// attributes, iteration, slices). All are pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace rlcpp::jinja {

// Argument `index` or keyword `name`, else undefined.
Value arg(const List& args, const KwArgs& kwargs, size_t index, const std::string& name);

// Python-style slice bounds of a sequence of `length`.
std::vector<int64_t> slice_indices(int64_t length, const Value& start, const Value& stop, const Value& step);

// Items of a list, keys of a dict, characters (UTF-8) of a string; nothing for undefined/none.
List iterate(const Value& v, const Pos& pos);

// base[key] (undefined when absent) and base.name (dict entries and methods, string methods).
Value index_value(const Value& base, const Value& key, const Pos& pos);
Value attribute(const Value& base, const std::string& name, const Pos& pos);

// A global name (undefined when it is none of the built-ins).
Value global(const std::string& name, const Pos& pos);

// `args[0] is name(args[1:])` and `args[0] | name(args[1:], kwargs)`. Unknown names are errors.
bool apply_test(const std::string& name, const List& args, const Pos& pos);
Value apply_filter(const std::string& name, const List& args, const KwArgs& kwargs, const Pos& pos);

}  // namespace rlcpp::jinja
