// TLS through the real CLI: one head started with --tls=on (on loopback, so no namespaces are
// needed; beyond loopback it is the default, see docs/security.md) plus a worker node joined with
// the head's join_command from a temp root of its own (so it trusts nothing but the pin).
// This binary is also the worker program: raylets start it in worker mode.
#include <grpcpp/grpcpp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/raylet.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "src/common/status_testing.h"
#include "src/rpc/auth.h"
#include "src/rpc/server.h"
#include "src/tls/certificates.h"
#include "src/tls/peer_certificates.h"
#include "src/tls/tls_files.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

int Plus(int a, int b) { return a + b; }

std::vector<uint8_t> Reversed(std::vector<uint8_t> bytes) {
  std::reverse(bytes.begin(), bytes.end());
  return bytes;
}

class Counter {
 public:
  static Counter* Create(int start) { return new Counter{start}; }
  int Add(int x) { return value_ += x; }
  int value_;
};

TROUPE_REMOTE(Plus, Reversed, Counter::Create, &Counter::Add);

}  // namespace

namespace troupe::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string JobProgram() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                      "/tests/job_program");
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    http_port_ = PickFreePort();
    auto cluster =
        // The memory monitor is not under test (the machine may be busy with other work).
        TestCluster::Start({"--tls=on", "--num-cpus=2", "--memory-usage-threshold=1",
                            absl::StrCat("--http-port=", http_port_)});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = new TestCluster(std::move(*cluster));
    ASSERT_FALSE(cluster_->tls_dir().empty()) << "--tls=on made no TLS folder";
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "the TLS cluster did not start";
  }

  // The head's join command split into arguments, without the leading "troupe".
  static std::vector<std::string> JoinArgs() {
    std::string command(
        absl::StripAsciiWhitespace(ReadAll(cluster_->HeadSessionDir() + "/join_command")));
    std::vector<std::string> args = absl::StrSplit(command, ' ', absl::SkipEmpty());
    args.erase(args.begin());
    return args;
  }

  // A temp root of its own: a node there has no local session to trust, only what it is given.
  static std::string FreshRoot(const std::string& name) {
    return absl::StrCat(cluster_->temp_root(), "_", name);
  }

  static TestCluster* cluster_;
  static int http_port_;
};
TestCluster* TlsTest::cluster_ = nullptr;
int TlsTest::http_port_ = 0;

TEST_F(TlsTest, HeadKeepsTheCaKeyPrivateAndWritesTheJoinCommand) {
  struct stat info {};
  ASSERT_EQ(stat(CaKeyPath(cluster_->tls_dir()).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((cluster_->HeadSessionDir() + "/join_command").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);  // it holds the token
  ASSERT_OK_AND_ASSIGN(std::string pin, CaPin(ReadAll(CaCertPath(cluster_->tls_dir()))));
  const std::string command = ReadAll(cluster_->HeadSessionDir() + "/join_command");
  EXPECT_TRUE(absl::StrContains(command, "--address=" + cluster_->gcs_address())) << command;
  EXPECT_TRUE(absl::StrContains(command, "--token=" + cluster_->token())) << command;
  EXPECT_TRUE(absl::StrContains(command, "--ca-cert-hash=" + pin)) << command;
}

TEST_F(TlsTest, ANodeJoinsWithTheJoinCommandAndGetsACertificateFromTheHead) {
  std::vector<std::string> args = JoinArgs();
  const std::string root = FreshRoot("joined");
  args.push_back("--temp-dir=" + root);
  args.push_back("--num-cpus=1");
  args.push_back("--memory-usage-threshold=1");
  args.push_back(R"(--resources={"joined": 1})");
  // Nothing local to trust: only the pin in the command.
  CommandResult joined = RunTroupe(args, {"TROUPE_TLS_DIR="});
  ASSERT_EQ(joined.exit_code, 0) << joined.out << joined.err;
  EXPECT_TRUE(absl::StrContains(joined.out, "TLS:          on")) << joined.out;
  char link[4096];
  ssize_t n = readlink((root + "/session_latest").c_str(), link, sizeof(link) - 1);
  ASSERT_GT(n, 0);
  const std::string tls_dir = TlsDirOf(std::string(link, n));
  struct stat info {};
  ASSERT_EQ(stat(NodeKeyPath(tls_dir).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_NE(access(CaKeyPath(tls_dir).c_str(), F_OK), 0) << "the CA key must stay on the head";
  EXPECT_OK(
      VerifyCertificate(ReadAll(CaCertPath(cluster_->tls_dir())), ReadAll(NodeCertPath(tls_dir))));

  // Tasks, actors and objects across both nodes, all over TLS.
  {
    Driver driver(*cluster_);
    EXPECT_EQ(*Get(Task(Plus).SetResources({{"joined", 1}}).Remote(20, 22)), 42);
    std::vector<uint8_t> big(3 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
    auto put = Put(big);  // on the head's node; the task on the joined node pulls it
    std::vector<uint8_t> back = *Get(Task(Reversed).SetResources({{"joined", 1}}).Remote(put));
    std::reverse(back.begin(), back.end());
    EXPECT_EQ(back, big);
    auto counter = Actor(Counter::Create).SetResources({{"joined", 0.5}}).Remote(1);
    EXPECT_EQ(*Get(counter.Task(&Counter::Add).Remote(2)), 3);
    EXPECT_EQ(*Get(counter.Task(&Counter::Add).Remote(4)), 7);
  }
  // A driver on the joined node finds its way with TROUPE_ADDRESS=auto through that node's
  // session (token and trust): the job program run by hand there.
  const std::string out = root + "/driver.out";
  const std::string command = absl::StrCat(
      "env -u TROUPE_TLS_DIR -u TROUPE_TOKEN TROUPE_ADDRESS=auto TROUPE_TEMP_DIR=", root, " ",
      JobProgram(), " > ", out, " 2>&1");
  EXPECT_EQ(std::system(command.c_str()), 0) << ReadAll(out);
  EXPECT_TRUE(absl::StrContains(ReadAll(out), "sum of squares: 30")) << ReadAll(out);
  CommandResult stop = RunTroupe({"stop", "--force", "--temp-dir=" + root});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
}

TEST_F(TlsTest, AJobRunsThroughTheHttpsApi) {
  EXPECT_TRUE(absl::StartsWith(cluster_->HttpAddress(), "https://")) << cluster_->HttpAddress();
  CommandResult job = RunTroupe({"job", "submit", "--address=" + cluster_->HttpAddress(),
                                 "--token=" + cluster_->token(), "--", JobProgram()});
  ASSERT_EQ(job.exit_code, 0) << job.out << job.err;
  EXPECT_TRUE(absl::StrContains(job.out, "sum of squares: 30")) << job.out;
  EXPECT_TRUE(absl::StrContains(job.err, "SUCCEEDED")) << job.err;
}

// The object data port the head's raylet logged at start ("object data port N (TLS)"), or 0.
int HeadObjectDataPort(const TestCluster& cluster) {
  for (const std::string& path : cluster.RayletLogs()) {
    if (!absl::StartsWith(path, cluster.HeadSessionDir())) continue;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find("object data port ");
      int port = 0;
      if (at != std::string::npos &&
          absl::SimpleAtoi(line.substr(at + 17, line.find(' ', at + 17) - at - 17), &port)) {
        return port;
      }
    }
  }
  return 0;
}

// What a plaintext client gets from 127.0.0.1:port after sending an object data request (the
// right magic and token; no TLS): everything until the server closes the connection.
std::string PlaintextDataRequest(int port, const std::string& token) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return "<cannot connect>";
  }
  std::string request("TROD\x00\x01", 6);
  request += std::string(1, static_cast<char>(token.size() >> 8));
  request += std::string(1, static_cast<char>(token.size() & 0xff));
  request += std::string("\x00\x14\x00\x00", 4) + std::string(16, '\0') + token +
             std::string(20, 'o');
  (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buffer[4096];
  for (ssize_t got; (got = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, got);
  close(fd);
  return reply;
}

TEST_F(TlsTest, PlaintextClientsAreRefusedOnEveryPort) {
  // Find a worker's port: an actor lives in one.
  Driver driver(*cluster_);
  auto counter = Actor(Counter::Create).Remote(0);
  ASSERT_EQ(*Get(counter.Task(&Counter::Add).Remote(1)), 1);
  ASSERT_OK_AND_ASSIGN(auto actors, cluster_->gcs().GetAllActorInfo());
  std::string worker_address;
  for (const auto& actor : actors) {
    if (actor.state() == rpc::ActorInfo::ALIVE) worker_address = actor.worker_address();
  }
  ASSERT_FALSE(worker_address.empty());
  ASSERT_OK_AND_ASSIGN(auto nodes, cluster_->gcs().GetAllNodeInfo());
  // The head's raylet (an earlier test of this suite SIGKILLs the node it joined, which may still
  // be listed as alive).
  std::string raylet_address;
  for (const auto& node : nodes) {
    if (node.is_head() && node.state() == rpc::NodeInfo::ALIVE) {
      raylet_address = absl::StrCat(node.node_ip(), ":", node.raylet_port());
    }
  }
  ASSERT_FALSE(raylet_address.empty());

  auto plaintext = [&](const std::string& address) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  };
  auto context = [&](grpc::ClientContext* c) {
    AttachToken(c, cluster_->token());  // the right token: only the transport is wrong
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  };
  {
    grpc::ClientContext c;
    context(&c);
    rpc::GetClusterInfoReply reply;
    grpc::Status status = rpc::ClusterInfoService::NewStub(plaintext(cluster_->gcs_address()))
                              ->GetClusterInfo(&c, rpc::GetClusterInfoRequest(), &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "GCS: " << status.error_message();
  }
  {
    grpc::ClientContext c;
    context(&c);
    rpc::HealthCheckReply reply;
    grpc::Status status = rpc::NodeManagerService::NewStub(plaintext(raylet_address))
                              ->HealthCheck(&c, rpc::HealthCheckRequest(), &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "raylet: " << status.error_message();
  }
  {
    grpc::ClientContext c;
    context(&c);
    rpc::GetObjectStatusReply reply;
    grpc::Status status = rpc::CoreWorkerService::NewStub(plaintext(worker_address))
                              ->GetObjectStatus(&c, rpc::GetObjectStatusRequest(), &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "worker: " << status.error_message();
  }
  {
    httplib::Client http(absl::StrCat("http://127.0.0.1:", http_port_));
    http.set_connection_timeout(5, 0);
    auto result = http.Get("/api/jobs/", {{"Authorization", "Bearer " + cluster_->token()}});
    EXPECT_FALSE(result && result->status == 200) << "HTTP answered in plain text";
  }
  // The object data port (raw TCP, not gRPC): a plaintext request gets no object data reply.
  const int data_port = HeadObjectDataPort(*cluster_);
  ASSERT_NE(data_port, 0) << "the head's raylet log names no object data port";
  {
    const std::string reply = PlaintextDataRequest(data_port, cluster_->token());
    EXPECT_NE(reply, "<cannot connect>");
    EXPECT_EQ(reply.find("TROD"), std::string::npos) << "the object data port answered in plain text";
  }
  // The same calls over TLS get through (so the refusals above are about the transport), and the
  // object data port speaks TLS with the node's certificate.
  {
    auto chain = FetchPeerCertificates(absl::StrCat("127.0.0.1:", data_port), absl::Seconds(5));
    ASSERT_TRUE(chain.ok()) << chain.status();
    ASSERT_FALSE(chain->empty());
    ASSERT_OK_AND_ASSIGN(std::string ca, ReadWholeFile(CaCertPath(cluster_->tls_dir())));
    EXPECT_OK(VerifyCertificate(ca, chain->front()));
  }
  {
    grpc::ClientContext c;
    context(&c);
    rpc::HealthCheckReply reply;
    grpc::Status status = rpc::NodeManagerService::NewStub(MakeChannel(raylet_address))
                              ->HealthCheck(&c, rpc::HealthCheckRequest(), &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
}

TEST_F(TlsTest, ANodeWithAWrongPinRefusesToJoin) {
  ASSERT_OK_AND_ASSIGN(auto foreign, GenerateCa("foreign"));
  ASSERT_OK_AND_ASSIGN(std::string wrong_pin, CaPin(foreign.cert_pem));
  ASSERT_OK_AND_ASSIGN(auto before, cluster_->gcs().GetAllNodeInfo());
  CommandResult result =
      RunTroupe({"start", "--address=" + cluster_->gcs_address(), "--token=" + cluster_->token(),
                 "--ca-cert-hash=" + wrong_pin, "--temp-dir=" + FreshRoot("wrong_pin")},
                {"TROUPE_TLS_DIR="});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(result.err, "refusing to join")) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, wrong_pin)) << result.err;
  ASSERT_OK_AND_ASSIGN(auto after, cluster_->gcs().GetAllNodeInfo());
  EXPECT_EQ(after.size(), before.size()) << "a node registered despite the wrong pin";
}

TEST_F(TlsTest, ANodeWithoutAPinIsToldToGiveOne) {
  CommandResult result =
      RunTroupe({"start", "--address=" + cluster_->gcs_address(), "--token=" + cluster_->token(),
                 "--temp-dir=" + FreshRoot("no_pin")},
                {"TROUPE_TLS_DIR="});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(result.err, "--ca-cert-hash")) << result.err;
}

TEST_F(TlsTest, AClientTrustingAForeignCaIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto foreign, GenerateCa("foreign"));
  const std::string dir = FreshRoot("foreign_ca");
  ASSERT_OK(WriteFileWithMode(CaCertPath(dir), foreign.cert_pem, 0644));
  CommandResult status =
      RunTroupe({"status", "--address=" + cluster_->gcs_address(), "--token=" + cluster_->token()},
                {"TROUPE_TLS_DIR=" + dir});
  EXPECT_NE(status.exit_code, 0) << status.out;
  CommandResult job = RunTroupe(
      {"job", "list", "--address=" + cluster_->HttpAddress(), "--token=" + cluster_->token()},
      {"TROUPE_TLS_DIR=" + dir});
  EXPECT_NE(job.exit_code, 0) << job.out;
  // ... while the cluster's own CA works.
  CommandResult good =
      RunTroupe({"status", "--address=" + cluster_->gcs_address(), "--token=" + cluster_->token()});
  EXPECT_EQ(good.exit_code, 0) << good.err;
}

// A cluster CA made for the cluster beforehand (`troupe tls make-ca`), as a Kubernetes Secret holds
// it: the head is given it with --ca-cert/--ca-key, and nodes trust it with --ca-cert alone.
class GivenCaTest : public ::testing::Test {
 protected:
  static std::string Scratch(const std::string& name) {
    return absl::StrCat(std::getenv("TEST_TMPDIR"), "/given_ca_", name);
  }
  // Runs `troupe tls make-ca --out=DIR`; returns the pin it printed ("" if it failed).
  static std::string MakeCa(const std::string& dir) {
    CommandResult made = RunTroupe({"tls", "make-ca", "--out=" + dir});
    EXPECT_EQ(made.exit_code, 0) << made.out << made.err;
    const size_t at = made.out.find("pin: ");
    if (at == std::string::npos) return "";
    return made.out.substr(at + 5, made.out.find(' ', at + 5) - at - 5);
  }
  // True when `root` holds no session (a refused start must not have begun one).
  static bool NoSessionIn(const std::string& root) {
    DIR* dir = opendir(root.c_str());
    if (dir == nullptr) return true;
    bool none = true;
    while (dirent* entry = readdir(dir)) {
      if (absl::StartsWith(entry->d_name, "session")) none = false;
    }
    closedir(dir);
    return none;
  }
};

TEST_F(GivenCaTest, MakeCaWritesAPrivateKeyAndRefusesToOverwrite) {
  const std::string dir = Scratch("make");
  const std::string pin = MakeCa(dir);
  ASSERT_OK_AND_ASSIGN(std::string printed_cert, ReadWholeFile(dir + "/ca.crt"));
  ASSERT_OK_AND_ASSIGN(std::string file_pin, CaPin(printed_cert));
  EXPECT_EQ(pin, file_pin);
  EXPECT_OK(CheckCaCertificate(printed_cert));
  struct stat info {};
  ASSERT_EQ(stat((dir + "/ca.key").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  CommandResult again = RunTroupe({"tls", "make-ca", "--out=" + dir});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(again.err, "not overwriting")) << again.err;
  ASSERT_OK_AND_ASSIGN(std::string unchanged, ReadWholeFile(dir + "/ca.crt"));
  EXPECT_EQ(unchanged, printed_cert);
}

TEST_F(GivenCaTest, AHeadWithTheCaAndANodeTrustingItFormATlsCluster) {
  const std::string dir = Scratch("cluster");
  const std::string pin = MakeCa(dir);
  ASSERT_FALSE(pin.empty());
  // On loopback: a given CA turns TLS on without --tls=on.
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--ca-cert=" + dir + "/ca.crt",
                                           "--ca-key=" + dir + "/ca.key", "--num-cpus=1",
                                           "--memory-usage-threshold=1", "--tls-san=troupe-head"}));
  ASSERT_FALSE(cluster.tls_dir().empty()) << "a head given a CA runs no TLS";
  ASSERT_OK_AND_ASSIGN(std::string head_ca, ReadWholeFile(CaCertPath(cluster.tls_dir())));
  ASSERT_OK_AND_ASSIGN(std::string given_ca, ReadWholeFile(dir + "/ca.crt"));
  EXPECT_EQ(head_ca, given_ca) << "the head made its own CA instead of using --ca-cert";
  EXPECT_TRUE(absl::StrContains(ReadAll(cluster.HeadSessionDir() + "/join_command"),
                                "--ca-cert-hash=" + pin));
  ASSERT_OK_AND_ASSIGN(auto names, SubjectAltNames(ReadAll(NodeCertPath(cluster.tls_dir()))));
  EXPECT_NE(std::find(names.begin(), names.end(), "troupe-head"), names.end())
      << "--tls-san is not in the head's certificate";

  // A node trusting another CA is refused before it registers anything.
  const std::string other = Scratch("other");
  MakeCa(other);
  const std::string refused_root = Scratch("refused_root");
  CommandResult refused = RunTroupe(
      {"start", "--address=" + cluster.gcs_address(), "--token=" + cluster.token(),
       "--ca-cert=" + other + "/ca.crt", "--temp-dir=" + refused_root},
      {"TROUPE_TLS_DIR="});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, "refusing to join")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, pin)) << "names the CA the head presented: "
                                                   << refused.err;
  EXPECT_TRUE(NoSessionIn(refused_root));
  // --ca-cert-hash that is not the file's pin: refused before connecting.
  ASSERT_OK_AND_ASSIGN(std::string other_pin, CaPin(*ReadWholeFile(other + "/ca.crt")));
  CommandResult mismatch = RunTroupe(
      {"start", "--address=" + cluster.gcs_address(), "--token=" + cluster.token(),
       "--ca-cert=" + dir + "/ca.crt", "--ca-cert-hash=" + other_pin,
       "--temp-dir=" + refused_root},
      {"TROUPE_TLS_DIR="});
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(mismatch.err, "does not match --ca-cert")) << mismatch.err;
  EXPECT_TRUE(NoSessionIn(refused_root));
  ASSERT_OK_AND_ASSIGN(auto nodes, cluster.gcs().GetAllNodeInfo());
  EXPECT_EQ(nodes.size(), 1u);

  // A node given only the CA certificate (and the matching pin) joins from a root of its own.
  const std::string root = Scratch("joined_root");
  CommandResult joined = RunTroupe(
      {"start", "--address=" + cluster.gcs_address(), "--token=" + cluster.token(),
       "--ca-cert=" + dir + "/ca.crt", "--ca-cert-hash=" + pin, "--temp-dir=" + root,
       "--num-cpus=1", "--memory-usage-threshold=1"},
      {"TROUPE_TLS_DIR="});
  ASSERT_EQ(joined.exit_code, 0) << joined.out << joined.err;
  EXPECT_TRUE(absl::StrContains(joined.out, "TLS:          on")) << joined.out;
  CommandResult status = cluster.Troupe({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.out, "2 alive, 0 dead")) << status.out;
  CommandResult stop = RunTroupe({"stop", "--force", "--temp-dir=" + root});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
}

TEST_F(GivenCaTest, BadCaFlagsAreRefusedBeforeAnythingStarts) {
  const std::string dir = Scratch("bad");
  MakeCa(dir);
  const std::string other = Scratch("bad_other");
  MakeCa(other);
  // A node certificate (no CA) with its own key.
  ASSERT_OK_AND_ASSIGN(auto ca_files, GenerateCa("leaf-issuer"));
  ASSERT_OK_AND_ASSIGN(auto ca, CertificateAuthority::Load(ca_files));
  ASSERT_OK_AND_ASSIGN(auto leaf, ca.Issue({"node", {"127.0.0.1"}}));
  ASSERT_OK(WriteFileWithMode(dir + "/leaf.crt", leaf.cert_pem, 0644));
  ASSERT_OK(WriteFileWithMode(dir + "/leaf.key", leaf.key_pem, 0600));
  ASSERT_OK(WriteFileWithMode(dir + "/open.key", *ReadWholeFile(dir + "/ca.key"), 0644));
  const std::string cert = "--ca-cert=" + dir + "/ca.crt";
  const std::string root = Scratch("bad_root");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--head", cert, "--ca-key=" + other + "/ca.key"}, "does not belong to the CA certificate"},
      {{"--head", "--ca-cert=" + dir + "/leaf.crt", "--ca-key=" + dir + "/leaf.key"},
       "not a CA certificate"},
      {{"--head", cert}, "--ca-cert and --ca-key go together"},
      {{"--head", "--ca-key=" + dir + "/ca.key"}, "--ca-cert and --ca-key go together"},
      {{"--head", cert, "--ca-key=" + dir + "/open.key"}, "open to other users (mode 0644)"},
      {{"--head", cert, "--ca-key=" + dir + "/ca.key", "--tls=off"}, "--tls=off"},
      {{"--address=127.0.0.1:1", cert, "--ca-key=" + dir + "/ca.key"}, "--ca-key is for the head"},
      {{"--address=127.0.0.1:1", "--ca-cert=" + dir + "/leaf.crt"}, "not a CA certificate"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"start", "--temp-dir=" + root, "--http-port=0"};
    if (c.args[0] == "--head") args.push_back(absl::StrCat("--port=", PickFreePort()));
    args.insert(args.end(), c.args.begin(), c.args.end());
    CommandResult result = RunTroupe(args, {"TROUPE_TLS_DIR="});
    const std::string what = absl::StrJoin(c.args, " ");
    if (result.exit_code == 0) RunTroupe({"stop", "--force", "--temp-dir=" + root});
    EXPECT_EQ(result.exit_code, 2) << what << "\n" << result.err;
    EXPECT_TRUE(absl::StrContains(result.err, c.says)) << what << "\n" << result.err;
    EXPECT_TRUE(NoSessionIn(root)) << what << " left a session in " << root;
  }
}

}  // namespace
}  // namespace troupe::testing

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
