// Mesh rendezvous between real processes: forked members meeting through a file-backed KV, then
// all-reducing over the links they formed (CpuBackend).
//  - Members in one kernel but with different /dev/shm (a private tmpfs in their own mount
//    namespace: a container or pod) form the group over TCP, while members that do share
//    /dev/shm keep shared memory; also when the peer's domain looks equal but its inbox cannot be
//    opened (the TCP fallback).
//  - A member that cannot join makes every other member fail at once with its reason, instead of
//    waiting out the rendezvous timeout with "did not join".
//  - With hang detection on, heartbeats share the control connections with backends' messages
//    (the NCCL id exchange) but never reach ReceiveControl's callers.
// The private-/dev/shm cases need root (unshare + mount): they skip, saying why, without it.
#include "src/collective/mesh.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/collective/cpu_backend.h"
#include "src/collective/file_kv_testing.h"

namespace troupe::collective {
namespace {

// Gives this (single-threaded, forked) process its own mount namespace with a fresh tmpfs of
// `bytes` on /dev/shm. Nothing propagates back to the host's mounts.
bool PrivateShm(size_t bytes) {
  return unshare(CLONE_NEWNS) == 0 &&
         mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         mount("tmpfs", "/dev/shm", "tmpfs", 0, absl::StrCat("size=", bytes).c_str()) == 0;
}

// Whether this machine lets a test give a process a private /dev/shm ("" if so, else why).
std::string PrivateShmUnavailable() {
  pid_t pid = fork();
  if (pid == 0) _exit(PrivateShm(1 << 20) ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return "cannot unshare a mount namespace and mount a tmpfs on /dev/shm here (needs root)";
}

struct MemberSpec {
  size_t private_shm_bytes = 0;  // > 0: this member gets its own /dev/shm of that size
  std::string listen_ip = "127.0.0.1";
  std::string shm_domain;  // "" detects
  absl::Duration rendezvous_timeout = absl::Seconds(60);
  bool absent = false;  // never started
  absl::Duration hang_timeout = absl::ZeroDuration();
  // Run instead of the all-reduces, once connected; returns the member's result line.
  std::function<std::string(Mesh& mesh, int rank)> body;
};

float Input(int rank, size_t i) { return static_cast<float>(rank + 1 + i % 7); }

// One member: joins, all-reduces a small and a large buffer, and writes "OK" followed by which
// peers it shares memory with ("shm 0 1 ...") or "ERR <cause rank> <message>" to `result`.
std::string RunMember(const std::string& dir, int world, int rank, const MemberSpec& spec) {
  if (spec.private_shm_bytes > 0 && !PrivateShm(spec.private_shm_bytes)) {
    return "ERR -1 cannot make a private /dev/shm";
  }
  MeshOptions options;
  options.group = "g";
  options.world_size = world;
  options.rank = rank;
  options.key_prefix = "collective/g/";
  options.listen_ip = spec.listen_ip;
  options.shm_domain = spec.shm_domain;
  options.rendezvous_timeout = spec.rendezvous_timeout;
  options.hang_timeout = spec.hang_timeout;
  auto mesh = Mesh::Connect(options, FileKv(dir));
  if (!mesh.ok()) {
    return absl::StrCat("ERR ", PeerOf(mesh.status()), " ", mesh.status().message());
  }
  if (spec.body) return spec.body(**mesh, rank);
  std::string shares = "shm";
  for (int peer = 0; peer < world; ++peer) {
    if (peer != rank && (*mesh)->shares_memory_with(peer)) absl::StrAppend(&shares, " ", peer);
  }
  CpuBackend backend(std::move(*mesh));
  uint32_t seq = 0;
  for (size_t count : {size_t{1024}, size_t{3 << 20}}) {  // 4 KB (one step), 12 MB (ring)
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = Input(rank, i);
    OpContext ctx{OpCode::kAllReduce, seq++, absl::Now() + absl::Seconds(60), absl::Seconds(60)};
    if (auto status =
            backend.AllReduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum, ctx);
        !status.ok()) {
      return absl::StrCat("ERR ", PeerOf(status), " ", status.message());
    }
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += Input(r, i);
      if (data[i] != want) {
        return absl::StrCat("ERR -1 element ", i, " of ", count, " is ", data[i], ", want ", want);
      }
    }
  }
  return "OK " + shares;
}

// Runs one forked process per member and returns each one's result line.
std::vector<std::string> RunGroup(const std::vector<MemberSpec>& specs) {
  char dir_template[] = "/tmp/mesh_test.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const int world = specs.size();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    if (specs[rank].absent) continue;
    pid_t pid = fork();
    if (pid == 0) {
      WriteTestFile(absl::StrCat(dir, "/result.", rank), RunMember(dir, world, rank, specs[rank]));
      _exit(0);
    }
    pids.push_back(pid);
  }
  // A member hung past every timeout in it is a failure: end it rather than hang the test.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (pid_t pid : pids) {
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  std::vector<std::string> results;
  for (int rank = 0; rank < world; ++rank) {
    const std::string path = absl::StrCat(dir, "/result.", rank);
    results.push_back(access(path.c_str(), F_OK) == 0 ? ReadTestFile(path)
                      : specs[rank].absent            ? "absent"
                                                      : "no result (killed)");
  }
  std::system(("rm -rf " + dir).c_str());
  return results;
}

TEST(MeshTest, MembersWithDifferentDevShmInOneKernelUseTcpAndAllReduce) {
  if (std::string why = PrivateShmUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // Ranks 0 and 1 share the host's /dev/shm; rank 2 is "in a container" with its own.
  std::vector<std::string> results = RunGroup({{}, {}, {.private_shm_bytes = 64 << 20}});
  EXPECT_EQ(results[0], "OK shm 1");
  EXPECT_EQ(results[1], "OK shm 0");
  EXPECT_EQ(results[2], "OK shm");
}

TEST(MeshTest, PeerWhoseInboxCannotBeOpenedIsReachedOverTcp) {
  if (std::string why = PrivateShmUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // Both claim one shared-memory domain (as members whose domain detection is fooled would),
  // but rank 1's /dev/shm is its own: opening rank 0's inbox fails and the pair falls back.
  const MemberSpec host{.shm_domain = "same-looking-domain"};
  const MemberSpec container{.private_shm_bytes = 64 << 20, .shm_domain = "same-looking-domain"};
  std::vector<std::string> results = RunGroup({host, container});
  EXPECT_EQ(results[0], "OK shm");
  EXPECT_EQ(results[1], "OK shm");
}

TEST(MeshTest, MemberThatCannotJoinFailsTheOthersAtOnceWithItsReason) {
  // Rank 1 cannot even listen. The others (rendezvous timeout 60 s) must fail with its reason,
  // naming it, not with "did not join" after the timeout.
  std::vector<std::string> results = RunGroup({{}, {.listen_ip = "not-an-address"}, {}});
  EXPECT_EQ(results[1], "ERR -1 bad listen address not-an-address");  // its own error
  for (int rank : {0, 2}) {
    EXPECT_TRUE(absl::StartsWith(results[rank], "ERR 1 ")) << results[rank];
    EXPECT_TRUE(absl::StrContains(results[rank], "rank 1 could not join: bad listen address"))
        << results[rank];
  }
}

TEST(MeshTest, MemberThatGivesUpAfterConnectingFailsThoseItReachedAtOnce) {
  // Rank 1 never comes. Rank 2 connects to rank 0, then gives up on rank 1 after its own short
  // timeout; rank 0 (still waiting for rank 1, timeout 60 s) must hear why from rank 2 at once,
  // not report "rank(s) 1 did not join within 1m" after its own timeout.
  std::vector<std::string> results =
      RunGroup({{}, {.absent = true}, {.rendezvous_timeout = absl::Seconds(2)}});
  EXPECT_TRUE(absl::StartsWith(results[2], "ERR 1 rank 1 did not join within 2s")) << results[2];
  EXPECT_TRUE(absl::StartsWith(results[0], "ERR 1 ")) << results[0];
  EXPECT_TRUE(
      absl::StrContains(results[0], "rank 2 aborted the group: rank 1 did not join within 2s"))
      << results[0];
}

TEST(MeshTest, MemberWhoseDevShmIsFullFailsTheOthersAtOnceWithItsReason) {
  if (std::string why = PrivateShmUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // Rank 2's private /dev/shm (64 KiB) cannot hold its inbox: it fails before publishing an
  // address, and ranks 0 and 1 (waiting for it to connect) must learn why from its report.
  std::vector<std::string> results = RunGroup({{}, {}, {.private_shm_bytes = 64 << 10}});
  EXPECT_TRUE(absl::StartsWith(results[2], "ERR -1 cannot allocate")) << results[2];
  for (int rank : {0, 1}) {
    EXPECT_TRUE(absl::StartsWith(results[rank], "ERR 2 ")) << results[rank];
    EXPECT_TRUE(absl::StrContains(results[rank], "rank 2 could not join: cannot allocate"))
        << results[rank];
  }
}

TEST(MeshTest, HeartbeatsNeverSurfaceThroughReceiveControl) {
  // hang_timeout 200 ms: a heartbeat every 50 ms each way. Rank 1 sends two messages (as the
  // NCCL backend sends its GPU and id) after 0.5 s of heartbeats; rank 0 reads only after 1 s,
  // with heartbeats queued before, between and after them, and must get exactly the two.
  auto body = [](Mesh& mesh, int rank) -> std::string {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    auto err = [](const absl::Status& status) {
      return absl::StrCat("ERR ", PeerOf(status), " ", status.message());
    };
    const int peer = 1 - rank;
    std::string got;
    if (rank == 1) {
      absl::SleepFor(absl::Milliseconds(500));
      for (const char* message : {"GPUID\nfirst", "NCCLID\nsecond"}) {
        if (auto status = mesh.SendControl(peer, message); !status.ok()) return err(status);
        absl::SleepFor(absl::Milliseconds(200));
      }
      auto reply = mesh.ReceiveControl(peer, deadline);
      if (!reply.ok()) return err(reply.status());
      got = *reply;
      if (auto status = mesh.CheckPeers(); !status.ok()) return err(status);
      if (auto status = mesh.SendControl(peer, "bye"); !status.ok()) return err(status);
    } else {
      absl::SleepFor(absl::Seconds(1));
      for (int i = 0; i < 2; ++i) {
        auto message = mesh.ReceiveControl(peer, deadline);
        if (!message.ok()) return err(message.status());
        absl::StrAppend(&got, i == 0 ? "" : "|", *message);
      }
      if (auto status = mesh.CheckPeers(); !status.ok()) return err(status);
      if (auto status = mesh.SendControl(peer, "done"); !status.ok()) return err(status);
      // Stays until rank 1 is through (leaving would close the connection it still checks).
      auto bye = mesh.ReceiveControl(peer, deadline);
      if (!bye.ok() || *bye != "bye") return "ERR -1 no bye";
    }
    return "OK " + got;
  };
  const MemberSpec member{.hang_timeout = absl::Milliseconds(200), .body = body};
  std::vector<std::string> results = RunGroup({member, member});
  EXPECT_EQ(results[0], "OK GPUID\nfirst|NCCLID\nsecond");
  EXPECT_EQ(results[1], "OK done");
}

}  // namespace
}  // namespace troupe::collective
