// The Jinja subset: Python semantics where @huggingface/jinja differs, whitespace control, scoping,
// loop variables, and errors that name the construct and position.
#include "test_util.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"
#include "util/error.h"

using namespace rlcpp;
using OJson = nlohmann::ordered_json;

namespace {
std::string render(const std::string& source, const OJson& vars = OJson::object()) {
  return jinja::Template(source).render(vars);
}
}  // namespace

TEST(Jinja, PythonStringMethods) {
  // Python strips only the given characters; @huggingface/jinja 0.5.11 strips all whitespace here.
  EXPECT_EQ(render("[{{ '  ab\\n'.lstrip('\\n') }}]"), "[  ab\n]");
  EXPECT_EQ(render("[{{ '\\n\\n  ab  \\n'.strip('\\n') }}]"), "[  ab  ]");
  EXPECT_EQ(render("[{{ 'xxab'.lstrip('x') }}|{{ '  a  '.strip() }}]"), "[ab|a]");
  EXPECT_EQ(render("{{ 'a</think>b</think>c'.split('</think>')[-1] }}"), "c");
  EXPECT_EQ(render("{{ ' a  b '.split() }}"), "['a', 'b']");
  EXPECT_EQ(render("{{ 'abc'[::-1] }} {{ [1,2,3,4][1:3] }} {{ [1,2,3][::-1] }}"), "cba [2, 3] [3, 2, 1]");
  EXPECT_EQ(render("{{ 'Hello'.startswith(('x', 'He')) }} {{ 'Hello'.endswith('lo') }}"), "True True");
}

TEST(Jinja, WhitespaceControlAsTransformers) {
  // trim_blocks + lstrip_blocks: block lines leave no blank lines; `-` strips around tags.
  const std::string tpl = "{% for x in xs %}\n  {% if x %}\n{{ x }}\n  {% endif %}\n{% endfor %}";
  EXPECT_EQ(render(tpl, {{"xs", {1, 0, 2}}}), "1\n2\n");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("a {# comment #}\nb"), "a b");
  EXPECT_EQ(render("x\n"), "x");  // one trailing newline dropped (keep_trailing_newline=False)
}

TEST(Jinja, ScopingNamespacesAndLoops) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1,2] %}{% set ns.x = i %}{% endfor %}{{ ns.x }}"), "2");
  EXPECT_EQ(render("{% for m in ms %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
                   {{"ms", {"a", "b"}}}),
            "0TrueFalse2;1FalseTrue2;");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{% else %}none{% endfor %}"), "24");
  EXPECT_EQ(render("{% for x in [] %}{{ x }}{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b=1,a=2,");
  EXPECT_EQ(render("{% macro f(a, b='x') %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(2, b='y') }}"), "1x2y");
  EXPECT_EQ(render("{% set s %}in{{ 1 + 1 }}{% endset %}[{{ s }}]"), "[in2]");
}

TEST(Jinja, FiltersTestsAndValues) {
  EXPECT_EQ(render("{{ {'b': [1, 2.5, none, true], 'a': 'x\"y'} | tojson }}"), "{\"b\": [1, 2.5, null, true], \"a\": \"x\\\"y\"}");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ x is defined }} {{ y is none }} {{ 'a' is string }} {{ 3 is number }}", {{"y", nullptr}}),
            "False True True True");
  EXPECT_EQ(render("{{ [3,1,2] | length }} {{ 'abc' | upper }} {{ none | default('d') }} {{ u | default('d') }}"),
            "3 ABC None d");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 2 }} {{ 'ab' ~ 3 }} {{ 'x' * 3 }}"), "3 -4 1 0.5 ab3 xxx");
  EXPECT_EQ(render("{{ 'a' if false }}|{{ 'a' if 0 else 'b' }}|{{ 'yes' if 'ab' in 'cabd' }}"), "|b|yes");
  EXPECT_EQ(render("{{ ['a','b'] | join(', ') }} {{ [1,2] | first }} {{ [1,2] | last }}"), "a, b 1 2");
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}",
                   {{"ms", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}}}}),
            "['q']");
}

TEST(JinjaErrors, NameTheConstructAndPosition) {
  EXPECT_THROW_MSG(jinja::Template("ok\n{% include 'x' %}"), UserError, "2:1", "'{% include %}'");
  EXPECT_THROW_MSG(jinja::Template("{{ x | frobnicate }}").render(OJson::object()), UserError, "filter 'frobnicate'");
  EXPECT_THROW_MSG(jinja::Template("{% if x %}unclosed"), UserError, "missing {% endif %}");
  EXPECT_THROW_MSG(jinja::Template("{{ x"), UserError, "not closed");
  EXPECT_THROW_MSG(render("{{ raise_exception('Conversation roles must alternate') }}"), UserError,
                   "raise_exception: Conversation roles must alternate");
  EXPECT_THROW_MSG(render("{% set x.y = 1 %}", {{"x", 1}}), UserError, "namespace");
}

TEST(ChatTemplate, ChatMlFallback) {
  ChatTemplate chat(kChatMlTemplate, OJson::object());
  OJson messages = {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Q"}}};
  EXPECT_EQ(chat.render(messages, true), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render(messages, false), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n");
}
