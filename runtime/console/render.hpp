#pragma once

/// Renders console replies as readable tables or as JSON. Pure functions,
/// tested without a cluster.

#include "messages/cluster.hpp"

#include <string>
#include <vector>

namespace exo::console {

std::string table(const member_view& v, const std::string& coordinator);
std::string table(const std::vector<device_info>& devices);
std::string table(const std::vector<link_info>& links);
std::string table(const std::vector<actor_snapshot>& actors);
std::string table(const actor_snapshot& actor);

std::string json(const member_view& v, const std::string& coordinator);
std::string json(const std::vector<device_info>& devices);
std::string json(const std::vector<link_info>& links);
std::string json(const std::vector<actor_snapshot>& actors);
std::string json(const actor_snapshot& actor);

} // namespace exo::console
