#include "src/cli/log_stream.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/http/beast_await.h"

namespace troupe {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace websocket = boost::beast::websocket;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;

using http::Await;

struct Endpoint {
  bool tls = false;
  std::string host, port;
};

std::optional<Endpoint> ParseUrl(const std::string& url) {
  Endpoint endpoint;
  std::string rest;
  if (absl::StartsWith(url, "https://")) {
    endpoint.tls = true;
    rest = url.substr(8);
  } else if (absl::StartsWith(url, "http://")) {
    rest = url.substr(7);
  } else {
    return std::nullopt;
  }
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  endpoint.host = rest.substr(0, colon);
  endpoint.port = colon == std::string::npos ? (endpoint.tls ? "443" : "80") : rest.substr(colon + 1);
  if (endpoint.host.empty()) return std::nullopt;
  return endpoint;
}

// The server declined the upgrade: its JSON {"error": ...} as a Status.
absl::Status Declined(const bhttp::response<bhttp::string_body>& response) {
  const nlohmann::json body = nlohmann::json::parse(response.body(), nullptr, false);
  const std::string message =
      absl::StrCat("HTTP ", response.result_int(), ": ",
                   body.is_object() ? body.value("error", response.body()) : response.body());
  switch (response.result_int()) {
    case 404:
      return absl::NotFoundError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    default:
      return absl::FailedPreconditionError(message);
  }
}

template <typename Layer>
absl::Status ReadFrames(net::io_context& context, websocket::stream<Layer>& ws, const ApiTarget& api,
                    const Endpoint& endpoint, const std::string& target, int64_t* offset,
                    const std::function<void(std::string_view)>& on_text) {
  websocket::stream_base::timeout timeouts =
      websocket::stream_base::timeout::suggested(beast::role_type::client);
  timeouts.idle_timeout = std::chrono::seconds(120);  // the server pings every 30 s
  timeouts.keep_alive_pings = true;
  ws.set_option(timeouts);
  ws.set_option(websocket::stream_base::decorator([&api](websocket::request_type& request) {
    request.set(bhttp::field::authorization, "Bearer " + api.token);
  }));
  websocket::response_type response;
  if (beast::error_code ec = Await(context, [&](auto done) {
        ws.async_handshake(response, endpoint.host + ":" + endpoint.port, target, std::move(done));
      })) {
    if (ec == websocket::error::upgrade_declined) return Declined(response);
    return absl::UnavailableError(absl::StrCat("the WebSocket handshake with ", api.url,
                                               " failed: ", ec.message()));
  }
  beast::flat_buffer buffer;
  while (true) {
    beast::error_code ec = Await(context, [&](auto done) { ws.async_read(buffer, std::move(done)); });
    if (ec == websocket::error::closed) return absl::OkStatus();
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("the log stream from ", api.url, " broke: ", ec.message()));
    }
    const std::string text = beast::buffers_to_string(buffer.data());
    buffer.consume(buffer.size());
    *offset += static_cast<int64_t>(text.size());
    on_text(text);
  }
}

}  // namespace

absl::Status FollowJobLog(const ApiTarget& api, const std::string& id, int64_t* offset,
                          const std::function<void(std::string_view)>& on_text) {
  const std::optional<Endpoint> endpoint = ParseUrl(api.url);
  if (!endpoint) return absl::InvalidArgumentError("not an http(s):// address: " + api.url);
  const std::string target = absl::StrCat("/api/jobs/", id, "/logs/tail?offset=", *offset);
  net::io_context context;
  tcp::resolver resolver(context);
  beast::error_code ec;
  const auto addresses = resolver.resolve(endpoint->host, endpoint->port, ec);
  if (ec) return absl::UnavailableError("cannot resolve " + api.url + ": " + ec.message());
  beast::tcp_stream tcp_stream(context);
  tcp_stream.expires_after(std::chrono::seconds(kConnectTimeoutS));
  if ((ec = Await(context, [&](auto done) { tcp_stream.async_connect(addresses, std::move(done)); }))) {
    return absl::UnavailableError(DescribeTransportError(api.url, httplib::Error::Connection));
  }
  tcp_stream.expires_never();  // the WebSocket's own timeouts from here on
  if (!endpoint->tls) {
    websocket::stream<beast::tcp_stream> ws(std::move(tcp_stream));
    return ReadFrames(context, ws, api, *endpoint, target, offset, on_text);
  }
  ssl::context tls(ssl::context::tls_client);
  tls.load_verify_file(api.ca_path, ec);
  if (ec) return absl::FailedPreconditionError("cannot read the cluster CA " + api.ca_path);
  tls.set_verify_mode(ssl::verify_peer);
  websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws(std::move(tcp_stream), tls);
  ws.next_layer().set_verify_callback(ssl::host_name_verification(endpoint->host));
  SSL_set_tlsext_host_name(ws.next_layer().native_handle(), endpoint->host.c_str());
  beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(kConnectTimeoutS));
  if ((ec = Await(context, [&](auto done) {
         ws.next_layer().async_handshake(ssl::stream_base::client, std::move(done));
       }))) {
    return absl::UnavailableError(
        DescribeTransportError(api.url, httplib::Error::SSLServerVerification) + " (" +
        ec.message() + ")");
  }
  beast::get_lowest_layer(ws).expires_never();
  return ReadFrames(context, ws, api, *endpoint, target, offset, on_text);
}

}  // namespace troupe
