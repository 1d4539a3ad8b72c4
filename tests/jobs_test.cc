// Jobs on a real 3-node cluster through `troupe job ...` and the REST API: a Troupe program with a
// working directory succeeds and its output is kept; a failing entrypoint reports its exit code;
// stopping a long job frees everything; records outlive their drivers; bad requests (JSON,
// fields, size, token, origin, nesting, packages past the limits) get clear 4xx and change
// nothing; job working directories stay in the session and go away, however deep; /metrics passes
// promtool; hostile clients without the token (idle connections, made-up paths, token guessing)
// cannot take the API down; the head supervisor restarts a killed HTTP server, and the HTTP server
// does not outlive its head.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/sha256.h"
#include "src/common/status_testing.h"
#include "src/common/version.h"
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The pid recorded for a daemon of a session (0 if none).
int PidOf(const std::string& session_dir, const std::string& name) {
  const std::string text = ReadFile(session_dir + "/pids/" + name + ".pid");
  return text.empty() ? 0 : std::atoi(text.c_str());
}

std::string Nested(int depth, const std::string& open, const std::string& close) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += open;
  text += "1";
  for (int i = 0; i < depth; ++i) text += close;
  return text;
}

// A TCP connection from `from` (a loopback address) to the head's HTTP port (-1 on failure);
// reads give up after 10 s.
int ConnectFrom(const std::string& http_address, const char* from) {
  const int port = std::atoi(http_address.substr(http_address.rfind(':') + 1).c_str());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in source{}, target{};
  source.sin_family = target.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &source.sin_addr);
  target.sin_port = htons(port);
  target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

// Sends one HTTP/1.1 request (Connection: close) from `from` and reads the whole answer.
std::string RawRequest(const std::string& http_address, const char* from, const std::string& method,
                       const std::string& target, const std::string& headers,
                       const std::string& body = "") {
  const int fd = ConnectFrom(http_address, from);
  if (fd < 0) return "<cannot connect from " + std::string(from) + ">";
  const std::string request =
      absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: x\r\n", headers,
                   "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  ::close(fd);
  return answer;
}

// One package entry in the package format (src/common/package.h), as a hostile client makes it.
std::string PackageEntry(const std::string& path, const std::string& content) {
  std::string out;
  const uint32_t n = path.size(), mode = 0644;
  const uint64_t size = content.size();
  out.append(reinterpret_cast<const char*>(&n), 4).append(path);
  out.append(reinterpret_cast<const char*>(&mode), 4);
  out.append(reinterpret_cast<const char*>(&size), 8);
  return out.append(content);
}

// Leaves a tree a job could make in `dir`: 100 nested directories with 200-byte names (20,000
// bytes of path, past PATH_MAX), made relative to directory descriptors.
bool MakeDeepTree(const std::string& dir) {
  const std::string name(200, 'd');
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; fd >= 0 && i < 100; ++i) {
    const int next = mkdirat(fd, name.c_str(), 0755) == 0
                         ? openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY)
                         : -1;
    close(fd);
    fd = next;
  }
  if (fd < 0) return false;
  close(fd);
  return true;
}

std::string JobProgram() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                      "/tests/job_program");
}

class JobsTest : public ::testing::Test {
 protected:
  // A fatal failure here skips the test body.
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(
        TestCluster started,
        TestCluster::Start({"--num-cpus=1", absl::StrCat("--http-port=", PickFreePort())}));
    cluster_.emplace(std::move(started));
    ASSERT_OK(cluster_->AddWorker({"--num-cpus=1"}));
    ASSERT_OK(cluster_->AddWorker({"--num-cpus=1"}));
  }

  CommandResult Job(std::vector<std::string> args) {
    args.insert(args.begin(), "job");
    args.insert(args.begin() + 2, "--address=" + cluster_->HttpAddress());
    args.insert(args.begin() + 3, "--token=" + cluster_->token());
    return troupe::testing::RunTroupe(args);
  }

  // A raw HTTP request to the head (token unless given).
  httplib::Result Request(const std::string& method, const std::string& path,
                          const std::string& body = "", httplib::Headers headers = {},
                          bool with_token = true) {
    httplib::Client client(cluster_->HttpAddress());
    if (with_token) headers.emplace("Authorization", "Bearer " + cluster_->token());
    if (method == "POST") return client.Post(path.c_str(), headers, body, "application/json");
    if (method == "DELETE") return client.Delete(path.c_str(), headers);
    if (method == "HEAD") return client.Head(path.c_str(), headers);
    return client.Get(path.c_str(), headers);
  }

  json JobRecord(const std::string& id) {
    auto r = Request("GET", "/api/jobs/" + id);
    return r ? json::parse(r->body, nullptr, false) : json();
  }

  std::optional<TestCluster> cluster_;  // started by SetUp
};

TEST_F(JobsTest, TroupeProgramWithWorkingDirSucceedsAndItsOutputIsKept) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/workdir");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/message.txt") << "hello from the working dir\n";
  CommandResult r = Job({"submit", "--working-dir=" + dir, "--submission-id=tally-1",
                         "--metadata=owner=tests,kind=demo", "--", JobProgram()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "driver reads: hello from the working dir")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "task reads: hello from the working dir")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "sum of squares: 30")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "Job 'tally-1' SUCCEEDED")) << r.err;
  // The record and the output outlive the driver.
  json record = JobRecord("tally-1");
  EXPECT_EQ(record["status"], "SUCCEEDED");
  EXPECT_EQ(record["driver_exit_code"], 0);
  EXPECT_EQ(record["metadata"]["owner"], "tests");
  CommandResult logs = Job({"logs", "tally-1"});
  EXPECT_TRUE(absl::StrContains(logs.out, "sum of squares: 30")) << logs.out;
  CommandResult list = Job({"list"});
  EXPECT_TRUE(absl::StrContains(list.out, "tally-1")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "SUCCEEDED")) << list.out;
  // Every verb takes its flags as `--flag value` too (the form `job submit` took already), the ID
  // before or after them.
  const std::string url = cluster_->HttpAddress();
  const std::string token = cluster_->token();
  CommandResult spaced =
      troupe::testing::RunTroupe({"job", "status", "--address", url, "--token", token, "tally-1"});
  EXPECT_EQ(spaced.exit_code, 0) << spaced.err;
  EXPECT_TRUE(absl::StartsWith(spaced.out, "tally-1: SUCCEEDED")) << spaced.out;
  CommandResult id_first =
      troupe::testing::RunTroupe({"job", "status", "tally-1", "--address", url, "--token", token});
  EXPECT_EQ(id_first.exit_code, 0) << id_first.err;
  EXPECT_TRUE(absl::StartsWith(id_first.out, "tally-1: SUCCEEDED")) << id_first.out;
  CommandResult spaced_list =
      troupe::testing::RunTroupe({"job", "list", "--address", url, "--token", token});
  EXPECT_EQ(spaced_list.exit_code, 0) << spaced_list.err;
  EXPECT_TRUE(absl::StrContains(spaced_list.out, "tally-1")) << spaced_list.out;
  CommandResult spaced_logs =
      troupe::testing::RunTroupe({"job", "logs", "--address", url, "--token", token, "tally-1"});
  EXPECT_EQ(spaced_logs.exit_code, 0) << spaced_logs.err;
  EXPECT_TRUE(absl::StrContains(spaced_logs.out, "sum of squares: 30")) << spaced_logs.out;
  CommandResult stray =
      troupe::testing::RunTroupe({"job", "list", "--address", url, "--token", token, "extra"});
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(stray.err, "unexpected argument 'extra'")) << stray.err;
  // A submission id can be used once.
  CommandResult again = Job({"submit", "--submission-id=tally-1", "--", "true"});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(again.err, "already exists")) << again.err;
}

TEST_F(JobsTest, FailingEntrypointReportsItsExitCode) {
  CommandResult r = Job({"submit", "--submission-id=boom", "--", "sh", "-c", "echo boom; exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  json record = JobRecord("boom");
  EXPECT_EQ(record["status"], "FAILED");
  EXPECT_EQ(record["driver_exit_code"], 7);
  EXPECT_EQ(record["message"], "the entrypoint exited with status 7");
  EXPECT_TRUE(absl::StrContains(r.out, "boom"));
}

TEST_F(JobsTest, StoppingALongJobStopsItsDriverAndActors) {
  CommandResult r =
      Job({"submit", "--no-wait", "--submission-id=long", "--", JobProgram(), "--hold"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(Job({"logs", "long"}).out, "holding an actor");
      },
      absl::Seconds(60), "the job to hold its actor (1 CPU somewhere)", absl::Milliseconds(200)));
  ASSERT_EQ(JobRecord("long")["status"], "RUNNING");
  CommandResult stop = Job({"stop", "long"});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  json status;
  EXPECT_TRUE(WaitUntil([&] { return (status = JobRecord("long")["status"]) == "STOPPED"; },
                        absl::Seconds(60), "the job to be STOPPED", absl::Milliseconds(200)))
      << "last status " << status;
  // ~TestCluster checks that every node's resources are all available again.
}

// Stop's fallback: a process of the job that ignores SIGTERM is killed by the supervisor's timer
// (after 3 s).
TEST_F(JobsTest, StopKillsAJobThatIgnoresSigterm) {
  CommandResult r = Job({"submit", "--no-wait", "--submission-id=stubborn", "--", "sh", "-c",
                         "trap '' TERM; echo ready; while true; do sleep 1; done"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(Job({"logs", "stubborn"}).out, "ready");
      },
      absl::Seconds(60), "the job to print 'ready'", absl::Milliseconds(200)));
  ASSERT_EQ(JobRecord("stubborn")["status"], "RUNNING");
  EXPECT_EQ(Job({"stop", "stubborn"}).exit_code, 0);
  // The shell that ignores SIGTERM holds the output pipe: the job only ends (STOPPED) once the
  // supervisor's timer SIGKILLed the group.
  json record;
  EXPECT_TRUE(WaitUntil([&] { return (record = JobRecord("stubborn"))["status"] == "STOPPED"; },
                        absl::Seconds(60), "the job to be STOPPED", absl::Milliseconds(200)))
      << record.dump();
}

TEST_F(JobsTest, BadRequestsGetClearErrorsAndChangeNothing) {
  auto expect = [](const httplib::Result& r, int status, const std::string& text) {
    ASSERT_TRUE(r) << "no answer";
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_TRUE(absl::StrContains(r->body, text)) << r->body;
  };
  expect(Request("POST", "/api/jobs/", "{not json"), 400, "not valid JSON");
  expect(Request("POST", "/api/jobs/", "{}"), 400, "'entrypoint' is required");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": 5})"), 400,
         "'entrypoint' must be a string");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": 5})"), 400, "), not number");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": ""})"), 400, "must not be empty");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": "true", "colour": 1})"), 400,
         "unknown field 'colour'");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": "true", "entrypoint_num_cpus": -1})"), 400,
         "entrypoint_num_cpus");
  expect(Request("POST", "/api/jobs/",
                 R"({"entrypoint": "true", "runtime_env": {"working_dir": "/home/me"}})"),
         400, "must be an uploaded package");
  expect(Request("POST", "/api/jobs/", std::string(2 << 20, ' ')), 413, "limited to");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": "true"})", {}, /*with_token=*/false), 401,
         "Authorization: Bearer");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": "true"})",
                 {{"Authorization", "Bearer troupe_x_wrong"}}, false),
         401, "wrong token");
  expect(Request("POST", "/api/jobs/", R"({"entrypoint": "true"})",
                 {{"Origin", "http://evil.example"}}),
         403, "cross-origin");
  expect(Request("GET", "/api/jobs/", "", {{"Sec-Fetch-Site", "cross-site"}}), 403, "cross-origin");
  expect(Request("GET", "/api/jobs/nope"), 404, "no job");
  // /api/version answers without a token (clients negotiate with it).
  expect(Request("GET", "/api/version", "", {}, false), 200, "version");
  // ...with the version from //:VERSION (src/common/version.h), not a copy of it.
  auto version = Request("GET", "/api/version", "", {}, false);
  ASSERT_TRUE(version);
  EXPECT_EQ(json::parse(version->body).value("troupe_version", ""), troupe::kTroupeVersion)
      << version->body;
  // HEAD is GET without the body (it answered 405 once): the same status and Content-Length,
  // no body, the connection still usable; it passes the same token check.
  auto head = Request("HEAD", "/api/version", "", {}, false);
  ASSERT_TRUE(head) << "HEAD /api/version got no answer";
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(version->body.size()));
  auto jobs_head = Request("HEAD", "/api/jobs/");
  ASSERT_TRUE(jobs_head);
  EXPECT_EQ(jobs_head->status, 200);
  EXPECT_EQ(jobs_head->body, "");
  expect(Request("HEAD", "/api/jobs/", "", {}, false), 401, "");
  expect(Request("HEAD", "/api/no-such-endpoint"), 404, "");
  // Packages past the limits (src/common/package.h), refused at upload with the limit and the
  // value: a 60 KB one that would make 30,000 nested directories, and a 26 MB one that would make
  // 1,001,001 files.
  auto put_package = [&](const std::string& bytes) {
    httplib::Client client(cluster_->HttpAddress());
    return client.Put(("/api/packages/gcs/troupe_pkg_" + troupe::Sha256Hex(bytes) + ".pkg").c_str(),
                      {{"Authorization", "Bearer " + cluster_->token()}}, bytes,
                      "application/octet-stream");
  };
  std::string deep;
  for (int i = 0; i < 30000; ++i) deep += "a/";
  expect(put_package(PackageEntry(deep + "f", "x")), 400,
         "is 30001 levels deep; a package may be at most 64 levels deep");
  std::string many;
  for (int i = 0; i < 1001001; ++i) many += PackageEntry(std::to_string(i), "");
  expect(put_package(many), 413, "holds 1001001 files; a package may make at most 100000");
  expect(put_package(PackageEntry("ok/file.txt", "fine")), 200, "uploaded");
  // None of them made a job.
  auto list = Request("GET", "/api/jobs/");
  ASSERT_TRUE(list);
  EXPECT_EQ(json::parse(list->body), json::array());
}

// Regression: 100 000 nested objects in a POST body overflowed the HTTP server's stack (nlohmann
// copies values recursively) and took the daemon down.
TEST_F(JobsTest, DeeplyNestedJsonIsRefusedAndTheServerStaysUp) {
  for (const std::string& body :
       {R"({"entrypoint": "true", "metadata": )" + Nested(100000, R"({"k":)", "}") + "}",
        R"({"entrypoint": "true", "runtime_env": {"working_dir": )" + Nested(200000, "[", "]") +
            "}}",
        std::string(500000, '['),
        R"({"entrypoint": "true", "metadata": )" + Nested(65, "[", "]") + "}"}) {
    auto r = Request("POST", "/api/jobs/", body);
    ASSERT_TRUE(r) << "no answer: the HTTP server died";
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_TRUE(absl::StrContains(r->body, "JSON nested deeper than 64 levels")) << r->body;
  }
  // Still up, and nothing was made.
  auto version = Request("GET", "/api/version");
  ASSERT_TRUE(version) << "the HTTP server died";
  EXPECT_EQ(version->status, 200);
  auto list = Request("GET", "/api/jobs/");
  ASSERT_TRUE(list);
  EXPECT_EQ(json::parse(list->body), json::array());
}

// Regression: a job's working directory was /tmp/troupe-job-<submission id>, and a symlink
// planted there made the job (and the unpacked package) write wherever it pointed. Now it is a
// fresh directory in the node's session (<session>/jobs/<id>-XXXXXX), removed by DELETE and by
// `troupe stop`.
TEST_F(JobsTest, JobWorkingDirsStayInTheSessionAndAreRemoved) {
  const std::string id = absl::StrCat("wd-", getpid());
  const std::string outside = absl::StrCat(testing::TempDir(), "/outside");
  std::filesystem::create_directories(outside);
  std::vector<std::string> planted = {"/tmp/troupe-job-" + id};
  if (const char* tmp = std::getenv("TMPDIR"))
    planted.push_back(absl::StrCat(tmp, "/troupe-job-", id));
  for (const auto& link : planted) {
    std::filesystem::remove(link);
    std::filesystem::create_directory_symlink(outside, link);
  }
  const std::string workdir = absl::StrCat(testing::TempDir(), "/wd_src");
  std::filesystem::create_directories(workdir);
  std::ofstream(workdir + "/payload.txt") << "payload\n";
  CommandResult r = Job({"submit", "--working-dir=" + workdir, "--submission-id=" + id, "--", "sh",
                         "-c", "cat payload.txt; echo written > out.txt; echo \"dir=$(pwd)\""});
  for (const auto& link : planted) std::filesystem::remove(link);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "payload")) << r.out;
  EXPECT_TRUE(std::filesystem::is_empty(outside)) << "the job wrote through the planted symlink";
  const size_t at = r.out.find("dir=");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string dir = r.out.substr(at + 4, r.out.find('\n', at) - at - 4);
  const std::string jobs_dir = cluster_->HeadSessionDir() + "/jobs";
  EXPECT_TRUE(absl::StartsWith(dir, jobs_dir + "/" + id + "-")) << dir;
  EXPECT_EQ(ReadFile(dir + "/out.txt"), "written\n");
  struct stat st;
  ASSERT_EQ(lstat(jobs_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // only the cluster's user can reach job directories

  // A deep tree in it (//src/common:remove_tree_test has one remove_all cannot remove: DELETE
  // once answered {"deleted":true} and left that). DELETE answers once the directory is gone.
  ASSERT_TRUE(MakeDeepTree(dir));
  auto deleted = Request("DELETE", "/api/jobs/" + id);
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  EXPECT_FALSE(std::filesystem::exists(dir)) << "DELETE said " << deleted->body;
  EXPECT_EQ(Request("GET", "/api/jobs/" + id)->status, 404);

  // A job that is kept: its directory, deep tree and all, goes with the session at `troupe stop`.
  CommandResult kept =
      Job({"submit", "--submission-id=" + id + "-kept", "--", "sh", "-c", "touch mark; pwd"});
  ASSERT_EQ(kept.exit_code, 0) << kept.out << kept.err;
  const std::string kept_dir = kept.out.substr(0, kept.out.find('\n'));
  ASSERT_TRUE(std::filesystem::exists(kept_dir + "/mark")) << kept.out;
  ASSERT_TRUE(MakeDeepTree(kept_dir));
  CommandResult stop = cluster_->Troupe({"stop"});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_FALSE(std::filesystem::exists(jobs_dir)) << "troupe stop left " << jobs_dir;
}

// Regressions, each from anyone who reaches the port without the token: 256 half-open
// connections kept the API at 503 for 75 s; every made-up path became a /metrics series, and a
// '"' or '\\' in one broke the format; login took 3,881 guesses a second.
TEST_F(JobsTest, HostileClientsWithoutTheTokenCannotTakeTheApiDown) {
  const std::string http = cluster_->HttpAddress();
  // Made-up paths, some with characters the metrics format must escape.
  for (int i = 0; i < 300; ++i) {
    httplib::Client client(http);
    client.Get(
        absl::StrCat("/made/up/", i, i % 3 == 0 ? "%22" : "", i % 5 == 0 ? "%5C" : "").c_str());
  }
  // 300 connections that never send a byte, more than the server's connection cap.
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = ConnectFrom(http, "127.0.0.1");
    ASSERT_GE(fd, 0) << i;
    idle.push_back(fd);
  }
  // With them open: the CLI, the API with the token, and the dashboard's page all answer.
  CommandResult list = Job({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.out << list.err;
  auto jobs = Request("GET", "/api/jobs/");
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200) << jobs->body;
  auto page = Request("GET", "/", "", {}, /*with_token=*/false);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  // The oldest idle connection was closed with a 503 saying why.
  char buffer[4096];
  const ssize_t n = ::recv(idle.front(), buffer, sizeof(buffer), 0);
  const std::string closed(buffer, n > 0 ? n : 0);
  EXPECT_TRUE(absl::StartsWith(closed, "HTTP/1.1 503")) << closed;
  EXPECT_TRUE(absl::StrContains(closed, "from one address (127.0.0.1)")) << closed;
  for (int fd : idle) ::close(fd);

  // /metrics: no path anyone typed, one "other" series for them, and valid for promtool.
  auto metrics = Request("GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_FALSE(absl::StrContains(metrics->body, "made/up")) << metrics->body;
  EXPECT_TRUE(absl::StrContains(metrics->body,
                                "troupe_http_requests_total{route=\"other\",code=\"401\"} 300"))
      << metrics->body;
  const std::string path = absl::StrCat(testing::TempDir(), "/hostile_metrics.txt");
  std::ofstream(path) << metrics->body;
  EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + path + " > /dev/null").c_str()), 0)
      << metrics->body;

  // Guessing the token: 10 wrong guesses are answered 401, then 429 with Retry-After, even for
  // the right token from that address; another address still logs in with the right token.
  const std::string wrong_login = R"({"token": "troupe_guess"})";
  const std::string right_login = json{{"token", cluster_->token()}}.dump();
  // (Guessing until the first 429: at least 10 are 401, more if a slow machine took over a second.)
  int refused = 0;
  std::string answer;
  for (int i = 0; i < 30; ++i) {
    answer = RawRequest(http, "127.0.0.3", "POST", "/dashboard/login", "", wrong_login);
    if (!absl::StartsWith(answer, "HTTP/1.1 401")) break;
    ++refused;
  }
  EXPECT_GE(refused, 10);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 429")) << answer;
  answer = RawRequest(http, "127.0.0.3", "POST", "/dashboard/login", "", right_login);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 429")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Retry-After: ")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "too many failed logins from 127.0.0.3")) << answer;
  answer = RawRequest(http, "127.0.0.4", "POST", "/dashboard/login", "", right_login);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Set-Cookie: troupe_session=")) << answer;
  // Wrong Bearer tokens on the API count the same way.
  refused = 0;
  for (int i = 0; i < 30; ++i) {
    answer = RawRequest(http, "127.0.0.5", "GET", "/api/jobs/", "Authorization: Bearer nope\r\n");
    if (!absl::StartsWith(answer, "HTTP/1.1 401")) break;
    ++refused;
  }
  EXPECT_GE(refused, 10);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 429")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Retry-After: ")) << answer;
  // The CLI (from 127.0.0.1) was never blocked by them.
  EXPECT_EQ(Job({"list"}).exit_code, 0);
}

TEST_F(JobsTest, ListAndLogsCommands) {
  auto troupe = [&](std::vector<std::string> args) {
    args.push_back("--temp-dir=" + cluster_->temp_root());
    return troupe::testing::RunTroupe(args);
  };
  CommandResult nodes = troupe({"list", "nodes", "--format=json"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  json parsed = json::parse(nodes.out, nullptr, false);
  ASSERT_TRUE(parsed.is_array()) << nodes.out;
  EXPECT_EQ(parsed.size(), 3u);
  CommandResult tasks = troupe({"list", "tasks"});
  EXPECT_EQ(tasks.exit_code, 0) << tasks.err;
  // Through the head: every node's files (tests/state_cli_test.cc covers the rest).
  CommandResult files = troupe({"logs"});
  EXPECT_EQ(files.exit_code, 0) << files.err;
  EXPECT_TRUE(absl::StrContains(files.out, "http.log")) << files.out;
  EXPECT_TRUE(absl::StrContains(files.out, "raylet.log")) << files.out;
  CommandResult gcs = troupe({"logs", "gcs"});
  EXPECT_EQ(gcs.exit_code, 0) << gcs.err;
  EXPECT_FALSE(gcs.out.empty());
  CommandResult none = troupe({"logs", "no-such-log"});
  EXPECT_NE(none.exit_code, 0);
  // A temp root where no node ever ran: a message saying so, not a silent success.
  CommandResult empty = troupe::testing::RunTroupe(
      {"logs", "--temp-dir=" + cluster_->temp_root() + "/nothing-here"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(empty.err, "no Troupe log files under")) << empty.err;
}

TEST_F(JobsTest, MetricsPassPromtoolAndCountTheCluster) {
  auto r = Request("GET", "/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StrContains(r->body, "troupe_nodes{state=\"alive\"} 3")) << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "troupe_node_resource_capacity{")) << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "troupe_object_store_used_bytes{")) << r->body;
  // The job program submits 5 tasks (1 + 4 squares), all finishing.
  CommandResult job = Job({"submit", "--", JobProgram()});
  ASSERT_EQ(job.exit_code, 0) << job.err;
  r = Request("GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_TRUE(absl::StrContains(r->body, "troupe_tasks_total{state=\"submitted\"} 5")) << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "troupe_tasks_total{state=\"finished\"} 5")) << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "troupe_jobs{status=\"SUCCEEDED\"} 1")) << r->body;
  // ... and at least the 4 actor calls of Tally::Add (the HTTP server's calls to job supervisors
  // count too).
  const std::string finished_calls = "troupe_actor_calls_total{state=\"finished\"} ";
  const size_t at = r->body.find(finished_calls);
  ASSERT_NE(at, std::string::npos) << r->body;
  EXPECT_GE(std::stoi(r->body.substr(at + finished_calls.size())), 4) << r->body;
  // The GCS publishes its handler latencies every 5 s.
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (r && absl::StrContains(r->body, "troupe_gcs_server_rpc_duration_seconds_count")) {
          return true;
        }
        r = Request("GET", "/metrics");
        return false;
      },
      absl::Seconds(12), "the GCS's handler latencies in /metrics", absl::Milliseconds(200)));
  EXPECT_TRUE(absl::StrContains(
      r->body,
      "troupe_gcs_server_rpc_duration_seconds_count{method=\"/troupe.rpc.JobInfoService/AddJob\"}"))
      << r->body;
  if (!std::filesystem::exists("/usr/bin/promtool"))
    GTEST_SKIP() << "no promtool (Debian prometheus)";
  const std::string path = absl::StrCat(testing::TempDir(), "/metrics.txt");
  std::ofstream(path) << r->body;
  const int code = std::system(
      ("/usr/bin/promtool check metrics < " + path + " > " + path + ".out 2>&1").c_str());
  std::ifstream out(path + ".out");
  std::string report((std::istreambuf_iterator<char>(out)), {});
  EXPECT_EQ(code, 0) << report;
}

// Ray's own Python client (ray.job_submission, from the virtualenv that scripts/install_ray.sh
// makes) drives the API: submit, status, logs, list, info.
TEST_F(JobsTest, RaysJobSubmissionClientWorks) {
  if (std::string why = RayUnavailableReason("bin/python"); !why.empty()) GTEST_SKIP() << why;
  const std::string python = RayTool("bin/python");
  const std::string script = absl::StrCat(testing::TempDir(), "/ray_client.py");
  std::ofstream(script)
      << "import sys, time\n"
         "from ray.job_submission import JobSubmissionClient, JobStatus\n"
         "c = JobSubmissionClient(sys.argv[1], headers={'Authorization': "
         "'Bearer ' + sys.argv[2]})\n"
         "jid = c.submit_job(entrypoint='echo hello from ray', "
         "metadata={'via': 'ray'})\n"
         "for _ in range(100):\n"
         "    if c.get_job_status(jid) in (JobStatus.SUCCEEDED, JobStatus.FAILED):"
         " break\n"
         "    time.sleep(0.2)\n"
         "info = c.get_job_info(jid)\n"
         "print('status', info.status, 'exit', info.driver_exit_code)\n"
         "print('logs', c.get_job_logs(jid).strip())\n"
         "print('listed', jid in [j.submission_id for j in c.list_jobs()])\n";
  const std::string out = absl::StrCat(testing::TempDir(), "/ray_client.out");
  const int code = std::system((python + " " + script + " " + cluster_->HttpAddress() + " " +
                                cluster_->token() + " > " + out + " 2>&1")
                                   .c_str());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(code, 0) << text;
  EXPECT_TRUE(absl::StrContains(text, "status SUCCEEDED exit 0")) << text;
  EXPECT_TRUE(absl::StrContains(text, "logs hello from ray")) << text;
  EXPECT_TRUE(absl::StrContains(text, "listed True")) << text;
}

// Starts Debian's Prometheus with `config` (YAML) in `dir`; its HTTP API listens on *port.
pid_t StartPrometheus(const std::string& dir, const std::string& config, int* port) {
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/prometheus.yml") << config;
  *port = PickFreePort();
  const pid_t pid = fork();
  if (pid == 0) {
    freopen((dir + "/prometheus.log").c_str(), "w", stderr);
    execl("/usr/bin/prometheus", "prometheus", ("--config.file=" + dir + "/prometheus.yml").c_str(),
          ("--storage.tsdb.path=" + dir + "/data").c_str(),
          ("--web.listen-address=127.0.0.1:" + std::to_string(*port)).c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

void StopPrometheus(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

// A real Prometheus server scrapes /metrics with the bearer token and can query the result.
TEST_F(JobsTest, PrometheusScrapesTheHead) {
  if (!std::filesystem::exists("/usr/bin/prometheus")) GTEST_SKIP() << "no /usr/bin/prometheus";
  const std::string dir = absl::StrCat(testing::TempDir(), "/prometheus");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/token") << cluster_->token();
  const std::string target = cluster_->HttpAddress().substr(7);  // host:port
  int port = 0;
  const pid_t pid = StartPrometheus(
      dir,
      absl::StrCat("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: troupe\n",
                   "    authorization:\n      credentials_file: ", dir, "/token\n",
                   "    static_configs:\n      - targets: ['", target, "']\n"),
      &port);
  httplib::Client prometheus("127.0.0.1", port);
  ::testing::AssertionResult saw_nodes = WaitUntil(
      [&] {
        auto r = prometheus.Get("/api/v1/query?query=troupe_nodes%7Bstate%3D%22alive%22%7D");
        return r && r->status == 200 && absl::StrContains(r->body, "\"3\"");
      },
      absl::Seconds(60), "Prometheus to scrape 3 alive nodes", absl::Milliseconds(500));
  auto up = prometheus.Get("/api/v1/query?query=up%7Bjob%3D%22troupe%22%7D");
  StopPrometheus(pid);
  EXPECT_TRUE(saw_nodes);
  ASSERT_TRUE(up);
  EXPECT_TRUE(absl::StrContains(up->body, "\"1\"")) << up->body;  // the scrape succeeded
}

// User metrics (troupe/metrics.h) recorded in a task on each of the 3 nodes reach a real
// Prometheus that finds the nodes' /metrics through the head's HTTP service discovery
// (/api/v0/prometheus_targets), as docs/jobs.md configures it; a bad tag is refused in the driver.
TEST_F(JobsTest, PrometheusScrapesUserMetricsOfEveryNode) {
  CommandResult r = Job({"submit", "--submission-id=metrics-1", "--", JobProgram(), "--metrics"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "bad tag refused: unknown tag key \"functoin\"")) << r.out;
  std::set<std::string> counted_on;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StartsWith(line, "counted on ")) counted_on.insert(std::string(line.substr(11)));
  }
  ASSERT_EQ(counted_on.size(), 3u) << r.out;
  auto targets = Request("GET", "/api/v0/prometheus_targets");
  ASSERT_TRUE(targets);
  ASSERT_EQ(targets->status, 200) << targets->body;
  json groups = json::parse(targets->body, nullptr, false);
  ASSERT_EQ(groups.size(), 3u) << targets->body;
  for (const json& group : groups) {
    EXPECT_TRUE(counted_on.count(group["labels"]["node_id"].get<std::string>())) << group.dump();
  }
  // A node's endpoint refuses a scraper without the token.
  const std::string first = groups[0]["targets"][0].get<std::string>();
  httplib::Client node_client("http://" + first);
  auto refused = node_client.Get("/metrics");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);

  if (!std::filesystem::exists("/usr/bin/prometheus")) GTEST_SKIP() << "no /usr/bin/prometheus";
  const std::string dir = absl::StrCat(testing::TempDir(), "/prometheus_sd");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/token") << cluster_->token();
  int port = 0;
  const pid_t pid = StartPrometheus(
      dir,
      absl::StrCat("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: troupe_nodes\n",
                   "    authorization:\n      credentials_file: ", dir, "/token\n",
                   "    http_sd_configs:\n      - url: ", cluster_->HttpAddress(),
                   "/api/v0/prometheus_targets\n        refresh_interval: 1s\n",
                   // Prometheus 2.42's HTTP discovery sends the bare token unless told the type.
                   "        authorization:\n          type: Bearer\n          credentials_file: ",
                   dir, "/token\n"),
      &port);
  httplib::Client prometheus("127.0.0.1", port);
  json series;
  ::testing::AssertionResult scraped = WaitUntil(
      [&] {
        auto q = prometheus.Get(
            "/api/v1/query?query=job_program_calls_total%7Bfunction%3D%22CountOnThisNode%22%7D");
        if (!q || q->status != 200) return false;
        series = json::parse(q->body, nullptr, false)["data"]["result"];
        return series.is_array() && series.size() == 3;
      },
      absl::Seconds(60), "Prometheus to scrape the counter from 3 nodes", absl::Milliseconds(500));
  auto histogram =
      prometheus.Get("/api/v1/query?query=sum(job_program_sizes_bucket%7Ble%3D%22100%22%7D)");
  StopPrometheus(pid);
  ASSERT_TRUE(scraped) << series.dump() << ReadFile(dir + "/prometheus.log");
  std::set<std::string> scraped_nodes;
  for (const json& one : series) {
    scraped_nodes.insert(one["metric"]["node_id"].get<std::string>());
    EXPECT_EQ(one["value"][1], "1") << one.dump();  // one call on each node
    EXPECT_EQ(one["metric"]["job"], "troupe_nodes") << one.dump();
  }
  EXPECT_EQ(scraped_nodes, counted_on);
  ASSERT_TRUE(histogram);
  EXPECT_TRUE(absl::StrContains(histogram->body, "\"3\"")) << histogram->body;  // 42 <= 100
}

// The head supervisor restarts a killed HTTP server on the same port, records its new pid, and
// `troupe stop` still stops everything.
TEST(HeadSupervisorTest, AKilledHttpServerComesBackOnTheSamePort) {
  const int port = PickFreePort();
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", absl::StrCat("--http-port=", port)}));
  const std::string session = cluster.HeadSessionDir();
  const int first = PidOf(session, "http");
  ASSERT_GT(first, 0);
  ASSERT_GT(PidOf(session, "head-supervisor"), 0);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  httplib::Client client("127.0.0.1", port);
  const httplib::Headers auth = {{"Authorization", "Bearer " + cluster.token()}};
  int second = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        second = PidOf(session, "http");
        if (second <= 0 || second == first) return false;
        auto r = client.Get("/api/jobs/", auth);
        return r && r->status == 200;
      },
      absl::Seconds(30), "the HTTP server to answer again on its port"));
  EXPECT_NE(kill(first, 0), 0) << "the killed server is still there";
  CommandResult stop = cluster.Troupe({"stop"});
  EXPECT_EQ(stop.exit_code, 0) << stop.out << stop.err;
  EXPECT_NE(kill(second, 0), 0) << "troupe stop left the restarted HTTP server running";
  EXPECT_TRUE(troupe::testing::ProcessesMentioning(cluster.temp_root()).empty());
}

// Regression: after the head's GCS and raylet died, the HTTP server kept its port, so a new
// `troupe start --head` on that port failed until `troupe stop`.
TEST(HeadSupervisorTest, TheHttpServerDoesNotOutliveTheHead) {
  const int port = PickFreePort();
  std::string temp_root;
  {
    ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                         TestCluster::Start({"--num-cpus=1", absl::StrCat("--http-port=", port),
                                             "--gcs-reconnect-timeout-s=2"}));
    temp_root = cluster.temp_root();
    const std::string session = cluster.HeadSessionDir();
    ASSERT_GT(PidOf(session, "http"), 0);
    for (const char* name : {"gcs", "raylet"}) {
      const int pid = PidOf(session, name);
      ASSERT_GT(pid, 0) << name;
      ASSERT_EQ(kill(pid, SIGKILL), 0) << name;
    }
    // The HTTP server and its supervisor exit by themselves (no `troupe stop`).
    EXPECT_TRUE(WaitUntil([&] { return troupe::testing::ProcessesMentioning(temp_root).empty(); },
                          absl::Seconds(60), "every process of the dead head to exit",
                          absl::Milliseconds(200)))
        << "left: " << troupe::testing::ProcessesMentioning(temp_root).size();
  }
  // A new head can take the port.
  ASSERT_OK_AND_ASSIGN(TestCluster again,
                       TestCluster::Start({"--num-cpus=1", absl::StrCat("--http-port=", port)}));
  httplib::Client client("127.0.0.1", port);
  auto r = client.Get("/api/version");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
