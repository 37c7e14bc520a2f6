// Evaluation: renders a parsed template with the given variables, Jinja's scoping (loops and
// macros open a scope; namespaces carry values out of loops) and Python's operator semantics.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "text/jinja/ast.h"

namespace rlcpp::jinja {

std::string render(const Body& body, const nlohmann::ordered_json& variables);

}  // namespace rlcpp::jinja
