#include "core/gateway/api_error.hpp"

#include "core/text/json.hpp"

namespace exo::gateway {

api_error invalid_request(std::string message, std::string param,
                          std::string code) {
  return {400, std::move(message), "invalid_request_error", std::move(param),
          std::move(code)};
}

api_error invalid_json(std::string message) {
  return {400, "We could not parse the JSON body of your request: "
                 + std::move(message),
          "invalid_request_error", {}, "invalid_json"};
}

api_error unauthorized(std::string message) {
  return {401, std::move(message), "authentication_error", {},
          "invalid_api_key"};
}

api_error model_not_found(const std::string& model) {
  return {404, "The model '" + model + "' does not exist or is not served "
               "here (GET /v1/models lists the models)",
          "not_found_error", "model", "model_not_found"};
}

api_error unknown_endpoint(const std::string& method,
                           const std::string& target) {
  return {404, "Unknown endpoint: " + method + " " + target,
          "not_found_error", {}, "unknown_url"};
}

api_error method_not_allowed(const std::string& method,
                             const std::string& target) {
  return {405, "Method " + method + " is not allowed for " + target,
          "invalid_request_error", {}, "method_not_allowed"};
}

api_error body_too_large(std::size_t limit) {
  return {413, "The request body is larger than the limit of "
                 + std::to_string(limit) + " bytes",
          "invalid_request_error", {}, "request_too_large"};
}

api_error headers_too_large(std::size_t limit) {
  return {431, "The request line and headers are larger than the limit of "
                 + std::to_string(limit) + " bytes",
          "invalid_request_error", {}, "headers_too_large"};
}

api_error queue_full(std::size_t limit) {
  return {429, "Too many requests: " + std::to_string(limit)
                 + " are already queued or running; retry later",
          "rate_limit_error", {}, "queue_full"};
}

api_error unavailable(std::string message) {
  return {503, std::move(message), "server_error", {}, "unavailable"};
}

std::string to_json(const api_error& e) {
  text::json err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? text::json() : text::json(e.param);
  err["code"] = e.code.empty() ? text::json() : text::json(e.code);
  text::json out;
  out["error"] = std::move(err);
  return text::compact(out);
}

} // namespace exo::gateway
