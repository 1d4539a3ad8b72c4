// The state CLI and cluster-wide logs against a real 2-node cluster, through the `troupe` binary
// and the head's REST API: `troupe list|get|summary|memory` (table alignment with a long actor
// class, json/yaml, filters, limit, hidden system jobs and --all), objects and workers served by
// every raylet, `troupe logs` reading another node's worker log (--actor-id, --tail, --follow,
// --task-id on the task markers), path tricks refused, the local fallback with no head, and
// --help / bad usage on every verb.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

class AnActorWithAVeryLongClassNameForTableAlignment {
 public:
  static AnActorWithAVeryLongClassNameForTableAlignment* Create() {
    return new AnActorWithAVeryLongClassNameForTableAlignment();
  }
  // Prints `text` to the worker's stdout (its log file) and returns it.
  std::string Say(std::string text) {
    std::cout << text << std::endl;
    return text;
  }
};

TROUPE_REMOTE(AnActorWithAVeryLongClassNameForTableAlignment::Create,
              &AnActorWithAVeryLongClassNameForTableAlignment::Say);

namespace {

using nlohmann::json;
using troupe::testing::CommandResult;
using troupe::testing::PickFreePort;
using troupe::testing::TestCluster;
using Printer = AnActorWithAVeryLongClassNameForTableAlignment;
constexpr char kLongClass[] = "AnActorWithAVeryLongClassNameForTableAlignment::Create";

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

class StateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started =
        TestCluster::Start({"--num-cpus=1", absl::StrCat("--http-port=", PickFreePort())});
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = new TestCluster(std::move(*started));
    auto worker = cluster_->AddWorker({"--num-cpus=1", R"(--resources={"side": 1})"});
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_node_ = new std::string(*worker);
    driver_ = new troupe::testing::Driver(*cluster_);
    // The actor runs on the worker node (only it has "side"), so its log is another node's.
    printer_ = new troupe::ActorHandle<Printer>(
        troupe::Actor(Printer::Create).SetResources({{"side", 1}}).Remote());
    ASSERT_EQ(*troupe::Get(printer_->Task(&Printer::Say).Remote(std::string("first-call"))),
              "first-call");
    ASSERT_EQ(*troupe::Get(printer_->Task(&Printer::Say).Remote(std::string("second-call"))),
              "second-call");
    // An object in the head's store (larger than what travels inline).
    big_ = new troupe::ObjectRef<std::string>(troupe::Put(std::string(2 << 20, 'x')));
  }
  static void TearDownTestSuite() {
    delete big_;
    delete printer_;
    delete driver_;
    delete worker_node_;
    delete cluster_;
  }

  CommandResult Troupe(std::vector<std::string> args) {
    args.push_back("--address=" + cluster_->HttpAddress());
    args.push_back("--token=" + cluster_->token());
    return troupe::testing::RunTroupe(args);
  }
  json Json(std::vector<std::string> args) {
    args.push_back("--format=json");
    CommandResult r = Troupe(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    json parsed = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << r.out;
    return parsed;
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client client(cluster_->HttpAddress());
    return client.Get(path.c_str(), {{"Authorization", "Bearer " + cluster_->token()}});
  }

  static TestCluster* cluster_;
  static std::string* worker_node_;
  static troupe::testing::Driver* driver_;
  static troupe::ActorHandle<Printer>* printer_;
  static troupe::ObjectRef<std::string>* big_;
};

TestCluster* StateCliTest::cluster_ = nullptr;
std::string* StateCliTest::worker_node_ = nullptr;
troupe::testing::Driver* StateCliTest::driver_ = nullptr;
troupe::ActorHandle<Printer>* StateCliTest::printer_ = nullptr;
troupe::ObjectRef<std::string>* StateCliTest::big_ = nullptr;

TEST_F(StateCliTest, ActorTableAlignsLongClassNames) {
  CommandResult r = Troupe({"list", "actors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_GE(lines.size(), 2u) << r.out;
  const size_t name_at = lines[0].find("  NAME  ") + 2;  // not CLASS_NAME's
  ASSERT_NE(name_at, std::string::npos) << r.out;
  bool found = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t class_at = lines[i].find(kLongClass);
    if (class_at == std::string::npos) continue;
    found = true;
    EXPECT_EQ(class_at, lines[0].find("CLASS_NAME")) << r.out;
    // The next column starts after the long class name, where the header's does.
    EXPECT_GE(name_at, class_at + std::string(kLongClass).size() + 2) << r.out;
    EXPECT_EQ(lines[i].find("ALIVE"), lines[0].find("STATE")) << r.out;
  }
  EXPECT_TRUE(found) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "troupe::jobs")) << r.out;
}

TEST_F(StateCliTest, JsonYamlFiltersAndLimit) {
  json actors = Json({"list", "actors", "--filter", std::string("class_name=") + kLongClass});
  ASSERT_EQ(actors.size(), 1u) << actors;
  EXPECT_EQ(actors[0]["actor_id"], printer_->ID());
  EXPECT_EQ(actors[0]["is_system"], false);
  EXPECT_EQ(actors[0]["node_id"], *worker_node_);
  EXPECT_TRUE(Json({"list", "actors", "--filter", "state!=ALIVE"}).empty());
  json nodes = Json({"list", "nodes"});
  EXPECT_EQ(nodes.size(), 2u);
  EXPECT_EQ(Json({"list", "nodes", "--limit", "1"}).size(), 1u);
  CommandResult yaml = Troupe({"list", "nodes", "--format=yaml"});
  ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
  EXPECT_TRUE(absl::StartsWith(yaml.out, "- ")) << yaml.out;  // a list of mappings
  // An ID is quoted when it starts with a digit (YAML would read it as a number).
  EXPECT_TRUE(absl::StrContains(yaml.out, "\n  node_id: " + *worker_node_ + "\n") ||
              absl::StrContains(yaml.out, "\n  node_id: \"" + *worker_node_ + "\"\n"))
      << yaml.out;
  EXPECT_TRUE(absl::StrContains(yaml.out, "\n  state: ALIVE\n")) << yaml.out;
  // A YAML reader reads back what the JSON says (PyYAML, where installed).
  if (access("/usr/bin/python3", X_OK) == 0) {
    const std::string path = testing::TempDir() + "/nodes.yaml";
    std::ofstream(path) << yaml.out;
    CommandResult parsed = troupe::testing::RunCommand(
        {"/usr/bin/python3", "-c",
         "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))", path});
    if (parsed.exit_code == 0) {
      json from_yaml = json::parse(parsed.out, nullptr, false);
      ASSERT_TRUE(from_yaml.is_array()) << parsed.out;
      ASSERT_EQ(from_yaml.size(), nodes.size());
      for (size_t i = 0; i < nodes.size(); ++i) {
        EXPECT_EQ(from_yaml[i]["node_id"], nodes[i]["node_id"]);
        EXPECT_EQ(from_yaml[i]["state"], nodes[i]["state"]);
        EXPECT_EQ(from_yaml[i]["is_head_node"], nodes[i]["is_head_node"]);
        EXPECT_EQ(from_yaml[i]["resources_total"], nodes[i]["resources_total"]);
        EXPECT_EQ(from_yaml[i]["labels"], nodes[i]["labels"]);
      }
    }
  }
  CommandResult get = Troupe({"get", "actor", printer_->ID().substr(0, 12)});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, std::string("class_name: \"") + kLongClass + "\""))
      << get.out;
  json got = Json({"get", "node", worker_node_->substr(0, 10)});
  EXPECT_EQ(got["node_id"], *worker_node_);
  CommandResult unknown = Troupe({"list", "actors", "--filter", "colour=red"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(unknown.err, "no actors field 'colour'")) << unknown.err;
}

TEST_F(StateCliTest, SystemJobsAreHiddenUnlessAll) {
  // The head's HTTP server is a driver; it is marked is_system and hidden.
  json all = Json({"list", "jobs", "--all"});
  int system = 0;
  for (const auto& job : all) {
    if (job.value("is_system", false)) {
      ++system;
      EXPECT_TRUE(absl::StrContains(job.value("entrypoint", ""), "http-server")) << job;
    }
  }
  EXPECT_GE(system, 1) << all;
  json shown = Json({"list", "jobs"});
  EXPECT_EQ(shown.size() + system, all.size());
  for (const auto& job : shown) EXPECT_FALSE(job.value("is_system", false)) << job;
  CommandResult table = Troupe({"list", "jobs"});
  EXPECT_FALSE(absl::StrContains(table.out, "http-server")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.err, "system ones hidden")) << table.err;
}

TEST_F(StateCliTest, TasksSayTheHeadDoesNotTrackThem) {
  CommandResult r = Troupe({"list", "tasks"});
  if (r.exit_code == 0) GTEST_SKIP() << "this head serves /api/v0/tasks";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "does not track tasks")) << r.err;
}

TEST_F(StateCliTest, ObjectsWorkersSummaryAndMemory) {
  json objects = Json({"list", "objects", "--limit=0"});
  bool found = false;
  for (const auto& o : objects) {
    if (o["object_id"] != big_->ID()) continue;
    found = true;
    EXPECT_EQ(o["copy"], "PRIMARY");
    EXPECT_GE(o["size"].get<int64_t>(), 2 << 20);
    EXPECT_EQ(o["sealed"], true);
    EXPECT_FALSE(o["owner_worker_id"].get<std::string>().empty());
  }
  EXPECT_TRUE(found) << objects;
  json workers = Json({"list", "workers"});
  json holder;
  for (const auto& w : workers) {
    if (w["actor_id"] == printer_->ID()) holder = w;
  }
  ASSERT_FALSE(holder.is_null()) << workers;
  EXPECT_EQ(holder["state"], "ACTOR");
  EXPECT_EQ(holder["node_id"], *worker_node_);
  EXPECT_EQ(holder["actor_class"], kLongClass);
  EXPECT_GT(holder["pid"].get<int>(), 0);
  CommandResult summary = Troupe({"summary", "actors"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  EXPECT_TRUE(absl::StrContains(summary.out, kLongClass)) << summary.out;
  EXPECT_TRUE(absl::StrContains(summary.out, "{\"ALIVE\":1}")) << summary.out;
  json by_node = Json({"summary", "objects"});
  ASSERT_FALSE(by_node.empty());
  CommandResult memory = Troupe({"memory"});
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  EXPECT_TRUE(absl::StrContains(memory.out, "--- Node ")) << memory.out;
  EXPECT_TRUE(absl::StrContains(memory.out, big_->ID())) << memory.out;
  EXPECT_TRUE(absl::StrContains(memory.out, "2.0 MiB")) << memory.out;
  EXPECT_TRUE(absl::StrContains(memory.out, "Total: ")) << memory.out;
}

TEST_F(StateCliTest, LogsOfAnotherNodesWorker) {
  CommandResult listing = Troupe({"logs"});
  ASSERT_EQ(listing.exit_code, 0) << listing.err;
  EXPECT_TRUE(absl::StrContains(listing.out, "=== node " + *worker_node_)) << listing.out;
  EXPECT_TRUE(absl::StrContains(listing.out, "raylet")) << listing.out;
  // A daemon's file of the other node, by name.
  CommandResult raylet =
      Troupe({"logs", "raylet.log", "--node-id", worker_node_->substr(0, 8), "--tail", "2"});
  ASSERT_EQ(raylet.exit_code, 0) << raylet.err;
  EXPECT_EQ(Lines(raylet.out).size(), 2u) << raylet.out;
  CommandResult log = Troupe({"logs", "--actor-id", printer_->ID()});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  EXPECT_TRUE(absl::StrContains(log.out, "first-call\n")) << log.out;
  EXPECT_TRUE(absl::StrContains(log.out, "second-call\n")) << log.out;
  EXPECT_TRUE(absl::StrContains(log.out, ":troupe task ")) << log.out;
  CommandResult tail = Troupe({"logs", "--actor-id", printer_->ID(), "--tail", "1"});
  ASSERT_EQ(tail.exit_code, 0) << tail.err;
  EXPECT_EQ(tail.out, "second-call\n");
  json holder = Json({"list", "workers", "--filter", "actor_id=" + printer_->ID()});
  ASSERT_EQ(holder.size(), 1u) << holder;
  CommandResult by_pid =
      Troupe({"logs", "--pid", std::to_string(holder[0]["pid"].get<int>()), "--tail", "1"});
  ASSERT_EQ(by_pid.exit_code, 0) << by_pid.err;
  EXPECT_EQ(by_pid.out, "second-call\n");
  // --task-id: only the lines after that call's marker, up to the next marker.
  std::string second_task;
  std::string last_marker;
  for (const auto& line : Lines(log.out)) {
    if (absl::StartsWith(line, ":troupe task ")) last_marker = line;
    if (line == "second-call")
      second_task = Lines(absl::StrReplaceAll(last_marker, {{" ", "\n"}}))[2];
  }
  ASSERT_FALSE(second_task.empty()) << log.out;
  CommandResult only = Troupe({"logs", "--actor-id", printer_->ID(), "--task-id", second_task});
  ASSERT_EQ(only.exit_code, 0) << only.err;
  EXPECT_EQ(only.out, "second-call\n");
}

TEST_F(StateCliTest, FollowPrintsWhatIsAppended) {
  std::atomic<bool> done{false};
  CommandResult followed;
  std::thread follow([&] {
    followed = troupe::testing::RunCommand(
        {"/usr/bin/timeout", "8", troupe::testing::TroupeBinary(), "logs", "--actor-id",
         printer_->ID(), "--follow", "--tail=1", "--address=" + cluster_->HttpAddress(),
         "--token=" + cluster_->token()});
    done = true;
  });
  // Keep appending until the follower is stopped by `timeout`.
  int n = 0;
  while (!done) {
    (void)troupe::Get(printer_->Task(&Printer::Say).Remote(absl::StrCat("appended-", n++)));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  follow.join();
  EXPECT_EQ(followed.exit_code, 124) << followed.err;  // still following when stopped
  std::vector<std::string> lines = Lines(followed.out);
  ASSERT_GE(lines.size(), 2u) << followed.out;
  // The first line was there before it started; later ones were appended while it ran.
  int appended = 0;
  for (size_t i = 1; i < lines.size(); ++i) appended += absl::StartsWith(lines[i], "appended-");
  EXPECT_GE(appended, 1) << followed.out;
}

TEST_F(StateCliTest, PathTricksAreRefused) {
  const std::string head_logs = cluster_->HeadSessionDir() + "/logs";
  std::filesystem::create_symlink("/etc/hostname", head_logs + "/sneaky.log");
  for (const std::string name : {"..%2Fsession_latest", "%2Fetc%2Fpasswd", "..", "sneaky.log"}) {
    auto r = Get("/api/v0/logs/file?filename=" + name);
    ASSERT_TRUE(r) << name;
    EXPECT_TRUE(r->status == 400 || r->status == 404) << name << ": " << r->status << r->body;
    EXPECT_FALSE(absl::StrContains(r->body, "\"data\"")) << name;
  }
  auto list = Get("/api/v0/logs");
  ASSERT_TRUE(list);
  EXPECT_FALSE(absl::StrContains(list->body, "sneaky.log")) << list->body;
  std::filesystem::remove(head_logs + "/sneaky.log");
  CommandResult cli = Troupe({"logs", "../token"});
  EXPECT_NE(cli.exit_code, 0);
}

TEST_F(StateCliTest, LogsFallBackToLocalFilesWithoutAHead) {
  CommandResult r = troupe::testing::RunTroupe(
      {"logs", absl::StrCat("--address=http://127.0.0.1:", PickFreePort()),
       "--token=" + cluster_->token(), "--temp-dir=" + cluster_->temp_root()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "showing this machine's log files")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "raylet")) << r.out;
}

TEST(StateCliUsageTest, HelpWorksOnEveryVerbAndBadUsageExits2) {
  const std::vector<std::vector<std::string>> helps = {{"list", "--help"},
                                                       {"list", "nodes", "--help"},
                                                       {"list", "tasks", "--help"},
                                                       {"list", "objects", "--help"},
                                                       {"list", "workers", "--help"},
                                                       {"get", "--help"},
                                                       {"get", "actor", "--help"},
                                                       {"summary", "--help"},
                                                       {"summary", "tasks", "--help"},
                                                       {"memory", "--help"},
                                                       {"logs", "--help"},
                                                       {"list", "-h"}};
  for (const auto& args : helps) {
    CommandResult r = troupe::testing::RunTroupe(args);
    EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(args, " ") << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "Usage: troupe " + args[0]))
        << absl::StrJoin(args, " ") << r.out;
  }
  const std::vector<std::vector<std::string>> bad = {{"list"},
                                                     {"list", "bogus"},
                                                     {"list", "nodes", "--format=xml"},
                                                     {"get", "actor"},
                                                     {"summary", "workers"},
                                                     {"list", "nodes", "--filter", "novalue"},
                                                     {"logs", "--tail=-1"},
                                                     {"memory", "--format=yaml"},
                                                     {"list", "nodes", "--bogus"}};
  for (const auto& args : bad) {
    CommandResult r = troupe::testing::RunTroupe(args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << r.out << r.err;
    EXPECT_FALSE(r.err.empty()) << absl::StrJoin(args, " ");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
