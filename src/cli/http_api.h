// The `troupe` CLI's client of the head's HTTP API (src/http): where the API is (ResolveApi,
// ApiFlags: --address, $TROUPE_API_ADDRESS or the local session's http_address; the token from
// --token, $TROUPE_TOKEN or the local session; the cluster CA for https://), and one call with
// connect/read timeouts and a message naming the address when the head cannot be reached.
// Shared by every HTTP-based command (job, list, get, summary, memory, logs, timeline).
// Stateless; each Call makes its own client, so calls are thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/flag_parser.h"

namespace troupe {

struct ApiTarget {
  std::string url;  // http://host:port, or https:// on a TLS cluster
  std::string token;
  std::string ca_path;  // the cluster CA an https:// server must be signed by
};

// Where the HTTP API is and the token to use; an error message if unknown.
std::optional<ApiTarget> ResolveApi(const std::string& address_flag, const std::string& token_flag,
                                    const std::string& temp_dir, std::string* error);

// --address, --token and --temp-dir: how every HTTP-API command finds the head.
struct ApiFlags {
  std::string address, token, temp_dir;
  void Register(FlagParser* flags) {
    flags->AddString("address", &address, "The head's HTTP API, http://HOST:8265.");
    flags->AddString("token", &token, "Cluster token (default: $TROUPE_TOKEN or the local one).");
    flags->AddString("temp-dir", &temp_dir,
                    "Root of session directories (default: $TROUPE_TEMP_DIR or /tmp/troupe).");
  }
  std::optional<ApiTarget> Resolve(std::string* error) const {
    return ResolveApi(address, token, temp_dir, error);
  }
};

struct Response {
  int status = 0;
  nlohmann::json body;
  std::string error;  // transport error
};

// A client for the API; an https:// one verifies the server against the cluster CA only.
std::unique_ptr<httplib::Client> MakeClient(const ApiTarget& api);

// Connecting gives up after this; a call's answer is awaited kCallTimeoutS (an upload's longer).
inline constexpr int kConnectTimeoutS = 5;
inline constexpr int kCallTimeoutS = 10;
inline constexpr int kUploadTimeoutS = 120;
// DELETE /api/jobs/<id> answers once the job's working directory is removed (up to 60 s).
inline constexpr int kDeleteTimeoutS = 75;

// What went wrong talking to `url`, and what to do about it.
std::string DescribeTransportError(const std::string& url, httplib::Error error);

// One request with the timeouts above (PUT: kUploadTimeoutS, DELETE: kDeleteTimeoutS); a body
// that is not JSON comes back as {"error": body}.
Response Call(const ApiTarget& api, const std::string& method, const std::string& path,
              const std::string& body = "", const std::string& content_type = "application/json");

// The error text of a failed call.
std::string Problem(const Response& r);

}  // namespace troupe
