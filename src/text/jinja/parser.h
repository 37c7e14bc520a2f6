// Parsing: chunks from the lexer become the syntax tree (expressions with Python's precedence,
// statements for/if/elif/else/set/macro/break/continue/generation). A construct outside the subset
// is a UserError naming it and its position.
#pragma once

#include <vector>

#include "text/jinja/ast.h"

namespace rlcpp::jinja {

Body parse(std::vector<Chunk> chunks);

}  // namespace rlcpp::jinja
