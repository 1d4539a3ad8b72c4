#include "src/http/web_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/http/beast_await.h"
#include "src/http/task_views.h"  // ParseQuery

namespace troupe::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace websocket = boost::beast::websocket;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kHeaderLimit = 8 << 10;
constexpr uint64_t kMaxClientFrameBytes = 64 << 10;
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);  // a WebSocket's
constexpr auto kIdleTimeout = std::chrono::seconds(30);  // waiting for a request's header
constexpr auto kBodyTimeout = std::chrono::seconds(120);
constexpr auto kWriteTimeout = std::chrono::seconds(60);

// True if the peer has hung up (or the socket failed): a stream with nothing to write notices a
// client that left without waiting for a write to fail.
bool PeerHungUp(int fd) {
  pollfd entry{fd, POLLRDHUP, 0};
  return poll(&entry, 1, 0) > 0 && (entry.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

std::string PercentDecodePath(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(text[i + 1]) &&
        std::isxdigit(text[i + 2])) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

HttpRequest ToRequest(const bhttp::request<bhttp::string_body>& message, bool tls,
                      const std::string& remote_address) {
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = PercentDecodePath(request.target.substr(0, request.target.find('?')));
  request.query = ParseQuery(request.target);
  for (const auto& field : message) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request.tls = tls;
  request.remote_address = remote_address;
  return request;
}

HttpResponse Error(int status, const std::string& message) {
  return HttpResponse::Json(status, nlohmann::json{{"error", message}});
}

// RFC 6455 4.1: the key is 16 random bytes in base64, so 24 characters ending in "==".
bool ValidWebSocketKey(beast::string_view key) {
  if (key.size() != 24 || key.substr(22) != "==") return false;
  for (char c : key.substr(0, 22)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/') return false;
  }
  return std::string("AQgw").find(key[21]) != std::string::npos;  // no stray low bits
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

struct WebServer::Impl {
  net::io_context accept_context{1};
  tcp::acceptor acceptor{accept_context};
  std::optional<ssl::context> tls;
};

struct WebServer::Accepted {
  std::shared_ptr<net::io_context> context;
  tcp::socket socket;
  uint64_t slot;
  std::string address;
};

// One connection on its own thread. `Stream` is beast::tcp_stream or an ssl_stream over it.
template <typename Stream>
class WebServer::Connection {
 public:
  Connection(WebServer* server, net::io_context* context, Stream* stream, bool tls,
             const Accepted& accepted)
      : server_(server),
        context_(context),
        stream_(stream),
        tls_(tls),
        slot_(accepted.slot),
        address_(accepted.address) {}

  // The stream moved into a WebSocket that is now closed: nothing is left to shut down.
  bool upgraded() const { return upgraded_; }

  // Answers requests until the client closes, a timeout, an upgrade, an eviction, or Stop.
  void Serve() {
    const WebServerOptions& options = server_->options_;
    beast::flat_buffer buffer;
    while (!server_->stopping()) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(kHeaderLimit);
      parser.body_limit(options.max_body_bytes);
      Lowest().expires_after(authenticated_ ? Clock::duration(kIdleTimeout)
                                            : Clock::duration(options.head_timeout));
      beast::error_code ec = Await(*context_, [&](auto done) {
        bhttp::async_read_header(*stream_, buffer, parser, std::move(done));
      });
      if (ec == bhttp::error::header_limit) {
        Write(Error(431, absl::StrCat("request headers past ", kHeaderLimit, " bytes")), false, 11,
              false);
      } else if (ec == bhttp::error::body_limit) {  // the Content-Length said too much
        Write(TooLarge(options.max_body_bytes), false, 11, false);
      } else if (ec) {
        WriteIfEvicted();
      }
      if (ec) return;
      const Clock::time_point start = Clock::now();
      const bool upgrade = websocket::is_upgrade(parser.get());
      HttpRequest request = ToRequest(parser.get(), tls_, address_);
      Router::Match match = server_->router_->Find(request.method, request.path, upgrade);
      if (!upgrade && match.handler == nullptr && request.method == "HEAD") {
        // HEAD is GET without the body (RFC 9110 9.3.2): Write sends only the headers.
        match = server_->router_->Find("GET", request.path, false);
      }
      request.route = match.route;
      Admission admission;
      if (options.admit) {
        admission = options.admit(request);
      } else {
        admission.authenticated = true;
      }
      if (admission.refusal) {
        // The body is not read: the connection cannot carry another request unless there is none.
        const bool keep_alive = parser.is_done() && parser.get().keep_alive();
        Write(*admission.refusal, keep_alive, parser.get().version(), request.method == "HEAD");
        Observe(request, admission.refusal->status, start);
        if (!keep_alive) return;
        continue;
      }
      if (admission.authenticated && !authenticated_) {
        authenticated_ = true;
        server_->Authenticated(slot_);
      }
      if (upgrade) {
        Upgrade(parser.release(), std::move(request), match, start);
        return;
      }
      if (!authenticated_) {
        // Without credentials only small bodies (a login) are read, and quickly.
        const auto length = parser.content_length();
        if (length && *length > static_cast<uint64_t>(options.max_pending_body_bytes)) {
          const HttpResponse response =
              Error(413, absl::StrCat("a request without the cluster token may send at most ",
                                      options.max_pending_body_bytes,
                                      " bytes of body; this one has ", *length));
          Write(response, false, parser.get().version(), false);
          Observe(request, response.status, start);
          return;
        }
        parser.body_limit(options.max_pending_body_bytes);  // for a chunked body
      }
      if (parser.get()[bhttp::field::expect] == "100-continue") {
        bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, 11};
        Await(*context_, [&](auto done) { bhttp::async_write(*stream_, go_on, std::move(done)); });
      }
      Lowest().expires_after(authenticated_ ? Clock::duration(kBodyTimeout)
                                            : Clock::duration(options.head_timeout));
      ec = Await(*context_,
                 [&](auto done) { bhttp::async_read(*stream_, buffer, parser, std::move(done)); });
      if (ec == bhttp::error::body_limit) {
        const HttpResponse response =
            TooLarge(authenticated_ ? options.max_body_bytes : options.max_pending_body_bytes);
        Write(response, false, parser.get().version(), false);
        Observe(request, response.status, start);
        return;
      }
      if (ec) {
        WriteIfEvicted();
        return;
      }
      request.body = std::move(parser.get().body());
      const HttpResponse response = Route(request, match);
      const bool keep_alive = parser.get().keep_alive() && !server_->stopping();
      const bool written =
          Write(response, keep_alive, parser.get().version(), request.method == "HEAD");
      Observe(request, response.status, start);
      if (!written || !keep_alive) return;
    }
  }

 private:
  class Sink;

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(*stream_); }

  void Observe(const HttpRequest& request, int status, Clock::time_point start) {
    if (server_->options_.observe) server_->options_.observe(request, status, SecondsSince(start));
  }

  static HttpResponse TooLarge(int64_t limit) {
    return Error(
        413, absl::StrCat("the body is larger than ", limit, " bytes, the most this server reads"));
  }

  // A connection closed to make room (its reading side shut) tells its client why.
  void WriteIfEvicted() {
    if (!server_->Evicted(slot_)) return;
    const WebServerOptions& options = server_->options_;
    Write(Error(503, absl::StrCat(
                         "connection closed to make room: too many connections without a request "
                         "carrying the cluster token (at most ",
                         options.max_pending_per_address, " from one address (", address_, "), ",
                         options.max_pending_connections,
                         " in all); this was the oldest. Send the request as soon as you connect")),
          false, 11, false);
  }

  HttpResponse Route(HttpRequest& request, Router::Match& match) {
    if (match.handler == nullptr) {
      return match.path_known
                 ? Error(405, request.method + " is not allowed on " + request.path)
                 : Error(404, "no such endpoint: " + request.method + " " + request.path);
    }
    request.path_params = std::move(match.path_params);
    return (*match.handler)(request);
  }

  // Writes a whole or streamed response (only its headers when `head_only`: the answer to a
  // HEAD, whose Content-Length is that of the body not sent); false if the client is gone.
  bool Write(const HttpResponse& response, bool keep_alive, unsigned version, bool head_only) {
    if (!response.stream) {
      bhttp::response<bhttp::string_body> message{static_cast<bhttp::status>(response.status),
                                                  version};
      message.set(bhttp::field::server, "troupe");
      message.set(bhttp::field::content_type, response.content_type);
      for (const auto& [name, value] : response.headers) message.insert(name, value);
      message.body() = response.body;
      message.keep_alive(keep_alive);
      message.prepare_payload();
      Lowest().expires_after(kWriteTimeout);
      if (head_only) {
        bhttp::response_serializer<bhttp::string_body> serializer{message};
        return !Await(*context_, [&](auto done) {
          bhttp::async_write_header(*stream_, serializer, std::move(done));
        });
      }
      return !Await(*context_,
                    [&](auto done) { bhttp::async_write(*stream_, message, std::move(done)); });
    }
    bhttp::response<bhttp::empty_body> message{static_cast<bhttp::status>(response.status),
                                               version};
    message.set(bhttp::field::server, "troupe");
    message.set(bhttp::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message.insert(name, value);
    message.keep_alive(keep_alive);
    message.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> serializer{message};
    Lowest().expires_after(kWriteTimeout);
    if (Await(*context_, [&](auto done) {
          bhttp::async_write_header(*stream_, serializer, std::move(done));
        })) {
      return false;
    }
    if (head_only) return true;  // a HEAD's answer ends with the headers: no chunk, no body
    std::string piece;
    bool more = true;
    while (more && !server_->stopping()) {
      piece.clear();
      more = response.stream(&piece);
      if (piece.empty()) {
        if (PeerHungUp(Lowest().socket().native_handle())) return false;
        continue;
      }
      Lowest().expires_after(kWriteTimeout);
      if (Await(*context_, [&](auto done) {
            net::async_write(*stream_, bhttp::make_chunk(net::buffer(piece)), std::move(done));
          })) {
        return false;
      }
    }
    Lowest().expires_after(kWriteTimeout);
    return !Await(*context_, [&](auto done) {
      net::async_write(*stream_, bhttp::make_chunk_last(), std::move(done));
    });
  }

  // The request's answer when it may not upgrade (nullopt: it may). Admission has passed.
  std::optional<HttpResponse> RefuseUpgrade(const bhttp::request<bhttp::string_body>& message,
                                            HttpRequest& request, Router::Match& match) {
    if (match.websocket == nullptr) {
      return Error(404, "no WebSocket endpoint at " + request.path);
    }
    if (!ValidWebSocketKey(message[bhttp::field::sec_websocket_key])) {
      return Error(400,
                   "Sec-WebSocket-Key must be 16 random bytes in base64 (24 characters), as "
                   "RFC 6455 section 4.1 says");
    }
    request.path_params = std::move(match.path_params);
    if (match.websocket->admit) return match.websocket->admit(request);
    return std::nullopt;
  }

  void Upgrade(bhttp::request<bhttp::string_body> message, HttpRequest request,
               Router::Match& match, Clock::time_point start) {
    if (auto refusal = RefuseUpgrade(message, request, match)) {
      Write(*refusal, false, message.version(), false);
      Observe(request, refusal->status, start);
      return;
    }
    const WebSocketRoute* route = match.websocket;
    upgraded_ = true;
    websocket::stream<Stream> ws(std::move(*stream_));
    beast::get_lowest_layer(ws).expires_never();  // the WebSocket's own timeouts take over
    websocket::stream_base::timeout timeouts;
    timeouts.handshake_timeout = kHandshakeTimeout;
    timeouts.idle_timeout = std::chrono::seconds(60);
    timeouts.keep_alive_pings = true;  // a peer that answers no ping for 60 s is dropped
    ws.set_option(timeouts);
    ws.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& response) { response.set(bhttp::field::server, "troupe"); }));
    ws.read_message_max(kMaxClientFrameBytes);
    if (Await(*context_, [&](auto done) { ws.async_accept(message, std::move(done)); })) {
      server_->Forget(slot_);
      Observe(request, 400, start);  // Beast answered 400 with the reason
      return;
    }
    Sink sink(server_, context_, &ws);
    route->serve(request, sink);
    sink.Close();
    server_->Forget(slot_);  // before `ws` closes the socket
    Observe(request, 101, start);
  }

  WebServer* const server_;
  net::io_context* const context_;
  Stream* const stream_;
  const bool tls_;
  const uint64_t slot_;
  const std::string address_;
  bool authenticated_ = false;  // a request on it carried credentials
  bool upgraded_ = false;
};

// An accepted WebSocket: text frames out; a read always pending in the background, so close
// frames, pings and protocol errors from the client are handled while the route serves.
template <typename Stream>
class WebServer::Connection<Stream>::Sink final : public WebSocketSink {
 public:
  Sink(WebServer* server, net::io_context* context, websocket::stream<Stream>* ws)
      : server_(server), context_(context), ws_(ws) {
    ws_->text(true);
    Read();
  }

  bool SendText(std::string_view text) override {
    if (Closed()) return false;
    if (Await(*context_, [&](auto done) {
          ws_->async_write(net::buffer(text.data(), text.size()), std::move(done));
        })) {
      gone_ = true;
    }
    return !gone_;
  }

  bool Closed() override {
    context_->restart();
    context_->poll();  // a close frame, an error, a ping timer
    return gone_ || server_->stopping();
  }

  // Closes the WebSocket normally (unless the peer is gone) and ends the background read.
  void Close() {
    if (!gone_) {
      Await(*context_,
            [&](auto done) { ws_->async_close(websocket::close_code::normal, std::move(done)); });
    }
    beast::error_code ignored;
    beast::get_lowest_layer(*ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(*ws_).cancel();
    context_->restart();
    while (reading_ && context_->run_one() > 0) {
    }
  }

 private:
  void Read() {
    reading_ = true;
    ws_->async_read(incoming_, [this](beast::error_code ec, size_t) {
      if (ec) {
        gone_ = true;
        reading_ = false;
        return;
      }
      incoming_.consume(incoming_.size());  // nothing is expected from the client; dropped
      Read();
    });
  }

  WebServer* const server_;
  net::io_context* const context_;
  websocket::stream<Stream>* const ws_;
  beast::flat_buffer incoming_;
  bool gone_ = false;
  bool reading_ = false;
};

WebServer::WebServer(WebServerOptions options, const Router* router)
    : options_(std::move(options)), router_(router), impl_(std::make_unique<Impl>()) {}

WebServer::~WebServer() = default;

absl::Status WebServer::Bind() {
  if (!options_.cert_path.empty()) {
    impl_->tls.emplace(ssl::context::tls_server);
    impl_->tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                            ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                            ssl::context::no_tlsv1_1);
    beast::error_code ec;
    impl_->tls->use_certificate_chain_file(options_.cert_path, ec);
    if (!ec) impl_->tls->use_private_key_file(options_.key_path, ssl::context::pem, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat("cannot serve HTTPS with ",
                                                        options_.cert_path, " and ",
                                                        options_.key_path, ": ", ec.message()));
    }
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(options_.bind, ec);
  if (ec) return absl::InvalidArgumentError("bad bind address '" + options_.bind + "'");
  const tcp::endpoint endpoint{address, static_cast<unsigned short>(options_.port)};
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.bind, ":",
                                               options_.port,
                                               " (in use? pick --http-port): ", ec.message()));
  }
  port_ = acceptor.local_endpoint().port();
  return absl::OkStatus();
}

void WebServer::Serve() {
  AcceptNext();
  impl_->accept_context.run();
  // Idle keep-alive connections end at once; streams and WebSockets at their next step.
  absl::MutexLock lock(&mu_);
  for (const auto& [id, slot] : slots_) ::shutdown(slot.fd, SHUT_RD);
  mu_.Await(absl::Condition(
      +[](int* threads) { return *threads == 0; }, &threads_));
}

void WebServer::Stop() {
  stopping_ = true;
  impl_->accept_context.stop();
  absl::MutexLock lock(&mu_);
  for (const auto& [id, slot] : slots_) ::shutdown(slot.fd, SHUT_RD);
}

void WebServer::AcceptNext() {
  auto context = std::make_shared<net::io_context>(1);
  impl_->acceptor.async_accept(*context, [this, context](beast::error_code ec, tcp::socket socket) {
    if (stopping_) return;
    if (ec) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // e.g. out of descriptors
      AcceptNext();
      return;
    }
    beast::error_code ignored;
    const tcp::endpoint peer = socket.remote_endpoint(ignored);
    std::string address = ignored ? "?" : peer.address().to_string();
    if (std::optional<uint64_t> slot = Register(socket.native_handle(), address)) {
      auto accepted = std::make_shared<Accepted>(
          Accepted{context, std::move(socket), *slot, std::move(address)});
      std::thread([this, accepted] {
        RunConnection(*accepted);
        ThreadEnded();
      }).detach();
    } else {  // every slot is taken by a connection with credentials
      if (!impl_->tls) {
        const std::string body =
            absl::StrCat("{\"error\":\"the server has ", options_.max_connections,
                         " connections open, its limit; try again when one closes\"}");
        net::write(socket,
                   net::buffer(absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                                            "application/json\r\nContent-Length: ",
                                            body.size(), "\r\nConnection: close\r\n\r\n", body)),
                   ignored);
      }
      socket.close(ignored);
    }
    AcceptNext();
  });
}

std::optional<uint64_t> WebServer::Register(int fd, const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto same = pending_by_address_.find(address);
  if (same != pending_by_address_.end() && same->second >= options_.max_pending_per_address) {
    EvictOldestPendingLocked(&address);
  }
  if (pending_ >= options_.max_pending_connections) EvictOldestPendingLocked(nullptr);
  if (static_cast<int>(slots_.size()) >= options_.max_connections &&
      !EvictOldestPendingLocked(nullptr)) {
    return std::nullopt;
  }
  const uint64_t slot = next_slot_++;
  slots_.emplace(slot, Slot{fd, address});
  ++pending_;
  ++pending_by_address_[address];
  ++threads_;
  if (stopping_) ::shutdown(fd, SHUT_RD);
  return slot;
}

bool WebServer::EvictOldestPendingLocked(const std::string* address) {
  for (auto it = slots_.begin(); it != slots_.end(); ++it) {
    if (!it->second.pending || (address != nullptr && it->second.address != *address)) continue;
    // Its thread sees the end of its input at once, answers 503 and ends.
    ::shutdown(it->second.fd, SHUT_RD);
    DropPendingLocked(it->second.address);
    evicted_.insert(it->first);
    slots_.erase(it);
    return true;
  }
  return false;
}

void WebServer::DropPendingLocked(const std::string& address) {
  --pending_;
  auto it = pending_by_address_.find(address);
  if (it != pending_by_address_.end() && --it->second <= 0) pending_by_address_.erase(it);
}

void WebServer::Authenticated(uint64_t slot) {
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(slot);
  if (it == slots_.end() || !it->second.pending) return;
  it->second.pending = false;
  DropPendingLocked(it->second.address);
}

bool WebServer::Evicted(uint64_t slot) {
  absl::MutexLock lock(&mu_);
  return evicted_.count(slot) > 0;
}

void WebServer::ThreadEnded() {
  absl::MutexLock lock(&mu_);
  --threads_;
}

void WebServer::Forget(uint64_t slot) {
  absl::MutexLock lock(&mu_);
  evicted_.erase(slot);
  auto it = slots_.find(slot);
  if (it == slots_.end()) return;
  if (it->second.pending) DropPendingLocked(it->second.address);
  slots_.erase(it);
}

void WebServer::RunConnection(Accepted& accepted) {
  net::io_context& context = *accepted.context;
  beast::tcp_stream plain(std::move(accepted.socket));
  if (!impl_->tls) {
    Connection<beast::tcp_stream> connection(this, &context, &plain, false, accepted);
    connection.Serve();
    if (connection.upgraded()) return;
    beast::error_code ignored;
    plain.socket().shutdown(tcp::socket::shutdown_send, ignored);
  } else {
    beast::ssl_stream<beast::tcp_stream> secure(std::move(plain), *impl_->tls);
    beast::get_lowest_layer(secure).expires_after(options_.head_timeout);
    if (!Await(context, [&](auto done) {
          secure.async_handshake(ssl::stream_base::server, std::move(done));
        })) {
      Connection<beast::ssl_stream<beast::tcp_stream>> connection(this, &context, &secure, true,
                                                                  accepted);
      connection.Serve();
      if (connection.upgraded()) return;
      beast::get_lowest_layer(secure).expires_after(std::chrono::seconds(5));
      Await(context, [&](auto done) { secure.async_shutdown(std::move(done)); });
    }
  }
  Forget(accepted.slot);  // the stream closes the socket when it goes, just after
}

}  // namespace troupe::http
