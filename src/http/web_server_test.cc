// WebServer over real sockets on loopback: the connection cap answers 503 and frees its slot when
// a connection closes, HEAD gets headers only, and Stop ends Serve with connections open.
// Hostile clients without the token: hundreds of half-open connections do not keep out a client
// with it, a pending connection must send its request head quickly, the per-address cap closes the
// oldest with a 503 saying why, and a request without the token is refused before its body is
// read.
#include "src/http/web_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "src/common/wait_until.h"

namespace troupe::http {
namespace {

// A blocking TCP client socket connected to 127.0.0.1:port from `from` (-1 on failure).
int Connect(int port, const char* from = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in source{};
  source.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &source.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval timeout{10, 0};  // a read that would hang fails the test instead
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

// Sends `request` and reads until the response's headers and `body_bytes` of body have arrived
// (or the server closes).
std::string Exchange(int fd, const std::string& request, size_t body_bytes) {
  if (!request.empty()) ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  while (true) {
    const size_t end = response.find("\r\n\r\n");
    if (end != std::string::npos && response.size() >= end + 4 + body_bytes) break;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, n);
  }
  return response;
}

class WebServerTest : public ::testing::Test {
 protected:
  void Start(int max_connections) {
    WebServerOptions options;
    options.max_connections = max_connections;
    Start(options);
  }
  // Serves /hello (GET), /size (POST: the body's size) and /public (POST, no token needed).
  void Start(WebServerOptions options) {
    router_.Add("GET", "/hello",
                [](const HttpRequest&) { return HttpResponse::Text(200, "hi", "text/plain"); });
    auto size = [](const HttpRequest& request) {
      return HttpResponse::Text(200, std::to_string(request.body.size()), "text/plain");
    };
    router_.Add("POST", "/size", size);
    router_.Add("POST", "/public", size);
    options.observe = [this](const HttpRequest& request, int status, double) {
      absl::MutexLock lock(&mu_);
      observed_.push_back(request.route + " " + std::to_string(status));
    };
    server_ = std::make_unique<WebServer>(options, &router_);
    ASSERT_TRUE(server_->Bind().ok());
    serving_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (serving_.joinable()) serving_.join();
  }

  // Admission as the head's: the token "t" is needed except on /public.
  static Admission TokenCheck(const HttpRequest& request) {
    Admission admission;
    admission.authenticated = request.Header("Authorization") == "Bearer t";
    if (!admission.authenticated && request.path != "/public") {
      admission.refusal = HttpResponse::Text(401, "no token", "text/plain");
    }
    return admission;
  }

  static constexpr char kGet[] = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
  static constexpr char kGetWithToken[] =
      "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n";
  Router router_;
  std::unique_ptr<WebServer> server_;
  std::thread serving_;
  absl::Mutex mu_;
  std::vector<std::string> observed_ ABSL_GUARDED_BY(mu_);  // "route status" per request
};

TEST_F(WebServerTest, ConnectionsPastTheCapGet503UntilOneCloses) {
  Start(/*max_connections=*/3);
  int open[3];
  for (int& fd : open) {  // three keep-alive connections, each answered and left open
    fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    EXPECT_NE(Exchange(fd, kGet, 2).find("\r\n\r\nhi"), std::string::npos);
  }
  int extra = Connect(server_->port());
  ASSERT_GE(extra, 0);
  const std::string refused = Exchange(extra, kGet, 0);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  ::close(extra);
  // The kept connections still work.
  EXPECT_NE(Exchange(open[0], kGet, 2).find("\r\n\r\nhi"), std::string::npos);
  // One leaves: its slot frees once its thread ends, and a new client is served.
  ::close(open[1]);
  std::string answer;
  ASSERT_TRUE(troupe::testing::WaitUntil(
      [&] {
        int fd = Connect(server_->port());
        answer = Exchange(fd, kGet, 2);
        ::close(fd);
        return answer.find("\r\n\r\nhi") != std::string::npos;
      },
      absl::Seconds(10), "a freed slot serving a new connection"))
      << answer;
  ::close(open[0]);
  ::close(open[2]);
}

TEST_F(WebServerTest, HeadGetsTheGetRoutesHeadersWithoutTheBody) {
  Start(/*max_connections=*/8);
  int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  const std::string head = Exchange(fd, "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n", 0);
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 2\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << "HEAD answered with a body";
  // The same connection carries on: the next response starts cleanly.
  const std::string get = Exchange(fd, kGet, 2);
  EXPECT_EQ(get.rfind("HTTP/1.1 200", 0), 0u) << get;
  EXPECT_NE(get.find("\r\n\r\nhi"), std::string::npos) << get;
  // No GET route: HEAD is 404 like GET.
  EXPECT_EQ(Exchange(fd, "HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n", 0).rfind("HTTP/1.1 404", 0), 0u);
  ::close(fd);
}

TEST_F(WebServerTest, StopEndsServeWithIdleConnectionsOpen) {
  Start(/*max_connections=*/8);
  int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  EXPECT_NE(Exchange(fd, kGet, 2).find("hi"), std::string::npos);
  server_->Stop();
  serving_.join();  // would hang if an idle keep-alive connection held Serve
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "the idle connection was not closed by Stop";
  ::close(fd);
}

// Regression: 256 half-open connections from anyone filled the connection cap and kept the jobs
// API at 503 for 75 s. Connections without the token now have a smaller budget of their own, whose
// oldest member makes room for a newcomer, so a client that sends its request at once is served.
TEST_F(WebServerTest, HalfOpenConnectionsWithoutTheTokenDoNotKeepOutOneWithIt) {
  WebServerOptions options;  // the head's defaults: 256 connections, 64 pending, 16 per address
  options.admit = TokenCheck;
  Start(options);
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {  // more than the whole connection cap, and never a byte sent
    const int fd = Connect(server_->port());
    ASSERT_GE(fd, 0) << i;
    idle.push_back(fd);
  }
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  const std::string answer = Exchange(fd, kGetWithToken, 2);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("\r\n\r\nhi"), std::string::npos) << answer;
  // The same connection, now known to carry the token, stays usable.
  EXPECT_EQ(Exchange(fd, kGetWithToken, 2).rfind("HTTP/1.1 200", 0), 0u);
  ::close(fd);
  // The first of the idle ones was closed to make room, with a 503 that says why.
  const std::string closed = Exchange(idle.front(), "", 0);
  EXPECT_EQ(closed.rfind("HTTP/1.1 503", 0), 0u) << closed;
  EXPECT_NE(closed.find("at most 16 from one address (127.0.0.1)"), std::string::npos) << closed;
  for (int idle_fd : idle) ::close(idle_fd);
}

TEST_F(WebServerTest, APendingConnectionHasHeadTimeoutForItsRequestHead) {
  WebServerOptions options;
  options.admit = TokenCheck;
  options.head_timeout = std::chrono::milliseconds(300);
  Start(options);
  // Nothing sent, and a head that trickles in and never ends: both are closed (the client's reads
  // would give up after 10 s; the idle timeout for a connection with the token is 30 s).
  const int silent = Connect(server_->port());
  const int slow = Connect(server_->port());
  ASSERT_GE(silent, 0);
  ASSERT_GE(slow, 0);
  const std::string partial = "GET /hello HTTP/1.1\r\nHost: x\r\n";
  ::send(slow, partial.data(), partial.size(), MSG_NOSIGNAL);
  char byte;
  EXPECT_EQ(::recv(silent, &byte, 1, 0), 0) << "an idle connection without the token was kept";
  EXPECT_EQ(::recv(slow, &byte, 1, 0), 0) << "a slow request head was waited for";
  ::close(silent);
  ::close(slow);
}

TEST_F(WebServerTest, ThePerAddressCapClosesThatAddresssOldestOnly) {
  WebServerOptions options;
  options.admit = TokenCheck;
  options.max_pending_per_address = 4;
  Start(options);
  std::vector<int> other;
  for (int i = 0; i < 4; ++i) {
    other.push_back(Connect(server_->port(), "127.0.0.2"));
    ASSERT_GE(other.back(), 0) << "cannot connect from 127.0.0.2";
  }
  std::vector<int> mine;
  for (int i = 0; i < 5; ++i) mine.push_back(Connect(server_->port()));
  const std::string closed = Exchange(mine[0], "", 0);
  EXPECT_EQ(closed.rfind("HTTP/1.1 503", 0), 0u) << closed;
  EXPECT_NE(closed.find("at most 4 from one address (127.0.0.1)"), std::string::npos) << closed;
  // The other address's connections were left alone: each still answers.
  for (int fd : other) {
    EXPECT_EQ(Exchange(fd, kGetWithToken, 2).rfind("HTTP/1.1 200", 0), 0u);
    ::close(fd);
  }
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(Exchange(mine[i], kGetWithToken, 2).rfind("HTTP/1.1 200", 0), 0u) << i;
  }
  for (int fd : mine) ::close(fd);
}

TEST_F(WebServerTest, RequestsWithoutTheTokenAreRefusedBeforeTheirBodyIsRead) {
  WebServerOptions options;
  options.admit = TokenCheck;
  options.max_body_bytes = 64 << 20;
  Start(options);
  // 50 MB announced, none sent: the answer comes at once.
  int fd = Connect(server_->port());
  std::string refused =
      Exchange(fd, "POST /size HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n", 8);
  EXPECT_EQ(refused.rfind("HTTP/1.1 401", 0), 0u) << refused;
  ::close(fd);
  // A public route takes a small body without the token, not a large one.
  fd = Connect(server_->port());
  EXPECT_NE(Exchange(fd, "POST /public HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 1)
                .find("\r\n\r\n3"),
            std::string::npos);
  refused = Exchange(fd, "POST /public HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", 10);
  EXPECT_EQ(refused.rfind("HTTP/1.1 413", 0), 0u) << refused;
  EXPECT_NE(refused.find("at most 65536 bytes of body; this one has 100000"), std::string::npos)
      << refused;
  ::close(fd);
  // With the token, a large body is read.
  fd = Connect(server_->port());
  const std::string body(200000, 'x');
  const std::string answer = Exchange(fd,
                                      "POST /size HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                      "t\r\nContent-Length: 200000\r\n\r\n" +
                                          body,
                                      6);
  EXPECT_NE(answer.find("\r\n\r\n200000"), std::string::npos) << answer.substr(0, 200);
  ::close(fd);
  // Requests are observed under their route pattern; those that matched none under "".
  fd = Connect(server_->port());
  Exchange(fd, "GET /no/such/%22path%5C HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n", 0);
  ::close(fd);
  ASSERT_TRUE(troupe::testing::WaitUntil(
      [&] {
        absl::MutexLock lock(&mu_);
        return observed_.size() == 5;
      },
      absl::Seconds(10), "five observed requests"));
  // The observer runs after the answer is written, so two requests on different connections
  // may be observed in either order: compare the sets.
  absl::MutexLock lock(&mu_);
  std::vector<std::string> observed = observed_;
  std::sort(observed.begin(), observed.end());
  EXPECT_EQ(observed, (std::vector<std::string>{" 404", "POST /public 200", "POST /public 413",
                                                "POST /size 200", "POST /size 401"}));
}

}  // namespace
}  // namespace troupe::http
