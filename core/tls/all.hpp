#pragma once

// Umbrella header of exo_tls (no CAF). caf_tls.hpp (exo_tls_caf) is not
// included: it is the only part that needs CAF.

#include "core/tls/bootstrap.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/certificate.hpp"
#include "core/tls/challenge.hpp"
#include "core/tls/material.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"
