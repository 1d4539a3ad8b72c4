// Job logs on a real one-node cluster: the WebSocket tail at /api/jobs/<id>/logs/tail as Ray's
// clients use it (`ray job submit` waiting, `ray job logs -f`, from the benchmark virtualenv that
// bench/setup_peers.sh makes; skipped without it) and as `troupe job` uses it; logs kept whole
// past the old 1 MiB window; tails resumed from an offset; the cap's truncation marker; and
// hostile upgrade requests (no token, another Origin, a bad key, an unknown job, a client that
// leaves mid-stream, an oversized frame) refused with a clear status while the server stays up.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/ray_venv.h"
#include "tests/test_cluster.h"

namespace {

using nlohmann::json;
using troupe::testing::CommandResult;
using troupe::testing::PickFreePort;
using troupe::testing::RayTool;
using troupe::testing::RayUnavailableReason;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;

constexpr int64_t kCapBytes = 16 << 20;  // jobs::kMaxJobLogBytes, as docs/jobs.md documents
constexpr char kMarker[] = "[troupe: this job's output passed the 16 MiB log cap";
constexpr char kGoodKey[] = "dGhlIHNhbXBsZSBub25jZQ==";  // RFC 6455's sample key

// A raw TCP connection to the head, for requests no well-behaved client would send.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{20, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawConnection() { Close(); }
  bool connected() const { return connected_; }
  void Send(const std::string& bytes) { (void)!write(fd_, bytes.data(), bytes.size()); }
  // Reads until `end` appears (or the peer closes / 20 s pass); returns everything read.
  std::string ReadUntil(const std::string& end) {
    while (!absl::StrContains(received_, end)) {
      char buffer[4096];
      const ssize_t n = read(fd_, buffer, sizeof(buffer));
      if (n <= 0) break;
      received_.append(buffer, n);
    }
    return received_;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

std::string Upgrade(const std::string& path, const std::string& extra_headers) {
  return "GET " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Version: 13\r\n" +
         extra_headers + "\r\n";
}

// A masked client frame header announcing `length` payload bytes (RFC 6455 5.2).
std::string FrameHeader(uint64_t length) {
  std::string header = "\x81";  // FIN, text
  header += static_cast<char>(0x80 | 127);
  for (int shift = 56; shift >= 0; shift -= 8) header += static_cast<char>(length >> shift);
  return header + std::string("\x01\x02\x03\x04", 4);  // the mask
}

class JobLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = PickFreePort();
    ASSERT_OK_AND_ASSIGN(TestCluster started,
                         TestCluster::Start({"--num-cpus=1", absl::StrCat("--http-port=", port_)}));
    cluster_.emplace(std::move(started));
  }

  CommandResult Job(std::vector<std::string> args) {
    args.insert(args.begin(), "job");
    args.insert(args.begin() + 2, "--address=" + cluster_->HttpAddress());
    args.insert(args.begin() + 3, "--token=" + cluster_->token());
    return troupe::testing::RunTroupe(args);
  }

  httplib::Result Get(const std::string& path) {
    httplib::Client client(cluster_->HttpAddress());
    client.set_read_timeout(60, 0);
    return client.Get(path.c_str(), {{"Authorization", "Bearer " + cluster_->token()}});
  }

  std::string Logs(const std::string& id) {
    auto r = Get("/api/jobs/" + id + "/logs");
    if (!r || r->status != 200) return "";
    return json::parse(r->body).value("logs", "");
  }

  bool ServerAnswers() {
    auto r = Get("/api/version");
    return r && r->status == 200;
  }

  // Ray's CLI from the virtualenv of scripts/install_ray.sh.
  CommandResult Ray(std::vector<std::string> args) {
    args.insert(args.begin(), RayTool("bin/ray"));
    return troupe::testing::RunCommand(
        args, {"RAY_JOB_HEADERS={\"Authorization\": \"Bearer " + cluster_->token() + "\"}"});
  }

  int port_ = 0;
  std::optional<TestCluster> cluster_;
};

TEST_F(JobLogsTest, RaysJobSubmitWaitsAndPrintsTheOutput) {
  if (std::string why = RayUnavailableReason("bin/ray"); !why.empty()) GTEST_SKIP() << why;
  CommandResult r = Ray({"job", "submit", "--address", cluster_->HttpAddress(), "--submission-id",
                         "ray-echo", "--", "echo", "hi"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out + r.err, '\n');
  EXPECT_NE(std::find(lines.begin(), lines.end(), "hi"), lines.end()) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out + r.err, "succeeded")) << r.out << r.err;
  EXPECT_FALSE(absl::StrContains(r.out + r.err, "WSServerHandshakeError")) << r.out << r.err;
}

TEST_F(JobLogsTest, RaysJobLogsFollowStreamsUntilTheJobEnds) {
  if (std::string why = RayUnavailableReason("bin/ray"); !why.empty()) GTEST_SKIP() << why;
  CommandResult submitted =
      Job({"submit", "--no-wait", "--submission-id=ray-follow", "--", "sh", "-c",
           "for i in 1 2 3; do echo line $i; sleep 0.5; done"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  CommandResult r = Ray({"job", "logs", "--address", cluster_->HttpAddress(), "-f", "ray-follow"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "line 1\nline 2\nline 3\n")) << r.out << r.err;
}

TEST_F(JobLogsTest, MoreThanTheOldWindowIsTailedAndKeptWithoutLoss) {
  constexpr int kLines = 300000;  // ~2 MB: twice the 1 MiB window logs used to slide in
  CommandResult r = Job({"submit", "--submission-id=long", "--", "seq", "1", std::to_string(kLines)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kLines));
  EXPECT_EQ(lines.front(), "1");
  EXPECT_EQ(lines.back(), std::to_string(kLines));
  const std::string logs = Logs("long");
  EXPECT_EQ(logs, r.out);
  CommandResult follow = Job({"logs", "long", "--follow"});  // after the end: from the KV
  EXPECT_EQ(follow.exit_code, 0) << follow.err;
  EXPECT_EQ(follow.out, logs);
}

TEST_F(JobLogsTest, ATailResumesFromAnOffset) {
  ASSERT_EQ(Job({"submit", "--submission-id=resume", "--", "seq", "1", "1000"}).exit_code, 0);
  const std::string logs = Logs("resume");
  ASSERT_EQ(logs.size(), 3893u);  // 9*2 + 90*3 + 900*4 + 5 bytes
  for (int64_t offset : {0, 1, 1000, 3892, 3893}) {
    auto r = Get(absl::StrCat("/api/jobs/resume/logs/tail?offset=", offset));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, logs.substr(offset)) << "offset " << offset;
  }
  auto bad = Get("/api/jobs/resume/logs/tail?offset=-5");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  // Over the WebSocket: the frames hold exactly the bytes after the offset.
  RawConnection ws(port_);
  ASSERT_TRUE(ws.connected());
  ws.Send(Upgrade("/api/jobs/resume/logs/tail?offset=3000",
                  absl::StrCat("Authorization: Bearer ", cluster_->token(),
                               "\r\nSec-WebSocket-Key: ", kGoodKey, "\r\n")));
  const std::string reply = ws.ReadUntil("\x88");  // up to the close frame
  ASSERT_TRUE(absl::StartsWith(reply, "HTTP/1.1 101")) << reply;
  const std::string frames = reply.substr(reply.find("\r\n\r\n") + 4);
  // One text frame (893 bytes: 2-byte extended length), then the close frame.
  ASSERT_GE(frames.size(), 4u + 893u);
  EXPECT_EQ(frames[0], '\x81');
  EXPECT_EQ(frames.substr(4, 893), logs.substr(3000));
}

TEST_F(JobLogsTest, OutputPastTheCapEndsWithTheTruncationMarker) {
  CommandResult r = Job({"submit", "--submission-id=flood", "--", "sh", "-c",
                         "head -c 17000000 /dev/zero | tr '\\0' x; echo; echo after-the-cap"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string logs = Logs("flood");
  ASSERT_GT(logs.size(), static_cast<size_t>(kCapBytes));
  EXPECT_EQ(logs.substr(0, kCapBytes), std::string(kCapBytes, 'x'));
  EXPECT_TRUE(absl::StartsWith(logs.substr(kCapBytes), std::string("\n") + kMarker))
      << logs.substr(kCapBytes);
  EXPECT_FALSE(absl::StrContains(logs, "after-the-cap"));
  EXPECT_EQ(r.out, logs);  // what the waiting submit printed is the same log
}

TEST_F(JobLogsTest, HostileUpgradesAreRefusedAndTheServerStaysUp) {
  ASSERT_EQ(Job({"submit", "--submission-id=target", "--", "echo", "ok"}).exit_code, 0);
  const std::string token = "Authorization: Bearer " + cluster_->token() + "\r\n";
  const std::string key = std::string("Sec-WebSocket-Key: ") + kGoodKey + "\r\n";
  struct Case {
    std::string what, path, headers, status;
  };
  const std::vector<Case> cases = {
      {"no token", "/api/jobs/target/logs/tail", key, "401"},
      {"wrong token", "/api/jobs/target/logs/tail", "Authorization: Bearer nope\r\n" + key, "401"},
      {"another site's Origin", "/api/jobs/target/logs/tail",
       token + key + "Origin: http://evil.example\r\n", "403"},
      {"a bad key", "/api/jobs/target/logs/tail", token + "Sec-WebSocket-Key: abc\r\n", "400"},
      {"no key", "/api/jobs/target/logs/tail", token, "400"},
      {"an unknown job", "/api/jobs/no-such-job/logs/tail", token + key, "404"},
      {"no WebSocket there", "/api/jobs/target", token + key, "404"},
  };
  for (const Case& c : cases) {
    RawConnection connection(port_);
    ASSERT_TRUE(connection.connected());
    connection.Send(Upgrade(c.path, c.headers));
    const std::string reply = connection.ReadUntil("\r\n\r\n");
    EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 " + c.status)) << c.what << ": " << reply;
  }
  // A client that leaves mid-stream, while the job still runs.
  ASSERT_EQ(Job({"submit", "--no-wait", "--submission-id=slow", "--", "sh", "-c",
                 "for i in $(seq 1 20); do echo tick $i; sleep 0.2; done"})
                .exit_code,
            0);
  {
    RawConnection leaver(port_);
    leaver.Send(Upgrade("/api/jobs/slow/logs/tail", token + key));
    EXPECT_TRUE(absl::StartsWith(leaver.ReadUntil("tick 1"), "HTTP/1.1 101"));
  }
  // An oversized frame (past the 64 KiB the server reads from a client): closed with 1009.
  RawConnection flooder(port_);
  flooder.Send(Upgrade("/api/jobs/slow/logs/tail", token + key));
  ASSERT_TRUE(absl::StartsWith(flooder.ReadUntil("\r\n\r\n"), "HTTP/1.1 101"));
  flooder.Send(FrameHeader(1 << 20) + std::string(4096, 'y'));
  EXPECT_TRUE(absl::StrContains(flooder.ReadUntil("\x88\x02\x03\xf1"), "\x88\x02\x03\xf1"))
      << "expected a close frame with code 1009 (message too big)";
  flooder.Close();
  // Malformed HTTP on the same port does no harm either.
  RawConnection garbage(port_);
  garbage.Send("NOT HTTP AT ALL\r\n\r\n");
  garbage.ReadUntil("\r\n\r\n");
  EXPECT_TRUE(ServerAnswers());
  CommandResult slow = Job({"logs", "slow", "--follow"});
  EXPECT_EQ(slow.exit_code, 0) << slow.err;
  EXPECT_TRUE(absl::StrContains(slow.out, "tick 20\n")) << slow.out;
  CommandResult unknown = Job({"logs", "no-such-job", "--follow"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "no job with submission_id")) << unknown.err;
  EXPECT_TRUE(ServerAnswers());
}

}  // namespace
