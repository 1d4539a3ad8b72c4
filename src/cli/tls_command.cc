// `troupe tls make-ca --out=DIR`: makes a cluster CA (ca.crt, ca.key) for `troupe start --head
// --ca-cert=... --ca-key=...`, e.g. to keep in a Kubernetes Secret, so the CA (and its pin) is
// known before any head starts. The same GenerateCa the head uses, so the certificate is what
// src/tls expects (ECDSA P-256, CA:TRUE, keyCertSign).
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/common/flag_parser.h"
#include "src/tls/certificates.h"
#include "src/tls/tls_files.h"

namespace troupe {
namespace {

int Fail(const std::string& message, int code = 1) { return FailCommand("tls", message, code); }

int MakeCa(const std::vector<std::string>& args) {
  std::string out, name = "troupe";
  FlagParser flags("troupe tls make-ca",
                   "Makes a cluster CA: DIR/ca.crt (the certificate every node trusts) and "
                   "DIR/ca.key (its private key, mode 0600: only the head needs it). Start the "
                   "head with --ca-cert=DIR/ca.crt --ca-key=DIR/ca.key and nodes with "
                   "--ca-cert=DIR/ca.crt (or the printed --ca-cert-hash).");
  flags.AddString("out", &out, "The folder to write ca.crt and ca.key into (created if missing).");
  flags.AddString("name", &name, "Goes into the CA's name: \"Troupe cluster CA <name>\".");
  flags.SetEpilog(
      "Example (Kubernetes):\n"
      "  troupe tls make-ca --out=troupe-ca\n"
      "  kubectl create secret generic troupe-ca --from-file=ca.crt=troupe-ca/ca.crt "
      "--from-file=ca.key=troupe-ca/ca.key");
  if (auto status = flags.Parse(args); !status.ok()) return Fail(std::string(status.message()), 2);
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) {
    return Fail(absl::StrCat("unexpected argument '", flags.positional()[0], "'"), 2);
  }
  if (out.empty()) return Fail("make-ca needs --out=DIR, the folder for ca.crt and ca.key", 2);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const std::string cert_path = out + "/ca.crt", key_path = out + "/ca.key";
  for (const std::string& path : {cert_path, key_path}) {
    if (access(path.c_str(), F_OK) == 0) {
      return Fail(absl::StrCat(path, " exists: not overwriting a CA (nodes may trust it); "
                                     "remove it first or pick another --out"));
    }
  }
  auto ca = GenerateCa(name);
  if (!ca.ok()) return Fail(std::string(ca.status().message()));
  auto pin = CaPin(ca->cert_pem);
  if (!pin.ok()) return Fail(std::string(pin.status().message()));
  // The key first, so a failure never leaves a certificate without its key.
  for (auto status : {WriteFileWithMode(key_path, ca->key_pem, 0600),
                      WriteFileWithMode(cert_path, ca->cert_pem, 0644)}) {
    if (!status.ok()) return Fail(std::string(status.message()));
  }
  printf("Made a cluster CA (ECDSA P-256, valid %lld days):\n",
         static_cast<long long>(kCaLifetime / absl::Hours(24)));
  printf("  %s  certificate: every node trusts it (--ca-cert)\n", cert_path.c_str());
  printf("  %s  private key, mode 0600: for the head only (--ca-key)\n", key_path.c_str());
  printf("  pin: %s (--ca-cert-hash)\n", pin->c_str());
  return 0;
}

}  // namespace

int TlsCommand(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "make-ca") {
    return MakeCa(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    printf("Usage: troupe tls make-ca --out=DIR [--name=NAME]\n"
           "  Makes a cluster CA (ca.crt, ca.key) for `troupe start --head --ca-cert=... "
           "--ca-key=...`; `troupe tls make-ca --help` shows its flags.\n");
    return 0;
  }
  return Fail("the subcommand is `make-ca`: troupe tls make-ca --out=DIR (see troupe tls --help)",
              2);
}

}  // namespace troupe
