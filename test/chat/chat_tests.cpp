// The chat-template interpreter on its own: what it renders, how it
// fails (errors that name line and column, raise_exception, limits), and
// the end-of-turn helpers the engine uses.

#include "core/chat/chat.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

using namespace exo;
using json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& src, const json& vars = json::object(),
                   const chat::limits& lim = {}) {
  chat::compiled_template t{src};
  return t.render(vars, lim);
}

chat::template_error error_of(const std::string& src,
                              const json& vars = json::object(),
                              const chat::limits& lim = {}) {
  try {
    render(src, vars, lim);
  } catch (const chat::template_error& e) {
    return e;
  }
  FAIL("expected a template_error for: " << src);
  throw; // unreachable
}

const std::string chatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'"
    " + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}";

} // namespace

TEST_CASE("a ChatML template renders system, user and the generation "
          "prompt") {
  chat::options opts;
  opts.add_generation_prompt = true;
  auto messages = chat::to_json({{"system", "Be brief."}, {"user", "Hi"}});
  CHECK(chat::render(chatml, messages, opts) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  opts.add_generation_prompt = false;
  CHECK(chat::render(chatml, messages, opts) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n");
}

TEST_CASE("whitespace control, trim_blocks and lstrip_blocks apply as in "
          "apply_chat_template") {
  CHECK(render("a  {{- 'b' -}}  c") == "abc");
  CHECK(render("{% if true %}\nx\n{% endif %}\ny") == "x\ny");
  CHECK(render("  {% if true %}x{% endif %}") == "x");
  CHECK(render("  {{ 'kept' }}") == "  kept");
  CHECK(render("one trailing newline is dropped\n\n") ==
        "one trailing newline is dropped\n");
  CHECK(render("a {#- comment -#} b") == "ab");
}

TEST_CASE("loops expose loop.index, first, last, length and take else") {
  json vars = {{"xs", {"a", "b", "c"}}};
  CHECK(render("{% for x in xs %}{{ loop.index }}{{ x }}"
               "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}"
               "/{{ loop.length }} {% endfor %}",
               vars) == "1aF/3 2b/3 3cL/3 ");
  CHECK(render("{% for x in [] %}x{% else %}none{% endfor %}") == "none");
  CHECK(render("{% for x in xs if x != 'b' %}{{ loop.index0 }}{{ x }}"
               "{% endfor %}",
               vars) == "0a1c");
}

TEST_CASE("namespace() carries values out of a loop, set does not") {
  CHECK(render("{% set ns = namespace(n=0) %}{% set m = 0 %}"
               "{% for i in range(4) %}{% set ns.n = ns.n + i %}"
               "{% set m = 9 %}{% endfor %}{{ ns.n }} {{ m }}") == "6 0");
}

TEST_CASE("filters, tests and string methods give the reference's results") {
  CHECK(render("{{ '  x '|trim }}|{{ [1,2]|length }}|{{ 'ab'|upper }}") ==
        "x|2|AB");
  CHECK(render("{{ {'a': [1, 2.5, none, 'q\"']}|tojson }}") ==
        "{\"a\": [1, 2.5, null, \"q\\\"\"]}");
  CHECK(render("{{ x|default('d') }} {{ none is none }} {{ x is defined }}") ==
        "d true false");
  CHECK(render("{{ 'a-b-c'.split('-') }} {{ 'abc'.startswith('ab') }} "
               "{{ 'abc'[::-1] }} {{ 'abc'[1:] }}") ==
        "[\"a\", \"b\", \"c\"] true cba bc");
  CHECK(render("{{ 1.0 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 'a' ~ 2.0 }}") ==
        "1.0 3.5 3 a2");
  // The reference ignores strip()'s argument and strips whitespace.
  CHECK(render("[{{ '\\n x \\n'.strip('\\n') }}]") == "[x]");
}

TEST_CASE("Unicode content keeps its bytes, lengths count UTF-16 units") {
  json vars = {{"s", "h\xC3\xA9llo \xF0\x9F\x98\x80"}};
  CHECK(render("{{ s }}|{{ s|length }}|{{ s[1] }}|{{ s[-2:] }}", vars) ==
        "h\xC3\xA9llo \xF0\x9F\x98\x80|8|\xC3\xA9| \xF0\x9F\x98\x80");
}

TEST_CASE("macros take defaults and keyword arguments, call passes caller") {
  CHECK(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}"
               "{{ m(1) }} {{ m(1, b=2) }}") == "1B 12");
  CHECK(render("{% macro w() %}[{{ caller() }}]{% endmacro %}"
               "{% call w() %}in{% endcall %}") == "[in]");
}

TEST_CASE("an unterminated tag is a syntax error naming its line and "
          "column") {
  auto e = error_of("line one\n  {{ messages[0].content ");
  CHECK(e.kind() == chat::error_kind::syntax);
  CHECK(e.line() == 2);
  CHECK(e.column() == 3);
  CHECK(std::string(e.what()).find("line 2 column 3") != std::string::npos);
  CHECK(std::string(e.what()).find("'{{'") != std::string::npos);

  auto s = error_of("{% for m in messages %}\n{{ m }}");
  CHECK(s.kind() == chat::error_kind::syntax);
  CHECK(std::string(s.what()).find("never closed") != std::string::npos);
  CHECK(std::string(s.what()).find("line 1 column 1") != std::string::npos);

  auto c = error_of("a {# no end");
  CHECK(c.kind() == chat::error_kind::syntax);
  CHECK(c.column() == 3);

  auto q = error_of("{{ 'open string }}");
  CHECK(q.kind() == chat::error_kind::syntax);
  CHECK(std::string(q.what()).find("string") != std::string::npos);

  auto bad = error_of("{% frobnicate %}");
  CHECK(std::string(bad.what()).find("frobnicate") != std::string::npos);
}

TEST_CASE("an unknown filter is a render error naming the filter and place") {
  auto e = error_of("ok\n{{ 'x' | no_such_filter }}");
  CHECK(e.kind() == chat::error_kind::render);
  CHECK(e.line() == 2);
  CHECK(std::string(e.what()).find("no_such_filter") != std::string::npos);
}

TEST_CASE("raise_exception ends the render with the template's message") {
  const std::string tmpl = "{% if messages[0].role != 'user' %}"
                           "{{ raise_exception('Conversation must start "
                           "with a user message') }}{% endif %}ok";
  json vars = {{"messages", chat::to_json({{"assistant", "x"}})}};
  auto e = error_of(tmpl, vars);
  CHECK(e.kind() == chat::error_kind::raised);
  CHECK(e.detail() == "Conversation must start with a user message");
  CHECK(std::string(e.what()).find("Conversation must start with a user "
                                   "message") != std::string::npos);
  json fine = {{"messages", chat::to_json({{"user", "x"}})}};
  CHECK(render(tmpl, fine) == "ok");
}

TEST_CASE("a runaway loop stops at the iteration limit") {
  chat::limits lim;
  lim.max_loop_iterations = 10'000;
  auto e = error_of("{% for i in range(1000) %}{% for j in range(1000) %}"
                    "{% endfor %}{% endfor %}",
                    json::object(), lim);
  CHECK(e.kind() == chat::error_kind::limit);
  CHECK(std::string(e.what()).find("iterations") != std::string::npos);
  auto huge = error_of("{% for i in range(1000000000000) %}{% endfor %}");
  CHECK(huge.kind() == chat::error_kind::limit);
}

TEST_CASE("output size, list growth and recursion are bounded") {
  chat::limits lim;
  lim.max_output_bytes = 1000;
  auto out = error_of("{% for i in range(100) %}{{ '0123456789abcdef' }}"
                      "{% endfor %}",
                      json::object(), lim);
  CHECK(out.kind() == chat::error_kind::limit);
  auto grow = error_of("{% set ns = namespace(s='x') %}{% for i in range(64) "
                       "%}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  CHECK(grow.kind() == chat::error_kind::limit);
  auto list = error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) "
                       "%}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  CHECK(list.kind() == chat::error_kind::limit);
  auto deep =
      error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  CHECK(deep.kind() == chat::error_kind::limit);
  std::string nested(5000, '(');
  auto parse = error_of("{{ " + nested + "1" + std::string(5000, ')') + " }}");
  CHECK(parse.kind() == chat::error_kind::syntax);
}

TEST_CASE("the end of turn is read from the template, not guessed") {
  chat::options opts;
  opts.eos_token = "<|im_end|>";
  chat::compiled_template t{chatml};
  CHECK(chat::end_of_turn(t, opts) == "<|im_end|>");
  CHECK(chat::stop_strings(t, opts) == std::vector<std::string>{"<|im_end|>"});

  chat::compiled_template llama3{
      "{% for m in messages %}{{ '<|start_header_id|>' + m.role + "
      "'<|end_header_id|>\\n\\n' + m.content | trim + '<|eot_id|>' }}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>"
      "assistant<|end_header_id|>\\n\\n' }}{% endif %}"};
  chat::options l3;
  l3.eos_token = "<|end_of_text|>";
  CHECK(chat::end_of_turn(llama3, l3) == "<|eot_id|>");
  CHECK(chat::stop_strings(llama3, l3) ==
        std::vector<std::string>{"<|eot_id|>", "<|end_of_text|>"});
  auto messages = chat::to_json({{"user", "Hi"}});
  CHECK(chat::generation_prompt(llama3, messages, l3) ==
        "<|start_header_id|>assistant<|end_header_id|>\n\n");

  auto [at, len] =
      chat::find_stop("Hello!<|eot_id|>junk", chat::stop_strings(llama3, l3));
  CHECK(at == 6);
  CHECK(len == std::string("<|eot_id|>").size());
}

TEST_CASE("a variable may not shadow a built-in name") {
  chat::compiled_template t{"{{ x }}"};
  CHECK_THROWS_AS(t.render(json{{"range", 1}}), chat::template_error);
}

TEST_CASE("mangled templates either render or fail with a template_error") {
  // Deterministic mutations of real-shaped templates: deleted, duplicated
  // and inserted template syntax. Nothing may crash, hang or throw anything
  // but a template_error.
  const std::vector<std::string> files = {
      "chatml.jinja",    "mistral_instruct.jinja", "llama2_chat.jinja",
      "llama31.jinja",   "qwen25.jinja",           "features.jinja",
      "edge_cases.jinja"};
  const std::string syntax = "{}%#-'\"()[]|.,:=~+*/ \n\\";
  std::mt19937 rng{1234};
  chat::limits lim;
  lim.max_steps = 200'000;
  lim.max_loop_iterations = 10'000;
  lim.max_output_bytes = 1 << 20;
  json vars = {{"messages", chat::to_json({{"system", "S"},
                                           {"user", "U \"q\" \n"},
                                           {"assistant", "A"},
                                           {"user", "B"}})},
               {"add_generation_prompt", true},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"}};
  std::size_t rendered = 0;
  std::size_t refused = 0;
  for (auto& file : files) {
    std::ifstream in{std::string(EXO_CHAT_TEST_DIR) + "/data/" + file};
    REQUIRE(in);
    std::string original{std::istreambuf_iterator<char>(in), {}};
    for (int round = 0; round < 150; ++round) {
      auto src = original;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !src.empty(); ++e) {
        auto at = rng() % src.size();
        switch (rng() % 3) {
        case 0:
          src.erase(at, 1 + rng() % 3);
          break;
        case 1:
          src.insert(at, 1, syntax[rng() % syntax.size()]);
          break;
        default:
          src.insert(at, src.substr(at, 1 + rng() % 8));
        }
      }
      try {
        chat::compiled_template t{src};
        t.render(vars, lim);
        ++rendered;
      } catch (const chat::template_error&) {
        ++refused;
      } catch (const std::exception& e) {
        FAIL("a mangled " << file << " threw " << e.what() << "\n" << src);
      }
    }
  }
  CHECK(rendered + refused == files.size() * 150);
  CHECK(refused > 0);
}

TEST_CASE("exploding values fail instead of allocating without bound") {
  chat::limits lim;
  lim.max_output_bytes = 100'000;
  // Each level repeats the previous eight times by reference: tiny in
  // memory, 8^10 elements as text.
  std::string fan = "{% set a = [1, 2, 3] %}";
  for (int i = 0; i < 10; ++i)
    fan += "{% set a = [a, a, a, a, a, a, a, a] %}";
  CHECK(error_of(fan + "{{ a|tojson }}", json::object(), lim).kind() ==
        chat::error_kind::limit);
  CHECK(error_of(fan + "{{ a }}", json::object(), lim).kind() ==
        chat::error_kind::limit);
  auto grown = error_of("{% set ns = namespace(s='0123456789') %}"
                        "{% for i in range(10) %}"
                        "{% set ns.s = ns.s.replace('', ns.s) %}"
                        "{% endfor %}",
                        json::object(), lim);
  CHECK(grown.kind() == chat::error_kind::limit);
  auto indented = error_of("{% set ns = namespace(s='a\\nb\\nc') %}"
                           "{% for i in range(30) %}"
                           "{% set ns.s = ns.s ~ '\\n' ~ ns.s|indent(1000) %}"
                           "{% endfor %}",
                           json::object(), lim);
  CHECK(indented.kind() == chat::error_kind::limit);
}

TEST_CASE("a namespace cannot hold what leads back to it, and values nest "
          "at most max_value_depth deep") {
  auto self = error_of("{% set ns = namespace() %}{% set ns.me = ns %}");
  CHECK(self.kind() == chat::error_kind::render);
  CHECK(std::string(self.what()).find("namespace") != std::string::npos);
  CHECK(
      error_of("{% set ns = namespace() %}{% set ns.l = [1, [ns]] %}").kind() ==
      chat::error_kind::render);
  CHECK(error_of("{% macro m() %}{% set ns.f = caller %}{% endmacro %}"
                 "{% set ns = namespace() %}{% call m() %}x{% endcall %}")
            .kind() == chat::error_kind::render);
  CHECK(error_of("{% set ns = namespace() %}"
                 "{% set other = namespace(inner=ns) %}")
            .kind() == chat::error_kind::render);
  // Plain values in namespaces and namespaces in lists stay allowed.
  CHECK(render("{% set ns = namespace(l=[]) %}{% set ns.l = ns.l + [1] %}"
               "{% set both = [ns, ns] %}{{ both|length }}{{ ns.l }}") ==
        "2[1]");
  auto deep = error_of("{% set ns = namespace(a=[]) %}"
                       "{% for i in range(1000) %}{% set ns.a = [ns.a] %}"
                       "{% endfor %}");
  CHECK(deep.kind() == chat::error_kind::limit);
  json nested = json::array();
  for (int i = 0; i < 200; ++i)
    nested = json::array({nested});
  CHECK_THROWS_AS(render("{{ x|length }}", json{{"x", nested}}),
                  chat::template_error);
}
