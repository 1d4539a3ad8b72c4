#include "src/cli/http_api.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "src/common/session.h"
#include "src/tls/tls_files.h"

namespace troupe {

using nlohmann::json;

// Where the HTTP API is and the token to use; an error message if unknown.
std::optional<ApiTarget> ResolveApi(const std::string& address_flag, const std::string& token_flag,
                                    const std::string& temp_dir, std::string* error) {
  ApiTarget target{address_flag, token_flag};
  if (target.url.empty() && std::getenv("TROUPE_API_ADDRESS")) {
    target.url = std::getenv("TROUPE_API_ADDRESS");
  }
  if (target.token.empty() && std::getenv("TROUPE_TOKEN"))
    target.token = std::getenv("TROUPE_TOKEN");
  auto session = Session::Latest(ResolveTempRoot(temp_dir));
  if (session.ok()) {
    if (target.url.empty()) {
      auto url = session->ReadFile("http_address");
      if (url.ok()) target.url = *url;
    }
    if (target.token.empty()) {
      auto token = session->ReadFile("token");
      if (token.ok()) target.token = std::string(absl::StripAsciiWhitespace(*token));
    }
  }
  if (target.url.empty()) {
    *error =
        "no HTTP API address: pass --address=http://HEAD:8265 or set TROUPE_API_ADDRESS "
        "(or run this on the head, started with `troupe start --head`)";
    return std::nullopt;
  }
  // The cluster CA: $TROUPE_TLS_DIR's, else the local session's (if it runs TLS).
  if (std::getenv(kTlsDirEnv) != nullptr && *std::getenv(kTlsDirEnv) != '\0') {
    target.ca_path = CaCertPath(std::getenv(kTlsDirEnv));
  } else if (session.ok() && access(CaCertPath(TlsDirOf(session->dir())).c_str(), R_OK) == 0) {
    target.ca_path = CaCertPath(TlsDirOf(session->dir()));
  }
  if (!absl::StartsWith(target.url, "http://") && !absl::StartsWith(target.url, "https://")) {
    target.url = (target.ca_path.empty() ? "http://" : "https://") + target.url;
  }
  if (absl::StartsWith(target.url, "https://") && target.ca_path.empty()) {
    *error = "no cluster CA to verify " + target.url +
             " against: set TROUPE_TLS_DIR to a folder "
             "holding the head's ca.pem (its <session>/tls)";
    return std::nullopt;
  }
  if (target.token.empty()) {
    *error = "no cluster token: pass --token or set TROUPE_TOKEN (the head's <session>/token)";
    return std::nullopt;
  }
  return target;
}

// A client for the API; an https:// one verifies the server against the cluster CA only.
std::unique_ptr<httplib::Client> MakeClient(const ApiTarget& api) {
  auto client = std::make_unique<httplib::Client>(api.url);
  if (!api.ca_path.empty()) {
    client->set_ca_cert_path(api.ca_path.c_str());
    client->enable_server_certificate_verification(true);
  }
  return client;
}

// What went wrong talking to `url`, and what to do about it.
std::string DescribeTransportError(const std::string& url, httplib::Error error) {
  std::string what;
  switch (error) {
    case httplib::Error::Connection:
      what = "the connection was refused or the host is unreachable";
      break;
    case httplib::Error::ConnectionTimeout:
      what = absl::StrCat("no connection within ", kConnectTimeoutS, " s");
      break;
    case httplib::Error::Read:
      what = "no complete answer in time (the server stopped answering)";
      break;
    case httplib::Error::SSLConnection:
      what = "the TLS handshake failed (is it an http:// server, or not Troupe's?)";
      break;
    case httplib::Error::SSLServerVerification:
      what = "its certificate is not signed by this cluster's CA (another cluster's head?)";
      break;
    default:
      what = httplib::to_string(error);
  }
  return absl::StrCat("cannot reach the head's HTTP API at ", url, ": ", what,
                      ". Is the head running (`troupe status`)? Point --address (or "
                      "TROUPE_API_ADDRESS) at its HTTP address, http(s)://HEAD:8265.");
}

Response Call(const ApiTarget& api, const std::string& method, const std::string& path,
              const std::string& body, const std::string& content_type) {
  auto client = MakeClient(api);
  client->set_connection_timeout(kConnectTimeoutS, 0);
  const int timeout_s = method == "PUT"      ? kUploadTimeoutS
                        : method == "DELETE" ? kDeleteTimeoutS
                                             : kCallTimeoutS;
  client->set_read_timeout(timeout_s, 0);
  client->set_write_timeout(timeout_s, 0);
  httplib::Headers headers = {{"Authorization", "Bearer " + api.token}};
  httplib::Result result =
      method == "GET"    ? client->Get(path.c_str(), headers)
      : method == "POST" ? client->Post(path.c_str(), headers, body, content_type.c_str())
      : method == "PUT"  ? client->Put(path.c_str(), headers, body, content_type.c_str())
                         : client->Delete(path.c_str(), headers);
  Response out;
  if (!result) {
    out.error = DescribeTransportError(api.url, result.error());
    return out;
  }
  out.status = result->status;
  out.body = json::parse(result->body, nullptr, false);
  if (out.body.is_discarded()) out.body = json{{"error", result->body}};
  return out;
}

// The error text of a failed call.
std::string Problem(const Response& r) {
  if (!r.error.empty()) return r.error;
  return absl::StrCat("HTTP ", r.status, ": ", r.body.value("error", r.body.dump()));
}

}  // namespace troupe
