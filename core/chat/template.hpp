#pragma once

/// A compiled Jinja chat template: parsed once, rendered many times.

#include "core/chat/ast.hpp"
#include "core/chat/error.hpp"
#include "core/chat/interpreter.hpp"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace exo::chat {

class compiled_template {
 public:
  /// Parses `source`; throws template_error (syntax, with line and column).
  explicit compiled_template(std::string source);

  compiled_template(compiled_template&&) noexcept = default;
  compiled_template& operator=(compiled_template&&) noexcept = default;

  /// Renders with the entries of the JSON object `variables` as the
  /// template's variables. Throws template_error on evaluation errors,
  /// `raise_exception` (kind raised) and exceeded limits (kind limit); a
  /// variable that shadows a built-in name (true, range...) is an error.
  std::string render(const nlohmann::ordered_json& variables,
                     const limits& lim = {}) const;

  const std::string& source() const noexcept { return source_; }

 private:
  std::string source_;
  std::vector<node_ptr> program_;
};

} // namespace exo::chat
