#pragma once

/// Umbrella header of the audit library (exo_audit): hash-chained JSON-line
/// audit records, the log writer, queries, verification and the CLI.

#include "actors/audit/audit_command.hpp"
#include "actors/audit/audit_log.hpp"
#include "actors/audit/event.hpp"
#include "actors/audit/hash_chain.hpp"
#include "actors/audit/log_files.hpp"
#include "actors/audit/query.hpp"
#include "actors/audit/record.hpp"
#include "actors/audit/verify.hpp"
#include "runtime/text/json_escape.hpp"
