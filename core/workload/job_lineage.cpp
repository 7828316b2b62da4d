#include "core/workload/job_lineage.hpp"

#include <algorithm>

namespace exo::workload {

namespace {

bool names(const std::vector<std::string>& lineage, const std::string& key) {
  return std::find(lineage.begin(), lineage.end(), key) != lineage.end();
}

} // namespace

std::string node_of_job(const std::string& key) {
  return key.substr(0, key.rfind(':'));
}

bool lineage_believed(
    const std::string& self, const std::vector<std::string>& lineage,
    const std::set<std::string>& alive,
    const std::map<std::string, std::chrono::steady_clock::time_point>&
        went_down,
    std::chrono::steady_clock::time_point now) {
  for (auto& k : lineage) {
    auto node = node_of_job(k);
    if (node == self)
      continue; // its own copy: it knows whether it left
    if (!alive.count(node))
      continue;
    auto it = went_down.find(node);
    if (it == went_down.end() || now - it->second > lineage_window)
      return false;
  }
  return true;
}

std::string copy_holder(const std::string& self, const std::string& key,
                        const std::string& asker, const std::string& copy_key,
                        const std::string& taken_from,
                        const std::string& moved_to,
                        const std::vector<std::string>& asker_lineage,
                        const std::string& own_key) {
  if (copy_key != key && (taken_from.empty() || taken_from != key))
    return {};
  if (!own_key.empty() && names(asker_lineage, own_key))
    return {};
  if (!moved_to.empty())
    return taken_from.rfind(asker + ":", 0) == 0 ? moved_to : std::string{};
  return taken_from.empty() ? std::string{} : self;
}

bool backup_descends(const std::string& key, const std::string& asker,
                     const std::vector<std::string>& asker_lineage,
                     const std::string& backup_key, const std::string& origin,
                     const std::vector<std::string>& backup_lineage) {
  return backup_key != key && names(backup_lineage, key) && origin != asker &&
         !names(asker_lineage, backup_key);
}

} // namespace exo::workload
