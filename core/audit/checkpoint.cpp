#include "core/audit/checkpoint.hpp"

#include "core/audit/hash_chain.hpp"
#include "core/audit/log_files.hpp"
#include "core/text/json.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/challenge.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::audit {

namespace {

constexpr std::uint64_t max_seq = 1ull << 63;
constexpr std::int64_t max_time = 1ll << 40;
constexpr std::uint64_t max_checkpoint_file = 64ull << 20;

std::string errno_text() {
  return std::strerror(errno);
}

void check_node_name(std::string_view node) {
  try {
    tls::validate_name(node, "checkpoint node name");
  } catch (const tls::tls_error& e) {
    throw audit_error(e.what());
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

/// Reads a regular file of at most `max` bytes; nothing when it is missing.
std::optional<std::string> read_bounded(const std::string& path,
                                        std::uint64_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT)
      return std::nullopt;
    throw audit_error("cannot open " + path + ": " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    auto why = errno_text();
    ::close(fd);
    throw audit_error("cannot stat " + path + ": " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw audit_error(path + " is not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max) {
    ::close(fd);
    throw audit_error(path + " is too large for a checkpoint file ("
                      + std::to_string(st.st_size) + " bytes, at most "
                      + std::to_string(max) + ")");
  }
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      auto why = errno_text();
      ::close(fd);
      throw audit_error("cannot read " + path + ": " + why);
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max) {
      ::close(fd);
      throw audit_error(path + " grew beyond " + std::to_string(max)
                        + " bytes while being read");
    }
  }
  ::close(fd);
  return out;
}

void write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    auto n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw audit_error("cannot write " + path + ": " + errno_text());
    done += static_cast<std::size_t>(n);
  }
}

/// Opens `path` for appending, 0600 (also when it existed with another mode).
int open_private(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    throw audit_error("cannot open " + path + ": " + errno_text());
  if (::fchmod(fd, 0600) != 0) {
    auto why = errno_text();
    ::close(fd);
    throw audit_error("cannot make " + path + " private (0600): " + why);
  }
  return fd;
}

void sync_close(int fd, const std::string& path) {
  if (::fsync(fd) != 0) {
    auto why = errno_text();
    ::close(fd);
    throw audit_error("cannot fsync " + path + ": " + why);
  }
  ::close(fd);
}

/// Writes `data` to `path` through a temporary file and a rename.
void replace_file(const std::string& path, const std::string& data) {
  auto tmp = path + ".tmp";
  int fd = open_private(tmp, O_TRUNC);
  try {
    write_all(fd, data, tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  sync_close(fd, tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw audit_error("cannot rename " + tmp + " to " + path + ": "
                      + errno_text());
}

std::vector<std::string_view> lines_of(std::string_view content) {
  std::vector<std::string_view> out;
  for_each_line(content, [&](std::string_view l, std::size_t, bool) {
    if (!l.empty())
      out.push_back(l);
    return true;
  });
  return out;
}

} // namespace

std::string format_utc(std::int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (::gmtime_r(&t, &tm) == nullptr)
    return std::to_string(unix_seconds);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string canonical_text(const checkpoint& cp) {
  std::string s{checkpoint_context};
  s += "\nnode=";
  s += cp.node;
  s += "\nseq=";
  s += std::to_string(cp.seq);
  s += "\nhead=";
  s += cp.head;
  s += "\nprev_seq=";
  s += std::to_string(cp.prev_seq);
  s += "\nprev_head=";
  s += cp.prev_head;
  s += "\nchain=";
  s += cp.chain;
  s += "\ntime=";
  s += std::to_string(cp.time);
  s += '\n';
  return s;
}

checkpoint sign_checkpoint(std::string node, std::uint64_t seq,
                           std::string head, std::int64_t time,
                           std::string cert_pem, const tls::private_key& key,
                           const checkpoint* prev) {
  check_node_name(node);
  if (seq == 0 || seq > max_seq)
    throw audit_error("checkpoint: seq must be 1..2^63, not "
                      + std::to_string(seq));
  if (!is_hex_digest(head))
    throw audit_error("checkpoint: head is not 64 lower-case hex digits");
  if (time < 0 || time > max_time)
    throw audit_error("checkpoint: time out of range");
  checkpoint cp;
  cp.node = std::move(node);
  cp.seq = seq;
  cp.head = std::move(head);
  cp.time = time;
  cp.cert_pem = std::move(cert_pem);
  cp.prev_head = std::string{genesis_hash};
  if (prev != nullptr) {
    if (prev->node != cp.node || prev->seq >= cp.seq)
      throw audit_error("checkpoint: the previous checkpoint must be of the"
                        " same node and below seq "
                        + std::to_string(cp.seq));
    cp.prev_seq = prev->seq;
    cp.prev_head = prev->head;
    cp.chain = prev->chain;
  } else {
    try {
      auto id = tls::make_nonce();
      append_hex(cp.chain, id.data(), id.size());
    } catch (const tls::tls_error& e) {
      throw audit_error(std::string{"checkpoint: "} + e.what());
    }
  }
  if (!is_hex_digest(cp.chain))
    throw audit_error("checkpoint: the previous checkpoint has no chain id");
  try {
    cp.sig = tls::sign_message(key, canonical_text(cp), "audit checkpoint");
  } catch (const tls::tls_error& e) {
    throw audit_error(std::string{"checkpoint: "} + e.what());
  }
  return cp;
}

std::string to_line(const checkpoint& cp) {
  std::string sig;
  append_hex(sig, cp.sig.data(), cp.sig.size());
  text::json j = text::json::object();
  j["checkpoint"] = 1;
  j["node"] = cp.node;
  j["seq"] = cp.seq;
  j["head"] = cp.head;
  j["prev_seq"] = cp.prev_seq;
  j["prev_head"] = cp.prev_head;
  j["chain"] = cp.chain;
  j["time"] = cp.time;
  j["cert"] = cp.cert_pem;
  j["sig"] = sig;
  return text::compact(j);
}

checkpoint parse_checkpoint(std::string_view line) {
  if (!line.empty() && line.back() == '\n')
    line.remove_suffix(1);
  if (line.size() > max_checkpoint_line)
    throw audit_error("checkpoint line too long (" + std::to_string(line.size())
                      + " bytes, at most "
                      + std::to_string(max_checkpoint_line) + ")");
  if (line.empty())
    throw audit_error("empty checkpoint line");
  text::json j;
  try {
    j = text::json::parse(line.begin(), line.end());
  } catch (const std::exception&) {
    throw audit_error("checkpoint line is not JSON");
  }
  if (!j.is_object())
    throw audit_error("checkpoint line is not a JSON object");
  static const char* const keys[] = {"checkpoint", "node",     "seq",
                                     "head",       "prev_seq", "prev_head",
                                     "chain",      "time",     "cert",
                                     "sig"};
  for (auto& [k, v] : j.items()) {
    bool known = false;
    for (auto* want : keys)
      known = known || k == want;
    if (!known)
      throw audit_error("checkpoint has an unknown field \"" + k.substr(0, 64)
                        + "\"");
  }
  for (auto* want : keys)
    if (!j.contains(want))
      throw audit_error(std::string{"checkpoint lacks the field \""} + want
                        + "\"");
  auto& v = j["checkpoint"];
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() != 1)
    throw audit_error("checkpoint: \"checkpoint\" must be 1 (the version)");
  checkpoint cp;
  if (!j["node"].is_string())
    throw audit_error("checkpoint: \"node\" must be a string");
  cp.node = j["node"].get<std::string>();
  check_node_name(cp.node);
  auto& seq = j["seq"];
  if (!seq.is_number_unsigned() || seq.get<std::uint64_t>() == 0
      || seq.get<std::uint64_t>() > max_seq)
    throw audit_error("checkpoint: \"seq\" must be an integer in 1..2^63");
  cp.seq = seq.get<std::uint64_t>();
  if (!j["head"].is_string() || !is_hex_digest(j["head"].get<std::string>()))
    throw audit_error("checkpoint: \"head\" must be 64 lower-case hex digits");
  cp.head = j["head"].get<std::string>();
  auto& ps = j["prev_seq"];
  if (!ps.is_number_unsigned() || ps.get<std::uint64_t>() >= cp.seq)
    throw audit_error("checkpoint: \"prev_seq\" must be an integer below"
                      " \"seq\"");
  cp.prev_seq = ps.get<std::uint64_t>();
  if (!j["prev_head"].is_string()
      || !is_hex_digest(j["prev_head"].get<std::string>()))
    throw audit_error("checkpoint: \"prev_head\" must be 64 lower-case hex"
                      " digits");
  cp.prev_head = j["prev_head"].get<std::string>();
  if (cp.prev_seq == 0 && cp.prev_head != genesis_hash)
    throw audit_error("checkpoint: \"prev_head\" must be 64 zeros when"
                      " \"prev_seq\" is 0");
  if (!j["chain"].is_string()
      || !is_hex_digest(j["chain"].get<std::string>()))
    throw audit_error("checkpoint: \"chain\" must be 64 lower-case hex"
                      " digits");
  cp.chain = j["chain"].get<std::string>();
  auto& t = j["time"];
  if (!t.is_number_integer() || t.get<std::int64_t>() < 0
      || t.get<std::int64_t>() > max_time)
    throw audit_error("checkpoint: \"time\" must be seconds since the epoch"
                      " (0..2^40)");
  cp.time = t.get<std::int64_t>();
  if (!j["cert"].is_string())
    throw audit_error("checkpoint: \"cert\" must be a string");
  cp.cert_pem = j["cert"].get<std::string>();
  if (cp.cert_pem.empty() || cp.cert_pem.size() > tls::max_peer_cert_size
      || cp.cert_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    throw audit_error("checkpoint: \"cert\" must be a PEM certificate of at"
                      " most "
                      + std::to_string(tls::max_peer_cert_size) + " bytes");
  if (!j["sig"].is_string())
    throw audit_error("checkpoint: \"sig\" must be a string");
  auto sig = j["sig"].get<std::string>();
  if (sig.empty() || sig.size() % 2 != 0
      || sig.size() > 2 * tls::max_signature_size)
    throw audit_error("checkpoint: \"sig\" must be an even number of hex"
                      " digits, at most "
                      + std::to_string(2 * tls::max_signature_size));
  cp.sig.reserve(sig.size() / 2);
  for (std::size_t i = 0; i < sig.size(); i += 2) {
    int hi = hex_value(sig[i]);
    int lo = hex_value(sig[i + 1]);
    if (hi < 0 || lo < 0)
      throw audit_error("checkpoint: \"sig\" has a character that is not a"
                        " lower-case hex digit");
    cp.sig.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  return cp;
}

void verify_checkpoint(const checkpoint& cp, const tls::trust_store& ca) {
  std::string cn;
  try {
    cn = tls::verify_message(cp.cert_pem, ca, canonical_text(cp), cp.sig,
                             tls::cert_role::node, "audit checkpoint");
  } catch (const tls::tls_error& e) {
    throw audit_error("checkpoint of " + cp.node + " (seq "
                      + std::to_string(cp.seq) + ") does not verify: "
                      + e.what());
  }
  if (cn != cp.node)
    throw audit_error("checkpoint claims node \"" + cp.node
                      + "\" but is signed with the certificate of \"" + cn
                      + "\"");
}

checkpoint read_checkpoint(std::string_view line, const tls::trust_store& ca) {
  auto cp = parse_checkpoint(line);
  verify_checkpoint(cp, ca);
  return cp;
}

std::vector<checkpoint> load_checkpoints(const std::string& path,
                                         const tls::trust_store& ca) {
  auto content = read_bounded(path, max_checkpoint_file);
  if (!content)
    throw audit_error("cannot open " + path + ": no such file");
  std::vector<checkpoint> out;
  std::size_t number = 0;
  for_each_line(*content, [&](std::string_view l, std::size_t n, bool) {
    number = n;
    if (l.empty())
      return true;
    try {
      out.push_back(read_checkpoint(l, ca));
    } catch (const audit_error& e) {
      throw audit_error(path + " line " + std::to_string(number) + ": "
                        + e.what());
    }
    return true;
  });
  return out;
}

std::string describe(const checkpoint& cp) {
  return "checkpoint of " + cp.node + " signed at " + format_utc(cp.time);
}

void append_checkpoint(const std::string& path, const checkpoint& cp,
                       std::size_t keep) {
  if (keep == 0)
    keep = 1;
  auto line = to_line(cp) + "\n";
  int fd = open_private(path, O_APPEND);
  try {
    write_all(fd, line, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  sync_close(fd, path);
  auto content = read_bounded(path, max_checkpoint_file);
  if (!content)
    return;
  auto lines = lines_of(*content);
  if (lines.size() <= 2 * keep)
    return;
  std::string kept;
  for (auto i = lines.size() - keep; i < lines.size(); ++i) {
    kept.append(lines[i]);
    kept += '\n';
  }
  replace_file(path, kept);
}

const char* to_string(witness_verdict v) noexcept {
  switch (v) {
    case witness_verdict::first:
      return "first";
    case witness_verdict::newer:
      return "newer";
    case witness_verdict::same:
      return "same";
    case witness_verdict::rollback:
      return "rollback";
    case witness_verdict::fork:
      return "fork";
  }
  return "?";
}

witness_verdict compare(const std::optional<checkpoint>& held,
                        const checkpoint& offered) noexcept {
  if (!held)
    return witness_verdict::first;
  if (offered.seq > held->seq) {
    if (offered.chain != held->chain || offered.prev_seq < held->seq
        || (offered.prev_seq == held->seq && offered.prev_head != held->head))
      return witness_verdict::fork;
    return witness_verdict::newer;
  }
  if (offered.seq < held->seq)
    return witness_verdict::rollback;
  return offered.head == held->head ? witness_verdict::same
                                    : witness_verdict::fork;
}

std::string witness_path(const std::string& dir, std::string_view node) {
  check_node_name(node);
  std::string p = dir;
  p += '/';
  p += node;
  p += ".checkpoint";
  return p;
}

std::optional<checkpoint> read_witness(const std::string& path,
                                       const tls::trust_store& ca) {
  auto content = read_bounded(path, max_checkpoint_line + 1);
  if (!content)
    return std::nullopt;
  auto lines = lines_of(*content);
  if (lines.empty())
    return std::nullopt;
  try {
    return read_checkpoint(lines.back(), ca);
  } catch (const audit_error& e) {
    throw audit_error(path + ": " + e.what());
  }
}

void write_witness(const std::string& path, const checkpoint& cp) {
  replace_file(path, to_line(cp) + "\n");
}

void keep_evidence(const std::string& path, const checkpoint& cp,
                   std::size_t max_lines) {
  auto content = read_bounded(path, max_checkpoint_file);
  if (content && lines_of(*content).size() >= max_lines)
    return;
  int fd = open_private(path, O_APPEND);
  try {
    write_all(fd, to_line(cp) + "\n", path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  sync_close(fd, path);
}

} // namespace exo::audit
