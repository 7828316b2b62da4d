#include "core/chat/template.hpp"

#include "core/chat/lexer.hpp"
#include "core/chat/parser.hpp"

#include <stdexcept>

namespace exo::chat {

compiled_template::compiled_template(std::string source)
    : source_(std::move(source)) {
  program_ = parse(source_, tokenize(source_));
}

std::string compiled_template::render(const nlohmann::ordered_json& variables,
                                      const limits& lim) const {
  if (!variables.is_object() && !variables.is_null())
    throw template_error(error_kind::render,
                         "template variables must be a JSON object");
  interpreter in{source_, lim};
  auto globals = in.make_globals();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) {
      if (globals->vars.count(it.key()) != 0)
        throw template_error(error_kind::render,
                             "variable '" + it.key() +
                                 "' would shadow a built-in name");
      try {
        globals->set(it.key(), value::from_json(it.value()));
      } catch (const std::length_error& e) {
        throw template_error(error_kind::limit,
                             "variable '" + it.key() + "': " + e.what());
      }
    }
  }
  return in.render(program_, globals);
}

} // namespace exo::chat
