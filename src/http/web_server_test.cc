// WebServer over real sockets on loopback: the connection cap answers 503 and frees its slot when
// a connection closes, HEAD gets headers only, and Stop ends Serve with connections open.
#include "src/http/web_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "src/common/wait_until.h"

namespace troupe::http {
namespace {

// A blocking TCP client socket connected to 127.0.0.1:port (-1 on failure).
int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
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
    router_.Add("GET", "/hello",
                [](const HttpRequest&) { return HttpResponse::Text(200, "hi", "text/plain"); });
    WebServerOptions options;
    options.max_connections = max_connections;
    server_ = std::make_unique<WebServer>(options, &router_);
    ASSERT_TRUE(server_->Bind().ok());
    serving_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (serving_.joinable()) serving_.join();
  }

  static constexpr char kGet[] = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
  Router router_;
  std::unique_ptr<WebServer> server_;
  std::thread serving_;
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

}  // namespace
}  // namespace troupe::http
