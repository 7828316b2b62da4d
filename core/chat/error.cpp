#include "core/chat/error.hpp"

namespace exo::chat {

const char* to_string(error_kind k) {
  switch (k) {
  case error_kind::syntax:
    return "syntax error";
  case error_kind::render:
    return "render error";
  case error_kind::raised:
    return "template raised";
  case error_kind::limit:
    return "limit";
  }
  return "error";
}

namespace {

std::string compose(error_kind kind, const std::string& detail,
                    std::size_t line, std::size_t column) {
  std::string out = "chat template ";
  out += to_string(kind);
  if (line > 0) {
    out += " at line " + std::to_string(line) + " column " +
           std::to_string(column);
  }
  out += ": ";
  out += detail;
  return out;
}

} // namespace

template_error::template_error(error_kind kind, std::string detail,
                               std::size_t line, std::size_t column)
    : std::runtime_error(compose(kind, detail, line, column)),
      kind_(kind),
      detail_(std::move(detail)),
      line_(line),
      column_(column) {
  // nop
}

} // namespace exo::chat
