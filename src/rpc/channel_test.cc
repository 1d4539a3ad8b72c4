// MakeChannel's connection settings: a peer that is alive but slow to finish the connection
// handshake (a loaded machine) must still be reached. Regression test: with gRPC's minimum
// connect timeout at 100 ms, every attempt through a slow link timed out ("connection attempt
// timed out before receiving SETTINGS frame") and calls to live raylets and actors failed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/raylet.grpc.pb.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

int ListenOnLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

int ConnectToLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A TCP relay in front of `target_port` that holds every new connection for `delay` before
// passing bytes on: the server's handshake reaches the client only after the delay.
class SlowLink {
 public:
  SlowLink(int target_port, std::chrono::milliseconds delay)
      : target_port_(target_port), delay_(delay) {
    listen_fd_ = ListenOnLoopback(&port_);
    thread_ = std::thread([this] { Accept(); });
  }
  ~SlowLink() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    for (auto& relay : relays_) relay.join();
    close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  void Accept() {
    while (!stop_) {
      int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      relays_.emplace_back([this, client] { Relay(client); });
    }
  }
  void Relay(int client) {
    std::this_thread::sleep_for(delay_);
    int server = ConnectToLoopback(target_port_);
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    char buffer[16384];
    while (!stop_ && server >= 0) {
      if (poll(fds, 2, 100) < 0) break;
      bool closed = false;
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
        if (n <= 0 || write(fds[1 - i].fd, buffer, n) != n) closed = true;
      }
      if (closed) break;
    }
    close(client);
    if (server >= 0) close(server);
  }

  int target_port_;
  std::chrono::milliseconds delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> relays_;  // touched by the accept thread only, joined after it
};

TEST(MakeChannelTest, ReachesALivePeerWhoseHandshakeIsSlow) {
  int server_port = 0;
  rpc::ObjectManagerService::CallbackService unimplemented;  // any service will do
  auto server = StartGrpcServer("127.0.0.1", 0, {&unimplemented}, &server_port);
  ASSERT_TRUE(server.ok()) << server.status();
  // Longer than the most the old settings gave one attempt (the 1 s reconnect backoff cap).
  SlowLink link(server_port, std::chrono::milliseconds(1500));
  auto channel = MakeChannel("127.0.0.1:" + std::to_string(link.port()));
  EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(8)))
      << "the channel never connected through a link that answers after 1.5 s";
  (*server)->Shutdown();
}

}  // namespace
}  // namespace troupe
