#include "core/tls/bootstrap.hpp"

#include "core/tls/cert_tool.hpp"
#include "core/tls/openssl_util.hpp"
#include "core/tls/tls_error.hpp"

namespace exo::tls {

local_material ensure_local_material(const std::string& state_dir,
                                     const std::string& node_name) {
  validate_name(node_name, "node name");
  if (node_name == "ca")
    throw tls_error(tls_errc::invalid_argument,
                    "invalid node name 'ca': reserved for the local CA files");
  if (state_dir.empty())
    throw tls_error(tls_errc::invalid_argument, "no state directory given");
  local_material result;
  result.ca_dir = state_dir + (state_dir.back() == '/' ? "tls" : "/tls");
  make_private_dir(result.ca_dir);
  auto ca = ca_paths_in(result.ca_dir);
  bool have_cert = detail::path_exists(ca.cert);
  bool have_key = detail::path_exists(ca.key);
  if (have_cert != have_key)
    throw tls_error(tls_errc::io,
                    "the local CA in '" + result.ca_dir + "' is incomplete ('" +
                        (have_cert ? ca.key : ca.cert) +
                        "' is missing); restore it or remove the other file");
  if (!have_cert) {
    ca_options opts;
    opts.name = "exo local CA (" + node_name + ")";
    init_ca(result.ca_dir, opts);
    result.created_ca = true;
  }
  result.files.certificate = result.ca_dir + "/" + node_name + ".crt";
  result.files.key = result.ca_dir + "/" + node_name + ".key";
  result.files.cafile = ca.cert;
  result.files.role = cert_role::node;
  bool have_node_cert = detail::path_exists(result.files.certificate);
  bool have_node_key = detail::path_exists(result.files.key);
  auto issue = [&](bool force) {
    auto ca_cred = load_ca(result.ca_dir);
    cert_options opts;
    opts.name = node_name;
    opts.role = cert_role::node;
    opts.alt_names = {"DNS:localhost", "IP:127.0.0.1"};
    auto issued = issue_certificate(ca_cred, opts);
    write_private_key(result.files.key, issued.key, {}, force);
    write_certificate(result.files.certificate, issued.cert, force);
    result.created_node_cert = true;
  };
  if (!have_node_cert && !have_node_key) {
    issue(false);
  } else if (have_node_cert != have_node_key) {
    throw tls_error(
        tls_errc::io,
        "the node certificate in '" + result.ca_dir + "' is incomplete ('" +
            (have_node_cert ? result.files.key : result.files.certificate) +
            "' is missing); restore it or remove the other file");
  }
  material_info info;
  try {
    info = check_material(result.files);
  } catch (const tls_error& err) {
    if (err.code() != tls_errc::expired || result.created_node_cert)
      throw;
    issue(true);
    info = check_material(result.files);
  }
  result.common_name = info.common_name;
  if (result.common_name != node_name)
    throw tls_error(tls_errc::name_mismatch,
                    "'" + result.files.certificate + "' is for '" +
                        result.common_name + "', not for node '" + node_name +
                        "'");
  result.instructions =
      "exo-node is using a local cluster CA in " + result.ca_dir +
      " (created on first start; keep " + ca.key +
      " secret).\n"
      "To let another node join, issue it a certificate from this CA:\n"
      "  exo-cert issue-node --ca-dir " +
      result.ca_dir +
      " --name OTHER-NODE --out OUT-DIR\n"
      "then copy OUT-DIR (OTHER-NODE.crt, OTHER-NODE.key, ca.crt) to that"
      " machine and set its TLS certificate, key and CA file to them.\n"
      "For a console or other client:\n"
      "  exo-cert issue-client --ca-dir " +
      result.ca_dir + " --name CLIENT --out OUT-DIR\n";
  return result;
}

} // namespace exo::tls
