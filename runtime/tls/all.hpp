#pragma once

// Umbrella header of exo_tls (no CAF). caf_tls.hpp (exo_tls_caf) is not
// included: it is the only part that needs CAF.

#include "runtime/tls/bootstrap.hpp"
#include "runtime/tls/cert_tool.hpp"
#include "runtime/tls/certificate.hpp"
#include "runtime/tls/challenge.hpp"
#include "runtime/tls/material.hpp"
#include "runtime/tls/private_key.hpp"
#include "runtime/tls/tls_error.hpp"
#include "runtime/tls/trust_store.hpp"
