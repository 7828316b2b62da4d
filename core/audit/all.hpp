#pragma once

/// Umbrella header of the audit library (exo_audit): hash-chained JSON-line
/// audit records, the log writer, queries, verification and the CLI.

#include "core/audit/audit_command.hpp"
#include "core/audit/audit_log.hpp"
#include "core/audit/event.hpp"
#include "core/audit/hash_chain.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/query.hpp"
#include "core/audit/record.hpp"
#include "core/audit/verify.hpp"
#include "core/text/json_escape.hpp"
