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

api_error forbidden(std::string message) {
  return {403, std::move(message), "permission_error", {},
          "insufficient_permissions"};
}

api_error rate_limited(std::string message) {
  return {429, std::move(message), "rate_limit_error", {},
          "rate_limit_exceeded"};
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

api_error no_room(std::string message) {
  return {429, "No device has room for this request while the running ones "
               "hold their memory; retry later: " + std::move(message),
          "rate_limit_error", {}, "insufficient_capacity"};
}

api_error unavailable(std::string message) {
  return {503, std::move(message), "server_error", {}, "unavailable"};
}

api_error access_refusal(const access::decision& d,
                         access::permission needed) {
  using access::decision_code;
  std::string why = d.reason.empty()
                      ? std::string{access::to_string(d.code)}
                      : d.reason;
  switch (d.code) {
    case decision_code::permission_denied:
    case decision_code::device_out_of_scope:
      return forbidden("The token of '" + d.principal + "' lacks the "
                       + std::string{access::to_string(needed)}
                       + " permission this endpoint needs: " + why);
    case decision_code::rate_limited:
    case decision_code::quota_exceeded:
      return rate_limited("'" + d.principal + "' is over its "
                          + (d.code == decision_code::rate_limited
                               ? "rate limit"
                               : "quota")
                          + ": " + why + "; retry later");
    default:
      return unauthorized("Refused token: " + why);
  }
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
