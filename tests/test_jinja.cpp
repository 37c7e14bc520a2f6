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

// A template is a program: recursion, loops and output are bounded, with an error naming the
// place (a macro calling itself once crashed `template` and `train` with a stack overflow).
TEST(JinjaErrors, WorkIsBounded) {
  EXPECT_THROW_MSG(render("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}"), UserError, "chat template 1:",
                   "nested deeper than 256 levels");
  EXPECT_THROW_MSG(render("{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"), UserError,
                   "more than 1000000 loop iterations");
  EXPECT_THROW_MSG(render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"), UserError, "more than 16 MiB");
  EXPECT_THROW_MSG(render("{{ 'x' * 100000000000 }}"), UserError, "more than 16 MiB");
  std::string parens(5000, '(');
  EXPECT_THROW_MSG(jinja::Template("{{ " + parens + "1" + std::string(5000, ')') + " }}"), UserError, "nested deeper than 200");
  std::string nots;
  for (int k = 0; k < 5000; ++k) nots += "not ";
  EXPECT_THROW_MSG(jinja::Template("{{ " + nots + "x }}"), UserError, "nested deeper than 200");
  std::string ifs, endifs;
  for (int k = 0; k < 5000; ++k) ifs += "{% if x %}", endifs += "{% endif %}";
  EXPECT_THROW_MSG(jinja::Template(ifs + endifs), UserError, "nested deeper than 200");
  std::string filters = "{{ 'a'";
  for (int k = 0; k < 5000; ++k) filters += " | upper";
  EXPECT_THROW_MSG(render(filters + " }}"), UserError, "expressions nested deeper than 256");
  // A macro recursing to a modest depth is fine.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"), "54321");
}

TEST(ChatTemplate, ChatMlFallback) {
  ChatTemplate chat(kChatMlTemplate, OJson::object());
  OJson messages = {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Q"}}};
  EXPECT_EQ(chat.render(messages, true), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.render(messages, false), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n");
}

// ---- The idioms of the published chat templates (Qwen2.5, Qwen3, Llama 3.x, DeepSeek-V3), offline:
// each template below is a cut-down piece of the real one, with the output transformers renders.

TEST(JinjaTemplates, Qwen25SystemDefaultAndToolsAsJson) {
  const std::string tpl =
      "{%- if tools %}\n"
      "    {{- '<|im_start|>system\\n' }}\n"
      "    {%- if messages[0]['role'] == 'system' %}\n"
      "        {{- messages[0]['content'] }}\n"
      "    {%- else %}\n"
      "        {{- 'You are Qwen.' }}\n"
      "    {%- endif %}\n"
      "    {%- for tool in tools %}\n"
      "        {{- \"\\n\" }}\n"
      "        {{- tool | tojson }}\n"
      "    {%- endfor %}\n"
      "    {{- '<|im_end|>\\n' }}\n"
      "{%- elif messages[0]['role'] != 'system' %}\n"
      "    {{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}\n"
      "{%- endif %}\n"
      "{%- for message in messages %}\n"
      "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
      "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
      "    {%- elif message.role == \"system\" and loop.first %}\n"
      "        {{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}\n"
      "    {{- '<|im_start|>assistant\\n' }}\n"
      "{%- endif %}\n";
  const OJson user = {{"role", "user"}, {"content", "2+2?"}};
  EXPECT_EQ(render(tpl, {{"messages", {user}}, {"add_generation_prompt", true}}),
            "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  const OJson tool = {{"type", "function"}, {"function", {{"name", "add"}, {"parameters", {{"a", 1}}}}}};
  EXPECT_EQ(render(tpl, {{"messages", {user}}, {"tools", {tool}}, {"add_generation_prompt", false}}),
            "<|im_start|>system\nYou are Qwen.\n{\"type\": \"function\", \"function\": {\"name\": \"add\", "
            "\"parameters\": {\"a\": 1}}}<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n");
}

TEST(JinjaTemplates, Qwen3LastQueryIndexAndThinkingSplit) {
  // Qwen3 walks the messages backwards with a namespace to find the last real user query, and
  // splits reasoning off an assistant turn at </think>.
  const std::string tpl =
      "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
      "{%- for message in messages[::-1] %}\n"
      "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
      "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and "
      "not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
      "        {%- set ns.multi_step_tool = false %}\n"
      "        {%- set ns.last_query_index = index %}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{{- ns.last_query_index }}|\n"
      "{%- for message in messages %}\n"
      "    {%- if message.role == \"assistant\" %}\n"
      "        {%- set content = message.content %}\n"
      "        {%- if '</think>' in content %}\n"
      "            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
      "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
      "        {%- endif %}\n"
      "        {%- if loop.index0 > ns.last_query_index %}\n"
      "            {{- '[' + reasoning_content.strip('\\n') + ']' }}\n"
      "        {%- endif %}\n"
      "        {{- content }}|\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- if enable_thinking is defined and enable_thinking is false %}\n"
      "    {{- '<think>\\n\\n</think>\\n\\n' }}\n"
      "{%- endif %}";
  const OJson messages = {{{"role", "user"}, {"content", "q1"}},
                          {{"role", "assistant"}, {"content", "<think>\nr1\n</think>\n\na1"}},
                          {{"role", "user"}, {"content", "q2"}},
                          {{"role", "assistant"}, {"content", "<think>\nr2\n</think>\n\na2"}},
                          {{"role", "user"}, {"content", "<tool_response>x</tool_response>"}}};
  EXPECT_EQ(render(tpl, {{"messages", messages}}), "2|a1|[r2]a2|");
  EXPECT_EQ(render(tpl, {{"messages", messages}, {"enable_thinking", false}}), "2|a1|[r2]a2|<think>\n\n</think>\n\n");
}

TEST(JinjaTemplates, Llama3SystemSlicingDefaultsAndIndentedJson) {
  const std::string tpl =
      "{{- bos_token }}\n"
      "{%- if not date_string is defined %}\n"
      "    {%- set date_string = \"26 Jul 2024\" %}\n"
      "{%- endif %}\n"
      "{%- if messages[0]['role'] == 'system' %}\n"
      "    {%- set system_message = messages[0]['content']|trim %}\n"
      "    {%- set messages = messages[1:] %}\n"
      "{%- else %}\n"
      "    {%- set system_message = \"\" %}\n"
      "{%- endif %}\n"
      "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
      "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
      "{{- system_message }}\n"
      "{{- \"<|eot_id|>\" }}\n"
      "{%- for message in messages %}\n"
      "    {%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}\n"
      "        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
      "    {%- endif %}\n"
      "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
      "{%- endfor %}\n"
      "{%- if tools is not none %}{{- tools[0] | tojson(indent=4) }}{%- endif %}";
  const OJson messages = {{{"role", "system"}, {"content", "  Be brief.\n"}}, {{"role", "user"}, {"content", " hi "}}};
  EXPECT_EQ(render(tpl, {{"messages", messages}, {"bos_token", "<|begin_of_text|>"}, {"tools", nullptr}}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nToday Date: 26 Jul 2024\n\nBe brief."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
  EXPECT_EQ(render(tpl, {{"messages", {messages[1]}}, {"bos_token", ""}, {"date_string", "1 Jan 2025"},
                         {"tools", {{{"name", "f"}}}}}),
            "<|start_header_id|>system<|end_header_id|>\n\nToday Date: 1 Jan 2025\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>{\n    \"name\": \"f\"\n}");
  const OJson bad = {{{"role", "assistant"}, {"content", "a"}}};
  EXPECT_THROW_MSG(render(tpl, {{"messages", bad}, {"bos_token", ""}, {"tools", nullptr}}), UserError,
                   "Conversation roles must alternate");
}

TEST(JinjaTemplates, DeepSeekNamespaceFlagsAndToolCalls) {
  const std::string tpl =
      "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
      "{% set ns = namespace(is_first=false, is_tool=false, system_prompt='', is_first_sp=true) %}"
      "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}"
      "{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}"
      "{%- else %}{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}"
      "{%- endif %}{%- endfor %}"
      "{{ bos_token }}{{ ns.system_prompt }}"
      "{%- for message in messages %}"
      "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}"
      "{%- elif message['role'] == 'assistant' and message['content'] is none %}"
      "{%- for tool in message['tool_calls'] %}"
      "{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜>' + tool['function']['name']}}"
      "{%- set ns.is_first = true -%}{%- else %}{{'\\n' + tool['function']['name']}}{%- endif %}"
      "{%- endfor %}{{'<｜tool▁calls▁end｜>'}}"
      "{%- elif message['role'] == 'assistant' %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
      "{%- endif %}{%- endfor -%}"
      "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}";
  const OJson messages = {
      {{"role", "system"}, {"content", "A"}}, {{"role", "system"}, {"content", "B"}}, {{"role", "user"}, {"content", "q"}},
      {{"role", "assistant"}, {"content", nullptr},
       {"tool_calls", {{{"function", {{"name", "f"}}}}, {{"function", {{"name", "g"}}}}}}},
      {{"role", "assistant"}, {"content", "done"}}};
  EXPECT_EQ(render(tpl, {{"messages", messages}, {"bos_token", "<s>"}, {"add_generation_prompt", true}}),
            "<s>A\n\nB<｜User｜>q<｜Assistant｜><｜tool▁calls▁begin｜>f\ng<｜tool▁calls▁end｜>"
            "<｜Assistant｜>done<｜end▁of▁sentence｜><｜Assistant｜>");
}

TEST(JinjaTemplates, MacrosLoopHelpersAndStringMethods) {
  EXPECT_EQ(render("{% macro render_item(x, sep=', ') -%}<{{ x | upper }}>{{ sep }}{%- endmacro %}"
                   "{% for x in ['a', 'b'] %}{{ render_item(x, sep=loop.cycle('+', '-')) }}{% endfor %}"),
            "<A>+<B>-");
  EXPECT_EQ(render("{% for x in 'héllo' %}{{ loop.revindex }}{{ x }}{% if loop.previtem %}({{ loop.previtem }}){% endif %}"
                   "{% endfor %}"),
            "5h4é(h)3l(é)2l(l)1o(l)");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'x-y'.replace('-', '+') }} "
                   "{{ 'abc'.find('c') }} {{ 'hello world'.title() }} {{ 'aXa'.count('a') }} {{ '-'.join(['1','2']) }}"),
            "['a', 'b', '', 'c'] ['a', 'b c'] x+y 2 Hello World 2 1-2");
  EXPECT_EQ(render("{{ messages[-1]['content'][-3:] }} {{ messages[1:][0].role }} {{ (messages | length) - 1 }}",
                   {{"messages", {{{"role", "user"}, {"content", "abcdef"}}, {{"role", "x"}, {"content", "z"}}}}}),
            "z x 1");
  EXPECT_EQ(render("{{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }} {{ [1, 2] | sum }} {{ [1, 1, 2] | unique | list }} "
                   "{{ 'a b  c' | wordcount }} {{ 2.567 | round(1) }} {{ '42' | int + 1 }}"),
            "3 1 3 [1, 2] 3 2.6 43");
}

TEST(JinjaTemplates, WhitespaceMarkersInsideLoops) {
  // `{%-`/`-%}` strip across newlines; lstrip_blocks removes indentation before a block tag only.
  EXPECT_EQ(render("<{%- for x in [1, 2] -%}\n   {{ x }}\n{%- endfor -%}\n>"), "<12>");
  EXPECT_EQ(render("{% for x in [1, 2] %}\n    {{ x }}\n{% endfor %}"), "    1\n    2\n");
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
}

// Integer arithmetic as Python's: floor division and modulo take the divisor's sign, and results
// beyond 64 bits (Python's ints are unbounded) become floats instead of overflowing (the fuzzer's
// finds: 566 ** 40, 5000503039666666666 * 2).
TEST(Jinja, IntegerArithmeticNeverOverflows) {
  EXPECT_EQ(render("{{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -8 % -1 }} {{ 2 ** 10 }}"), "-4 -4 2 -2 0 1024");
  EXPECT_EQ(render("{{ 9223372036854775807 % 9223372036854775806 }}"), "1");
  EXPECT_EQ(render("{{ (566 ** 40) > 9000000000000000000 }} {{ (5000503039666666666 * 2) > 9000000000000000000 }}"),
            "True True");
  EXPECT_EQ(render("{{ (9223372036854775807 + 1) > 9000000000000000000 }} {{ (-9223372036854775807 - 2) < 0 }}"),
            "True True");
}
