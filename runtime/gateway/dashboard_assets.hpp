#pragma once

/// The dashboard's files (runtime/gateway/dashboard/), embedded at build
/// time by cmake/embed_assets.cmake: the gateway serves them without
/// reading any file at run time.

#include <string_view>

namespace exo::gateway {

struct asset {
  const char* path;         ///< "/", "/app.js", "/style.css"
  const char* content_type; ///< with charset
  std::string_view body;
};

/// The asset served at `path` ("/" and "/index.html" are the page), or
/// null.
const asset* find_asset(std::string_view path);

} // namespace exo::gateway
