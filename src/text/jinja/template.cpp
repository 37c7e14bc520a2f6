#include "text/jinja/template.h"

#include "text/jinja/evaluator.h"
#include "text/jinja/parser.h"

namespace rlcpp::jinja {

struct Program {
  Body body;
};

Template::Template(const std::string& source) : program_(std::make_unique<Program>()) {
  program_->body = parse(lex(source));
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables) const { return jinja::render(program_->body, variables); }

}  // namespace rlcpp::jinja
