#include "src/common/cluster_target.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "src/common/session.h"
#include "src/tls/tls_files.h"

namespace troupe {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

std::string WithDefaultPort(const std::string& address) {
  if (address.find(':') != std::string::npos) return address;
  return absl::StrCat(address, ":", kDefaultGcsPort);
}

absl::StatusOr<ClusterTarget> ResolveClusterTarget(const std::string& address_flag,
                                                   const std::string& token_flag,
                                                   const std::string& temp_root) {
  ClusterTarget target;
  target.address = !address_flag.empty() ? address_flag : Env("TROUPE_ADDRESS");
  if (target.address == "auto") target.address.clear();
  if (target.address == "local") {
    return absl::FailedPreconditionError(
        "TROUPE_ADDRESS=local asks a driver for an embedded cluster of its own; this needs a "
        "running cluster: unset TROUPE_ADDRESS (this machine's cluster) or pass --address");
  }
  if (target.address.empty()) {
    auto latest = Session::Latest(temp_root);
    if (latest.ok()) {
      auto address = latest->ReadFile("address");
      if (address.ok() && latest->LiveDaemons().empty()) {
        // A session left by a stopped or killed cluster: its address answers no more.
        std::string restart = "Start one with `troupe start --head`, or pass --address.";
        if (auto redis = latest->ReadFile("redis_address"); redis.ok() && !redis->empty()) {
          restart = absl::StrCat("Its state is in Redis at ", *redis,
                                 ": restart the head with `troupe start --head --redis-address=",
                                 *redis, " --port=", address->substr(address->rfind(':') + 1),
                                 "`, or pass --address.");
        }
        return absl::FailedPreconditionError(
            absl::StrCat("no Troupe cluster runs here: the latest session in ", temp_root, " (",
                         latest->dir(), ", head at ", *address, ") has no live process. ",
                         restart));
      }
      if (address.ok()) target.address = *address;
    }
  }
  if (target.address.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no Troupe cluster found: no --address given, TROUPE_ADDRESS is not set, and there is no "
        "session in ",
        temp_root, ". Start one with `troupe start --head`."));
  }
  target.address = WithDefaultPort(target.address);
  target.token = !token_flag.empty() ? token_flag : Env("TROUPE_TOKEN");
  target.tls_dir = Env(kTlsDirEnv);
  // The newest live-or-not local session of that cluster lends what was not given.
  auto sessions = Session::All(temp_root);
  for (auto it = sessions.rbegin(); it != sessions.rend(); ++it) {
    if (!target.token.empty() && !target.tls_dir.empty()) break;
    auto address = it->ReadFile("address");
    if (!address.ok() || WithDefaultPort(*address) != target.address) continue;
    auto token = it->ReadFile("token");
    if (!token.ok()) continue;
    if (target.token.empty()) target.token = *token;
    // Trust comes only from the session whose token is the one in use.
    if (target.tls_dir.empty() && *token == target.token &&
        access(CaCertPath(TlsDirOf(it->dir())).c_str(), R_OK) == 0) {
      target.tls_dir = TlsDirOf(it->dir());
    }
  }
  if (target.token.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("no cluster token for the head at ", target.address,
                     ": pass --token or set TROUPE_TOKEN (on the head: cat ", temp_root,
                     "/session_latest/token)"));
  }
  // The token travels as a header value: a newline or space in it (two tokens pasted together,
  // a stray line break) would make gRPC abort the process at the first call.
  for (const char c : target.token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the cluster token (--token or TROUPE_TOKEN) holds a character no token has (a space, "
          "line break or non-ASCII byte, code ",
          static_cast<int>(static_cast<unsigned char>(c)),
          "): use exactly the one line of the head's <session>/token"));
    }
  }
  return target;
}

std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{}, *result = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host.c_str(), "9", &hints, &result) != 0 || result == nullptr) return "127.0.0.1";
  std::string local = "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    char text[INET_ADDRSTRLEN];
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text))) {
      local = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  return local;
}

}  // namespace troupe
