// Task events end to end on a real 2-node cluster: a driver runs tasks (one throws, one kills its
// worker and is retried), an actor and its calls; then the head's task API (/api/v0/tasks,
// /tasks/{id}, /tasks/summarize) shows each attempt with its state, node, worker and error, and
// `troupe timeline -o FILE` writes Chrome trace JSON whose complete ("X") events are exactly the
// task runs, one thread per worker. This binary is also the worker program.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

using nlohmann::json;
using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;

int Square(int x) { return x * x; }
int Boom(int) { throw std::runtime_error("boom for the task events test"); }
int Crash(int) { _exit(3); }

class Tally {
 public:
  static Tally* Create(int start) { return new Tally{start}; }
  int Add(int x) { return total_ += x; }
  // Longer than a worker's flush interval (1 s): the GCS sees it RUNNING before it ends.
  int Slow(int x) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    return x;
  }

 private:
  explicit Tally(int start) : total_(start) {}
  int total_;
};

TROUPE_REMOTE(Square, Boom, Crash, Tally::Create, &Tally::Add, &Tally::Slow);

json GetJson(TestCluster& cluster, const std::string& path, int* status = nullptr) {
  httplib::Client client(cluster.HttpAddress());
  auto r = client.Get(path.c_str(), {{"Authorization", "Bearer " + cluster.token()}});
  if (status) *status = r ? r->status : 0;
  return r ? json::parse(r->body, nullptr, false) : json();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(TaskEventsTest, TasksActorsFailuresAndRetriesShowInTheApiAndTimeline) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", absl::StrCat(
                                                               "--http-port=",
                                                               troupe::testing::PickFreePort())}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);

  std::vector<troupe::ObjectRef<int>> squares;
  for (int i = 0; i < 6; ++i) squares.push_back(troupe::Task(Square).Remote(i));
  for (int i = 0; i < 6; ++i) ASSERT_EQ(*troupe::Get(squares[i]), i * i);
  EXPECT_THROW(troupe::Get(troupe::Task(Boom).Remote(1)), troupe::TaskError);
  auto tally = troupe::Actor(Tally::Create).Remote(10);
  for (int i = 1; i <= 3; ++i) EXPECT_GT(*troupe::Get(tally.Task(&Tally::Add).Remote(i)), 10);

  // Our job: the one the Square tasks belong to.
  std::string job;
  json answer;
  ASSERT_TRUE(WaitUntil(
      [&] {
        answer = GetJson(cluster, "/api/v0/tasks?filter=state=FINISHED&limit=10000");
        for (const auto& row : answer["result"]) {
          if (absl::StrContains(row.value("name", ""), "Square")) job = row["job_id"];
        }
        return !job.empty();
      },
      absl::Seconds(30), "a finished Square task in /api/v0/tasks"))
      << GetJson(cluster, "/api/v0/tasks?limit=10000").dump(1);
  // The same worker may have run those tasks: it reports them within ~1 s, and a worker that dies
  // before then loses what it had not reported, so the crashing task comes once they are in.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return GetJson(cluster, "/api/v0/tasks?filter=state=FINISHED&filter=job_id=" + job)
                       ["total"] == 6 + 1 + 3 &&
               GetJson(cluster, "/api/v0/tasks?filter=state=FAILED&filter=job_id=" + job)
                       ["total"] == 1;
      },
      absl::Seconds(30), "the Square tasks and the actor's to finish, Boom to fail"));
  EXPECT_ANY_THROW(troupe::Get(troupe::Task(Crash).SetMaxRetries(1).Remote(1)));

  // Every attempt reaches its final state once both sides have flushed (about 1 s).
  json rows;
  auto by_name = [&](const std::string& part) {
    std::vector<json> out;
    for (const auto& row : rows) {
      if (absl::StrContains(row.value("name", ""), part)) out.push_back(row);
    }
    return out;
  };
  auto all_final = [&] {
    for (const auto& row : rows) {
      if (row["state"] != "FINISHED" && row["state"] != "FAILED") return false;
    }
    return true;
  };
  ASSERT_TRUE(WaitUntil(
      [&] {
        rows = GetJson(cluster, "/api/v0/tasks?detail=true&limit=10000&filter=job_id=" + job)
                   ["result"];
        return rows.size() == 6 + 1 + 2 + 1 + 3 && all_final();
      },
      absl::Seconds(30), "13 task attempts in their final states"))
      << rows.dump(1);

  json status = cluster.Status();
  auto squares_seen = by_name("Square");
  ASSERT_EQ(squares_seen.size(), 6u);
  for (const auto& row : squares_seen) {
    EXPECT_EQ(row["state"], "FINISHED") << row;
    EXPECT_EQ(row["type"], "NORMAL_TASK");
    EXPECT_EQ(row["attempt_number"], 0);
    EXPECT_FALSE(troupe::testing::FindNode(status, row["node_id"]).is_null()) << row;
    EXPECT_GT(row["worker_pid"].get<int>(), 0);
    EXPECT_GT(row["start_time_ms"].get<int64_t>(), 0);
    EXPECT_GE(row["end_time_ms"].get<int64_t>(), row["start_time_ms"].get<int64_t>());
    EXPECT_TRUE(row["state_times_ms"].contains("SUBMITTED")) << row;
  }
  auto boom = by_name("Boom");
  ASSERT_EQ(boom.size(), 1u);
  EXPECT_EQ(boom[0]["state"], "FAILED");
  EXPECT_TRUE(absl::StrContains(boom[0].value("error_message", ""), "boom for the task events"))
      << boom[0];
  // The crashing task: two attempts, each failed by its owner as a worker death.
  auto crash = by_name("Crash");
  ASSERT_EQ(crash.size(), 2u);
  std::set<int> attempts;
  for (const auto& row : crash) {
    attempts.insert(row["attempt_number"].get<int>());
    EXPECT_EQ(row["state"], "FAILED") << row;
    EXPECT_TRUE(absl::StrContains(row.value("error_message", ""), "died")) << row;
  }
  EXPECT_EQ(attempts, (std::set<int>{0, 1}));
  auto creation = by_name("Create");
  ASSERT_EQ(creation.size(), 1u);
  EXPECT_EQ(creation[0]["type"], "ACTOR_CREATION_TASK");
  EXPECT_EQ(creation[0]["state"], "FINISHED");
  const std::string actor_id = creation[0]["actor_id"];
  EXPECT_FALSE(actor_id.empty());
  auto adds = by_name("Add");
  ASSERT_EQ(adds.size(), 3u);
  for (const auto& row : adds) {
    EXPECT_EQ(row["type"], "ACTOR_TASK");
    EXPECT_EQ(row["state"], "FINISHED");
    EXPECT_EQ(row["actor_id"], actor_id);
    EXPECT_EQ(row["worker_pid"], creation[0]["worker_pid"]);  // the actor's own worker
  }

  // Filters, limit, one task, summary, bad requests.
  json actor_calls =
      GetJson(cluster, "/api/v0/tasks?filter=type=ACTOR_TASK&filter=job_id=" + job);
  EXPECT_EQ(actor_calls["total"], 3);
  json not_finished = GetJson(cluster, "/api/v0/tasks?filter=state!=FINISHED&filter=job_id=" + job);
  EXPECT_EQ(not_finished["total"], 3);  // Boom and two Crash attempts
  json limited = GetJson(cluster, "/api/v0/tasks?limit=2&filter=job_id=" + job);
  EXPECT_EQ(limited["num_after_truncation"], 2);
  EXPECT_EQ(limited["total"], 13);
  EXPECT_EQ(limited["num_dropped"], 0);
  int code = 0;
  json one = GetJson(cluster, "/api/v0/tasks/" + boom[0]["task_id"].get<std::string>(), &code);
  EXPECT_EQ(code, 200);
  EXPECT_EQ(one["result"]["state"], "FAILED");
  GetJson(cluster, "/api/v0/tasks/" + std::string(32, '0'), &code);
  EXPECT_EQ(code, 404);
  GetJson(cluster, "/api/v0/tasks?filter=colour=red", &code);
  EXPECT_EQ(code, 400);
  GetJson(cluster, "/api/v0/tasks?limit=-1", &code);
  EXPECT_EQ(code, 400);
  // limit=0: every matching task (the CLI's --limit 0).
  json every = GetJson(cluster, "/api/v0/tasks?limit=0&filter=job_id=" + job, &code);
  EXPECT_EQ(code, 200);
  EXPECT_EQ(every["num_after_truncation"], 13);
  json summary = GetJson(cluster, "/api/v0/tasks/summarize?filter=job_id=" + job)["summary"];
  std::string square_name = squares_seen[0]["name"];
  EXPECT_EQ(summary[square_name]["state_counts"]["FINISHED"], 6) << summary;
  EXPECT_EQ(summary[std::string(crash[0]["name"])]["state_counts"]["FAILED"], 2) << summary;

  // The timeline: one X event per run (every attempt that ran), on its worker's thread.
  const std::string file = absl::StrCat(testing::TempDir(), "/trace.json");
  auto r = cluster.Troupe({"timeline", "--address=" + cluster.HttpAddress(),
                           "--token=" + cluster.token(), "--job=" + job, "-o", file});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json trace = json::parse(ReadFile(file), nullptr, false);
  ASSERT_FALSE(trace.is_discarded()) << ReadFile(file);
  std::map<std::string, json> ran;  // task id + attempt -> row, for attempts that ran
  for (const auto& row : rows) {
    if (row["start_time_ms"].get<int64_t>() > 0) {
      ran[absl::StrCat(row["task_id"].get<std::string>(), "/", row["attempt_number"].get<int>())] =
          row;
    }
  }
  EXPECT_GE(ran.size(), 11u);  // the crashing attempts may die before reporting RUNNING
  std::map<int, std::set<int>> threads_named;  // pid -> tids with a thread_name
  int complete = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      threads_named[event["pid"]].insert(event["tid"].get<int>());
    }
    if (event["ph"] != "X") continue;
    ++complete;
    const std::string key =
        absl::StrCat(event["args"]["task_id"].get<std::string>(), "/",
                     event["args"]["attempt"].get<int>());
    ASSERT_TRUE(ran.count(key)) << event;
    EXPECT_EQ(event["name"], ran[key]["name"]);
    EXPECT_EQ(event["tid"], ran[key]["worker_pid"]);
    EXPECT_GT(event["dur"].get<int64_t>(), 0);
    EXPECT_TRUE(threads_named[event["pid"]].count(event["tid"].get<int>())) << event;
  }
  // Runs that ended (a crashed attempt's worker never reported an end).
  int ended = 0;
  for (const auto& [key, row] : ran) ended += row["end_time_ms"].get<int64_t>() > 0 ? 1 : 0;
  EXPECT_EQ(complete, ended);
  EXPECT_GE(complete, 11);
}

// Regression: a long call's end was buffered for the next flush, so an actor killed as soon as its
// caller had the result (the trainer's workers after TrainWorker::Run) stayed RUNNING forever.
TEST(TaskEventsTest, ALongCallsEndIsRecordedEvenIfTheActorIsKilledRightAfter) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", absl::StrCat(
                                                               "--http-port=",
                                                               troupe::testing::PickFreePort())}));
  Driver driver(cluster);
  auto tally = troupe::Actor(Tally::Create).Remote(0);
  EXPECT_EQ(*troupe::Get(tally.Task(&Tally::Slow).Remote(7)), 7);
  tally.Kill();  // at once: the worker has no time left for a periodic flush
  json rows;
  auto slow_state = [&] {
    rows = GetJson(cluster, "/api/v0/tasks?detail=true&limit=10000")["result"];
    for (const auto& row : rows) {
      if (absl::StrContains(row.value("name", ""), "Slow")) return row.value("state", "");
    }
    return std::string();
  };
  ASSERT_TRUE(WaitUntil([&] { return slow_state() == "FINISHED"; }, absl::Seconds(20),
                        "the killed actor's long call to show FINISHED"))
      << rows.dump(1);
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
