// The state CLI and cluster-wide logs against a real 2-node cluster, through the `troupe` binary
// and the head's REST API: `troupe list|get|summary|memory` (table alignment with a long actor
// class, json/yaml, filters, limit, hidden system jobs and --all), objects and workers served by
// every raylet, `troupe logs` reading another node's worker log (--actor-id, --tail, --follow,
// --task-id on the task markers), path tricks refused, the local fallback with no head, and
// --help / bad usage on every verb.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
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
#include "src/train/run_record.h"
#include "src/train/run_record_testing.h"
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

// What the short program (ProgramMain: this binary run with $STATE_CLI_PROGRAM set) runs: more
// than a page (100) of tasks, nested tasks, an actor and one task that never ends.
constexpr int kProgramSquares = 120;
constexpr int kProgramInner = 5;
int ProgramSquare(int x) {
  std::cout << "square-of-" << x << std::endl;
  return x * x;
}
int ProgramInner(int x) { return x + 1; }
// Submits kProgramInner nested tasks (owned by this worker, not the driver) and sums them.
int ProgramOuter(int n) {
  std::vector<troupe::ObjectRef<int>> inner;
  for (int i = 0; i < n; ++i) inner.push_back(troupe::Task(ProgramInner).Remote(i));
  int sum = 0;
  for (auto& ref : inner) sum += *troupe::Get(ref);
  return sum;
}
// Says it runs (creates `marker`), then outlives its job.
int ProgramNeverEnds(std::string marker) {
  std::ofstream(marker) << "running\n";
  std::this_thread::sleep_for(std::chrono::minutes(10));
  return 0;
}
class ProgramStore {
 public:
  static ProgramStore* Create() { return new ProgramStore(); }
  int Put(int x) { return stored_ += x; }

 private:
  int stored_ = 0;
};
TROUPE_REMOTE(ProgramSquare, ProgramInner, ProgramOuter, ProgramNeverEnds, ProgramStore::Create,
              &ProgramStore::Put);

// A driver process that runs the above and exits without waiting for ProgramNeverEnds (once it
// runs). $STATE_CLI_PROGRAM: "GCS_ADDRESS TOKEN MARKER_PATH".
int ProgramMain(const std::string& setup) {
  std::vector<std::string> parts = absl::StrSplit(setup, ' ');
  if (parts.size() != 3) return 2;
  troupe::Config config;
  config.address = parts[0];
  config.token = parts[1];
  config.log_to_driver = false;
  troupe::Init(config);
  std::vector<troupe::ObjectRef<int>> squares;
  for (int i = 0; i < kProgramSquares; ++i)
    squares.push_back(troupe::Task(ProgramSquare).Remote(i));
  for (auto& ref : squares) (void)*troupe::Get(ref);
  if (*troupe::Get(troupe::Task(ProgramOuter).Remote(kProgramInner)) != 15) return 3;
  auto store = troupe::Actor(ProgramStore::Create).Remote();
  if (*troupe::Get(store.Task(&ProgramStore::Put).Remote(7)) != 7) return 4;
  auto never = troupe::Task(ProgramNeverEnds).Remote(parts[2]);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!std::filesystem::exists(parts[2]) && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  troupe::Shutdown();
  return std::filesystem::exists(parts[2]) ? 0 : 5;
}

namespace {

using nlohmann::json;
using troupe::testing::CommandResult;
using troupe::testing::PickFreePort;
using troupe::testing::TestCluster;
using Printer = AnActorWithAVeryLongClassNameForTableAlignment;
// Actors show their class (not the factory, AnActor...::Create).
constexpr char kLongClass[] = "AnActorWithAVeryLongClassNameForTableAlignment";

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
  EXPECT_TRUE(absl::StrContains(get.out, std::string("\nclass_name: ") + kLongClass + "\n"))
      << get.out;
  // Ray's spelling, the plural kind.
  CommandResult plural = Troupe({"get", "actors", printer_->ID().substr(0, 12)});
  ASSERT_EQ(plural.exit_code, 0) << plural.err;
  EXPECT_EQ(plural.out, get.out);
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

// The task commands as a user runs them: after a real program (its own process) has ended, with
// more than a page of tasks, each flag as `--flag value` and `--flag=value`. Regressions: the
// program's tasks stayed PENDING_NODE_ASSIGNMENT for good and its nested tasks never showed (its
// workers were SIGKILLed before reporting), `list tasks` stopped at 100 rows whatever --limit
// said, `get task` and `logs --task-id` could not find the tasks past them, `summary tasks`
// always failed (HTTP 400), methods showed as &Class::Method, and the raylet logged every
// worker of the ended job as "killed by signal 9".
TEST_F(StateCliTest, TasksOfAProgramThatEndedShowTheirFinalStateThroughEveryCommand) {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(length, 0);
  const std::string marker = testing::TempDir() + "/never-ends-runs";
  CommandResult program = troupe::testing::RunCommand(
      {std::string(self, length)},
      {"STATE_CLI_PROGRAM=" + cluster_->gcs_address() + " " + cluster_->token() + " " + marker});
  ASSERT_EQ(program.exit_code, 0) << program.out << program.err;

  // The program's job, from its one ProgramOuter task.
  std::string job;
  ASSERT_TRUE(troupe::testing::WaitUntil(
      [&] {
        CommandResult r =
            Troupe({"list", "tasks", "--filter", "name=ProgramOuter", "--format", "json"});
        json rows = json::parse(r.out, nullptr, false);
        if (rows.is_array() && rows.size() == 1) job = rows[0].value("job_id", "");
        return !job.empty();
      },
      absl::Seconds(30), "the program's ProgramOuter task"));
  // Every task ends up in its final state once the job's workers were stopped (and reported):
  // all FINISHED, the one left running abandoned at the job's end.
  const size_t expected = kProgramSquares + kProgramInner + 1 + 1 + 1 + 1;
  json rows;
  std::map<std::string, std::map<std::string, int>> states;  // name -> state -> count
  ASSERT_TRUE(troupe::testing::WaitUntil(
      [&] {
        rows = Json({"list", "tasks", "--filter", "job_id=" + job, "--limit", "0"});
        states.clear();
        for (const auto& row : rows) states[row.value("name", "")][row.value("state", "")]++;
        return rows.size() == expected && states["ProgramSquare"]["FINISHED"] == kProgramSquares &&
               states["ProgramInner"]["FINISHED"] == kProgramInner &&
               states["ProgramNeverEnds"]["FAILED"] == 1;
      },
      absl::Seconds(60), "the program's tasks in their final states"))
      << rows.dump(1);
  EXPECT_EQ(states["ProgramOuter"]["FINISHED"], 1) << rows.dump(1);
  EXPECT_EQ(states["ProgramStore::Create"]["FINISHED"], 1) << rows.dump(1);
  EXPECT_EQ(states["ProgramStore::Put"]["FINISHED"], 1) << rows.dump(1);  // no leading '&'
  for (const auto& row : rows) {
    if (row["name"] != "ProgramNeverEnds") continue;
    EXPECT_TRUE(absl::StrContains(row.value("error_message", ""), "abandoned at job end")) << row;
  }

  // list: 100 rows by default, saying how many there are; --limit in both forms; 0: all.
  CommandResult table = Troupe({"list", "tasks", "--filter", "job_id=" + job});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(Lines(table.out).size(), 1u + 100u) << table.out;
  EXPECT_TRUE(
      absl::StrContains(table.err, absl::StrCat(expected, " tasks, 100 shown (--limit 100")))
      << table.err;
  for (const std::vector<std::string>& limit :
       {std::vector<std::string>{"--limit", "120"}, std::vector<std::string>{"--limit=120"}}) {
    std::vector<std::string> args = {"list", "tasks", "--filter=job_id=" + job, "--format=json"};
    args.insert(args.end(), limit.begin(), limit.end());
    CommandResult r = Troupe(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out, nullptr, false).size(), 120u) << limit[0];
    EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat(expected, " tasks, 120 shown"))) << r.err;
  }
  EXPECT_EQ(Json({"list", "tasks", "--filter", "job_id=" + job, "--limit", "150"}).size(),
            expected);
  EXPECT_EQ(Json({"list", "tasks", "--filter", "job_id=" + job, "--limit=0"}).size(), expected);

  // get and logs find a task past the first page, by its whole ID or a prefix, singular or
  // plural (Ray's `ray get tasks ID`).
  json last_square;
  for (const auto& row : rows) {
    if (row["name"] == "ProgramSquare") last_square = row;
  }
  ASSERT_FALSE(last_square.is_null());
  const std::string task_id = last_square["task_id"];
  for (const std::vector<std::string>& get :
       {std::vector<std::string>{"get", "task", task_id, "--format", "json"},
        std::vector<std::string>{"get", "tasks", task_id.substr(0, 14), "--format=json"}}) {
    CommandResult r = Troupe(get);
    ASSERT_EQ(r.exit_code, 0) << get[1] << ": " << r.err;
    json got = json::parse(r.out, nullptr, false);
    EXPECT_EQ(got["task_id"], task_id) << r.out;
    EXPECT_EQ(got["state"], "FINISHED") << r.out;
  }
  // The last square printed its own number, and only that, in its worker's log.
  int last_number = -1;
  for (const auto& row : rows) {
    if (row["name"] == "ProgramSquare") ++last_number;
  }
  for (const std::vector<std::string>& logs :
       {std::vector<std::string>{"logs", "--task-id", task_id},
        std::vector<std::string>{"logs", "--task-id=" + task_id}}) {
    CommandResult r = Troupe(logs);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, absl::StrCat("square-of-", last_number, "\n")) << logs[1];
  }

  // summary: counted by the head, every task (not a page).
  CommandResult summary = Troupe({"summary", "tasks"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  EXPECT_TRUE(absl::StrContains(summary.out, "ProgramSquare")) << summary.out;
  json counted = Json({"summary", "tasks"});
  bool found_squares = false;
  for (const auto& entry : counted) {
    if (entry["name"] != "ProgramSquare") continue;
    found_squares = true;
    EXPECT_EQ(entry["state_counts"]["FINISHED"], kProgramSquares) << entry;
  }
  EXPECT_TRUE(found_squares) << counted.dump(1);

  // timeline, both forms: one run per task that ran (the abandoned one ran too).
  for (const std::vector<std::string>& timeline :
       {std::vector<std::string>{"timeline", "--job", job, "-o", testing::TempDir() + "/t1.json"},
        std::vector<std::string>{"timeline", "--job=" + job,
                                 "--output=" + testing::TempDir() + "/t2.json"}}) {
    CommandResult r = Troupe(timeline);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("wrote ", expected, " task runs"))) << r.out;
  }

  // The actor shows its class; --address and --token as `--flag value`.
  CommandResult actors = troupe::testing::RunTroupe(
      {"list", "actors", "--filter", "class_name=ProgramStore", "--format", "json", "--address",
       cluster_->HttpAddress(), "--token", cluster_->token()});
  ASSERT_EQ(actors.exit_code, 0) << actors.err;
  EXPECT_EQ(json::parse(actors.out, nullptr, false).size(), 1u) << actors.out;

  // A normal job end is no crash in the raylets' logs: workers are stopped, not killed. The
  // raylet stops them once it hears the job ended, which may come after the commands above.
  auto stopped_lines = [&] {
    int stopped = 0;
    for (const std::string& path : cluster_->RayletLogs()) {
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);) {
        if (absl::StrContains(line, "was stopped (")) ++stopped;
      }
    }
    return stopped;
  };
  EXPECT_TRUE(troupe::testing::WaitUntil([&] { return stopped_lines() >= 1; }, absl::Seconds(30),
                                         "a worker stopped at the job's end in a raylet log"));
  for (const std::string& path : cluster_->RayletLogs()) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (absl::StrContains(line, "killed by signal")) {
        EXPECT_TRUE(absl::StrContains(line, "was stopped (")) << path << ": " << line;
      }
    }
  }
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

// Issue 33: an elastic training run's membership changes, as its driver publishes them, in
// `troupe list train-runs` and `troupe get train-run`.
TEST_F(StateCliTest, TrainRunsShowTheirMembershipChanges) {
  troupe::train::RunRecord record =
      troupe::train::TestRunRecord("elastic-cli", 1700000000000, /*num_workers=*/4);
  record.min_workers = 2;
  const troupe::train::MembershipEvent left = troupe::train::TestRankLeftEvent();
  troupe::train::MembershipEvent joined;  // a replacement, after step 50
  joined.generation = 3;
  joined.change = "joined";
  joined.why = "replacement";
  joined.ranks = {2};
  joined.world_size = 3;
  joined.step = 50;
  joined.recovery_s = 0.5;
  record.membership = {left, joined};
  troupe::train::PublishRunRecord(record);

  json runs = Json({"list", "train-runs"});
  json found;
  for (const auto& run : runs) {
    if (run["run_id"] == record.run_id) found = run;
  }
  ASSERT_FALSE(found.is_null()) << runs;
  EXPECT_EQ(found["min_workers"], 2);
  EXPECT_EQ(found["changes"],
            "gen 2: rank 2 left (died) in step 42, next step 0.250 s later; gen 3: rank 2 joined "
            "(replacement) after step 50, next step 0.500 s later");
  CommandResult table = Troupe({"list", "train-runs"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(absl::StrContains(table.out, "CHANGES")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, "gen 2: rank 2 left (died)")) << table.out;
  json one = Json({"get", "train-run", record.run_id.substr(0, record.run_id.size() - 2)});
  ASSERT_EQ(one["membership"].size(), 2u) << one;
  EXPECT_EQ(one["membership"][0]["why"], "died");
  EXPECT_EQ(one["membership"][0]["ranks"], json::array({2}));
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

// Regressions: `troupe help start` printed the global help, a mistyped subcommand got no hint.
TEST(StateCliUsageTest, HelpTopicsAndDidYouMean) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> helps = {
      {{"help", "start"}, "Usage: troupe start"},
      {{"help", "list", "tasks"}, "Usage: troupe list tasks"},
      {{"help", "job", "status"}, "Usage: troupe job status"},
      {{"help", "get"}, "Usage: troupe get"},
      {{"get", "actors", "--help"}, "Usage: troupe get actor"},
      {{"help"}, "Usage: troupe <command>"}};
  for (const auto& [args, usage] : helps) {
    CommandResult r = troupe::testing::RunTroupe(args);
    EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(args, " ") << r.err;
    EXPECT_TRUE(absl::StartsWith(r.out, usage)) << absl::StrJoin(args, " ") << ": " << r.out;
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> typos = {
      {{"lsit", "tasks"}, "did you mean 'list'?"},
      {{"help", "strat"}, "did you mean 'start'?"},
      {{"list", "actros"}, "did you mean 'actors'?"},
      {{"get", "taks", "5d0b"}, "did you mean 'tasks'?"},
      {{"summary", "task"}, ""},  // the singular is fine here too
      {{"job", "stauts", "x"}, "did you mean 'status'?"},
      {{"train", "lanuch"}, "did you mean 'launch'?"},
      {{"list", "tasks", "--limt=5"}, "did you mean --limit?"}};
  for (const auto& [args, hint] : typos) {
    CommandResult r = troupe::testing::RunTroupe(args);
    if (hint.empty()) {
      // `summary task` goes to the head: no usage error, whatever the head answers.
      EXPECT_NE(r.exit_code, 2) << absl::StrJoin(args, " ") << r.err;
      continue;
    }
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, hint)) << absl::StrJoin(args, " ") << ": " << r.err;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  if (const char* setup = std::getenv("STATE_CLI_PROGRAM")) return ProgramMain(setup);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
