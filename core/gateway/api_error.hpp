#pragma once

/// Errors of the OpenAI-compatible API: an HTTP status and OpenAI's error
/// object, `{"error":{"message","type","param","code"}}`, which every
/// OpenAI client library reads to raise its own exception types
/// (BadRequestError for 400, AuthenticationError for 401, NotFoundError for
/// 404, RateLimitError for 429, InternalServerError for 5xx).

#include "core/access/access_policy.hpp"

#include <string>

namespace exo::gateway {

/// One refused request: the status to answer with and the error object.
struct api_error {
  /// HTTP status: 400, 401, 404, 405, 413, 429, 431, 503, ...
  int status = 400;
  /// What went wrong, for people; names the offending value.
  std::string message;
  /// OpenAI's error type: invalid_request_error, authentication_error,
  /// not_found_error, rate_limit_error, server_error, ...
  std::string type = "invalid_request_error";
  /// The request field at fault ("max_tokens", "messages[2].content"), or
  /// empty (written as null).
  std::string param;
  /// A stable machine-readable code ("invalid_type", "model_not_found"),
  /// or empty (written as null).
  std::string code;
};

/// 400: a field of the request is missing, of the wrong type or out of
/// range.
api_error invalid_request(std::string message, std::string param = {},
                          std::string code = "invalid_value");

/// 400: the body is not JSON (or not an object).
api_error invalid_json(std::string message);

/// 401: a missing or refused bearer token.
api_error unauthorized(std::string message);

/// 403: the token is valid but lacks the permission (`needed`) or scope.
api_error forbidden(std::string message);

/// 429: the token's principal is over its rate limit or quota.
api_error rate_limited(std::string message);

/// 404: the model of the request is not served here.
api_error model_not_found(const std::string& model);

/// 404: no such endpoint.
api_error unknown_endpoint(const std::string& method,
                           const std::string& target);

/// 405: the endpoint exists but not for this method.
api_error method_not_allowed(const std::string& method,
                             const std::string& target);

/// 413: the body is larger than `limit` bytes.
api_error body_too_large(std::size_t limit);

/// 431: the request line and headers are larger than `limit` bytes.
api_error headers_too_large(std::size_t limit);

/// 429: `limit` requests are already admitted (queued or running).
api_error queue_full(std::size_t limit);

/// 429: no device has room for the request's model and context while the
/// jobs running hold their memory (it waited models.admission_wait_ms).
api_error no_room(std::string message);

/// 503: no capacity to run the request (no connection slot, no device).
api_error unavailable(std::string message);

/// A refused access check as the client sees it: 401 for a token that is
/// not one (malformed, forged, expired, revoked), 403 for a valid token
/// without `needed` (or out of its scope), 429 for a principal over its
/// rate limit or quota. The message names the reason, never the token.
api_error access_refusal(const access::decision& d,
                         access::permission needed);

/// The error object as compact JSON, without a trailing newline.
std::string to_json(const api_error& e);

} // namespace exo::gateway
