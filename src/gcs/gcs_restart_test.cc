// A GCS restart on fakes: two sets of managers (the killed incarnation and the restarted one) over
// one InMemoryStoreClient, wired like GcsServer, with FakeLeaseClient / FakeTaskPushClient and a
// FakeClock. The first set is simply abandoned, as a SIGKILL would leave it.
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/gcs/actor_manager.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/gcs/job_manager.h"
#include "src/gcs/node_manager.h"
#include "src/gcs/placement_group_manager.h"
#include "src/gcs/publisher.h"
#include "src/rpc/fake_peer_clients.h"

namespace troupe {
namespace {

using GroupState = rpc::PlacementGroupInfo::State;

// One GCS incarnation's managers, wired as GcsServer wires them.
struct Gcs {
  Gcs(StoreClient* store, FakeClock* clock, const ClusterId& cluster)
      : publisher(clock, 10000, absl::Seconds(60), Publisher::SeqBaseFromClock(*clock)),
        nodes(cluster, store, &publisher, clock),
        jobs(store, &publisher, clock),
        actors({store, &publisher, &nodes, clock, &lease, &push}),
        groups({store, &publisher, &nodes, clock, &lease,
                [this](const std::string& group) { actors.KillActorsInPlacementGroup(group); }}) {
    actors.set_bundle_locator(
        [this](const std::string& group_id,
               int index) -> absl::StatusOr<std::pair<std::string, int>> {
          rpc::GetPlacementGroupRequest request;
          request.set_placement_group_id(group_id);
          auto group = groups.Get(request);
          if (!group.ok()) return group.status();
          if (group->state() != rpc::PlacementGroupInfo::CREATED) {
            return absl::UnavailableError("waiting for its placement group");
          }
          return std::make_pair(group->bundles(index).raylet_address(), index);
        });
    nodes.AddNodeRemovedListener([this](const rpc::NodeInfo& node) {
      groups.OnNodeDead(node);
      actors.OnNodeDead(node);
    });
  }
  // GcsServer::Start's order.
  void Initialize() {
    ASSERT_TRUE(nodes.Initialize().ok());
    ASSERT_TRUE(jobs.Initialize().ok());
    ASSERT_TRUE(groups.Initialize().ok());
    ASSERT_TRUE(actors.Initialize().ok());
  }

  FakeLeaseClient lease;
  FakeTaskPushClient push;
  Publisher publisher;
  NodeManager nodes;
  JobManager jobs;
  ActorManager actors;
  PlacementGroupManager groups;
};

struct TestNode {
  NodeId id;
  std::string address;
  int port;
};

class GcsRestartTest : public ::testing::Test {
 protected:
  // Kills the running incarnation (nothing of it runs again) and starts the next on the store.
  void Restart() {
    clock_.Advance(absl::Seconds(2));
    dead_.push_back(std::move(gcs_));
    gcs_ = std::make_unique<Gcs>(&store_, &clock_, cluster_);
    gcs_->Initialize();
  }

  rpc::RegisterNodeRequest NodeRequest(const TestNode& node) {
    rpc::RegisterNodeRequest request;
    request.mutable_node()->set_node_id(node.id.Binary());
    request.mutable_node()->set_node_ip("10.0.0.1");
    request.mutable_node()->set_raylet_port(node.port);
    (*request.mutable_node()->mutable_resources_total())["CPU"] = 4;
    request.set_expected_cluster_id(cluster_.Binary());
    return request;
  }
  TestNode AddNode(int port) {
    TestNode node{NodeId::FromRandom(), absl::StrCat("10.0.0.1:", port), port};
    EXPECT_TRUE(gcs_->nodes.RegisterNode(NodeRequest(node)).ok());
    EXPECT_TRUE(Report(node).ok());
    return node;
  }
  absl::Status Report(const TestNode& node) {
    rpc::ResourceUsage usage;
    usage.set_node_id(node.id.Binary());
    usage.set_report_seq(++report_seq_);
    (*usage.mutable_total())["CPU"] = 4;
    (*usage.mutable_available())["CPU"] = 4;
    return gcs_->nodes.ReportResourceUsage(usage);
  }

  rpc::RegisterActorRequest ActorRequest(const std::string& name, int64_t max_restarts) {
    rpc::RegisterActorRequest request;
    rpc::ActorInfo* actor = request.mutable_actor();
    actor->set_actor_id(ActorId::FromRandom().Binary());
    actor->set_job_id(JobId::FromInt(1).Binary());
    actor->set_name(name);
    actor->set_class_name("Counter");
    actor->set_max_restarts(max_restarts);
    (*actor->mutable_required_resources())["CPU"] = 1;
    rpc::TaskSpec* task = request.mutable_creation_task();
    task->set_task_id(TaskId::FromRandom().Binary());
    task->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
    task->set_job_id(actor->job_id());
    task->set_function_name("Counter::Create");
    (*task->mutable_required_resources())["CPU"] = 1;
    return request;
  }
  rpc::ActorInfo Actor(const std::string& id) {
    rpc::GetActorInfoRequest request;
    request.set_actor_id(id);
    auto info = gcs_->actors.GetActor(request);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : rpc::ActorInfo();
  }
  // Grants lease request `index` of the running incarnation with a fresh worker.
  std::string GrantLease(size_t index, const TestNode& node, int pid) {
    rpc::RequestWorkerLeaseReply reply;
    const std::string worker_id = WorkerId::FromRandom().Binary();
    reply.set_worker_id(worker_id);
    reply.set_worker_address(absl::StrCat("10.0.0.1:", 20000 + pid));
    reply.set_lease_id(absl::StrCat("lease-", pid));
    reply.set_node_id(node.id.Binary());
    reply.set_worker_pid(pid);
    gcs_->lease.ReplyLease(index, reply);
    return worker_id;
  }

  rpc::PlacementGroupInfo GroupRequest(int bundles) {
    rpc::PlacementGroupInfo group;
    group.set_placement_group_id(PlacementGroupId::FromRandom().Binary());
    group.set_strategy(rpc::PlacementGroupInfo::SPREAD);
    for (int i = 0; i < bundles; ++i) (*group.add_bundles()->mutable_resources())["CPU"] = 1;
    return group;
  }
  rpc::PlacementGroupInfo Group(const std::string& id) {
    rpc::GetPlacementGroupRequest request;
    request.set_placement_group_id(id);
    auto group = gcs_->groups.Get(request);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *group : rpc::PlacementGroupInfo();
  }
  // Answers reserve request `index` as a raylet does: granted under the ID the GCS chose.
  void GrantReserve(size_t index) {
    gcs_->lease.ReplyReserve(index, gcs_->lease.reserve_request(index).reservation_id);
  }

  FakeClock clock_;
  InMemoryStoreClient store_;
  const ClusterId cluster_ = ClusterId::FromRandom();
  int64_t report_seq_ = 0;
  std::unique_ptr<Gcs> gcs_ = std::make_unique<Gcs>(&store_, &clock_, cluster_);
  std::vector<std::unique_ptr<Gcs>> dead_;
};

TEST_F(GcsRestartTest, NodesAreTheSameNodesAfterARestart) {
  TestNode a = AddNode(7001);
  TestNode b = AddNode(7002);
  gcs_->nodes.MarkNodeDead(b.id, "health check failed");
  Restart();
  // a reports to the new GCS as before: accepted (no NotFound, so no re-registration needed).
  EXPECT_TRUE(Report(a).ok());
  EXPECT_EQ(gcs_->nodes.GetAllResourceUsage().size(), 1u);
  // Re-registering with the same node ID is the same node, not a new one.
  EXPECT_TRUE(gcs_->nodes.RegisterNode(NodeRequest(a)).ok());
  auto nodes = gcs_->nodes.GetAllNodes();
  ASSERT_EQ(nodes.size(), 2u);
  for (const auto& node : nodes) {
    EXPECT_EQ(node.state(), node.node_id() == a.id.Binary() ? rpc::NodeInfo::ALIVE
                                                             : rpc::NodeInfo::DEAD);
  }
  // The dead node stays dead.
  EXPECT_EQ(gcs_->nodes.RegisterNode(NodeRequest(b)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Report(b).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(GcsRestartTest, JobIdsContinueAndRunningJobsKeepRunning) {
  auto first = gcs_->jobs.AddJob(rpc::JobInfo());
  auto second = gcs_->jobs.AddJob(rpc::JobInfo());
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(gcs_->jobs.MarkJobFinished(first->Binary()).ok());
  Restart();
  auto jobs = gcs_->jobs.GetAllJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].state(), rpc::JobInfo::FINISHED);
  EXPECT_EQ(jobs[1].state(), rpc::JobInfo::RUNNING);
  auto third = gcs_->jobs.AddJob(rpc::JobInfo());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->ToInt(), 3u);  // never a reused number
}

TEST_F(GcsRestartTest, ActorsKeepTheirWorkersOrArePlacedAgain) {
  TestNode node = AddNode(7001);
  // alive: ALIVE with a restart left. pending: lease asked, not answered. creating: lease granted,
  // constructor running when the GCS died. gone: killed.
  auto alive_request = ActorRequest("alive", /*max_restarts=*/1);
  ASSERT_TRUE(gcs_->actors.RegisterActor(alive_request).ok());
  GrantLease(0, node, 42);
  gcs_->push.Reply(0, rpc::PushTaskReply());
  const std::string alive = alive_request.actor().actor_id();
  const rpc::ActorInfo before = Actor(alive);
  ASSERT_EQ(before.state(), rpc::ActorInfo::ALIVE);
  auto pending_request = ActorRequest("", 0);
  ASSERT_TRUE(gcs_->actors.RegisterActor(pending_request).ok());
  auto creating_request = ActorRequest("", 0);
  ASSERT_TRUE(gcs_->actors.RegisterActor(creating_request).ok());
  GrantLease(2, node, 43);
  auto gone_request = ActorRequest("gone", 0);
  ASSERT_TRUE(gcs_->actors.RegisterActor(gone_request).ok());
  const std::string gone_worker = GrantLease(3, node, 44);
  gcs_->push.Reply(2, rpc::PushTaskReply());
  ASSERT_TRUE(gcs_->actors.KillActor(gone_request.actor().actor_id(), /*no_restart=*/true).ok());

  Restart();
  // ALIVE: same worker, same address, found by name; nothing leased or pushed for it.
  rpc::ActorInfo after = Actor(alive);
  EXPECT_EQ(after.state(), rpc::ActorInfo::ALIVE);
  EXPECT_EQ(after.worker_address(), before.worker_address());
  EXPECT_EQ(after.worker_id(), before.worker_id());
  EXPECT_EQ(after.pid(), 42);
  rpc::GetActorInfoRequest by_name;
  by_name.set_name("alive");
  ASSERT_TRUE(gcs_->actors.GetActor(by_name).ok());
  EXPECT_EQ(gcs_->actors.GetActor(by_name)->actor_id(), alive);
  // A driver retrying its registration: OK, nothing changes.
  EXPECT_TRUE(gcs_->actors.RegisterActor(alive_request).ok());
  EXPECT_EQ(Actor(alive).state(), rpc::ActorInfo::ALIVE);
  auto impostor = ActorRequest("other", 0);
  impostor.mutable_actor()->set_actor_id(alive);
  EXPECT_EQ(gcs_->actors.RegisterActor(impostor).code(), absl::StatusCode::kAlreadyExists);
  // The worker the dead GCS leased for `creating` is stopped; the killed actor stays dead.
  const auto returned = gcs_->lease.returned_workers();
  ASSERT_EQ(returned.size(), 1u);
  EXPECT_EQ(returned[0].lease_id, "lease-43");
  EXPECT_TRUE(returned[0].disconnect);
  // Its kill was sent by the dead GCS; the worker's exit report reaches the new one.
  gcs_->actors.OnWorkerExit(gone_worker, "was killed by signal 9");
  EXPECT_EQ(Actor(gone_request.actor().actor_id()).state(), rpc::ActorInfo::DEAD);

  // Pending actors are placed again, with their saved creation task, once the node reports.
  EXPECT_EQ(gcs_->lease.num_lease_requests(), 0u);
  ASSERT_TRUE(Report(node).ok());
  gcs_->actors.Tick();
  ASSERT_EQ(gcs_->lease.num_lease_requests(), 2u);
  GrantLease(0, node, 50);
  GrantLease(1, node, 51);
  ASSERT_EQ(gcs_->push.num_pushes(), 2u);
  EXPECT_EQ(gcs_->push.push(0).request.task().function_name(), "Counter::Create");
  gcs_->push.Reply(0, rpc::PushTaskReply());
  gcs_->push.Reply(1, rpc::PushTaskReply());
  EXPECT_EQ(Actor(pending_request.actor().actor_id()).state(), rpc::ActorInfo::ALIVE);
  EXPECT_EQ(Actor(creating_request.actor().actor_id()).state(), rpc::ActorInfo::ALIVE);

  // The restart policy goes on: one restart left for `alive`, then dead.
  gcs_->actors.OnWorkerExit(after.worker_id(), "was killed by signal 9");
  EXPECT_EQ(Actor(alive).state(), rpc::ActorInfo::RESTARTING);
  EXPECT_EQ(Actor(alive).num_restarts(), 1);
  ASSERT_EQ(gcs_->lease.num_lease_requests(), 3u);
  const std::string restarted = GrantLease(2, node, 60);
  gcs_->push.Reply(2, rpc::PushTaskReply());
  ASSERT_EQ(Actor(alive).state(), rpc::ActorInfo::ALIVE);
  Restart();
  EXPECT_EQ(Actor(alive).num_restarts(), 1);
  gcs_->actors.OnWorkerExit(restarted, "was killed by signal 9");
  EXPECT_EQ(Actor(alive).state(), rpc::ActorInfo::DEAD);
  // A dead actor's name is free again.
  EXPECT_TRUE(gcs_->actors.RegisterActor(ActorRequest("alive", 0)).ok());
}

TEST_F(GcsRestartTest, AKillTheDeadGcsSentIsFinishedByTheNewOne) {
  TestNode node = AddNode(7001);
  auto request = ActorRequest("victim", /*max_restarts=*/5);
  ASSERT_TRUE(gcs_->actors.RegisterActor(request).ok());
  const std::string worker = GrantLease(0, node, 42);
  gcs_->push.Reply(0, rpc::PushTaskReply());
  ASSERT_TRUE(gcs_->actors.KillActor(request.actor().actor_id(), /*no_restart=*/true).ok());
  Restart();
  // The worker's exit report reaches the new GCS: the actor dies, it does not restart.
  gcs_->actors.OnWorkerExit(worker, "was killed by signal 9");
  rpc::ActorInfo info = Actor(request.actor().actor_id());
  EXPECT_EQ(info.state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(info.death_cause(), "killed by troupe::Kill");
}

TEST_F(GcsRestartTest, ActorsOnANodeThatDiedWhileTheGcsWasDownFailOver) {
  TestNode a = AddNode(7001);
  TestNode b = AddNode(7002);
  auto request = ActorRequest("", /*max_restarts=*/1);
  (*request.mutable_creation_task()->mutable_strategy()).set_kind(
      rpc::SchedulingStrategy::NODE_AFFINITY);
  request.mutable_creation_task()->mutable_strategy()->set_node_id(b.id.Binary());
  request.mutable_creation_task()->mutable_strategy()->set_soft(true);
  ASSERT_TRUE(gcs_->actors.RegisterActor(request).ok());
  GrantLease(0, b, 42);
  gcs_->push.Reply(0, rpc::PushTaskReply());
  // Meanwhile b is recorded dead by another writer of the node table (as if found dead while no
  // actor manager was listening).
  {
    Publisher publisher(&clock_);
    NodeManager other(cluster_, &store_, &publisher, &clock_);
    ASSERT_TRUE(other.Initialize().ok());
    other.MarkNodeDead(b.id, "health check failed");
  }
  Restart();
  rpc::ActorInfo info = Actor(request.actor().actor_id());
  EXPECT_EQ(info.state(), rpc::ActorInfo::RESTARTING);
  EXPECT_TRUE(absl::StrContains(info.death_cause(), "died")) << info.death_cause();
  EXPECT_EQ(info.num_restarts(), 1);
  ASSERT_TRUE(Report(a).ok());  // placed once a node reports to the new GCS
  clock_.Advance(absl::Seconds(1));
  gcs_->actors.Tick();
  ASSERT_EQ(gcs_->lease.num_lease_requests(), 1u);
  EXPECT_EQ(gcs_->lease.lease_request(0).raylet_address, a.address);
}

TEST_F(GcsRestartTest, PlacementGroupsKeepTheirReservationsOrReturnUncertainOnes) {
  TestNode a = AddNode(7001);
  TestNode b = AddNode(7002);
  // created: both bundles reserved. torn: one of two reservations answered when the GCS died.
  // removed: removed.
  rpc::PlacementGroupInfo created_request = GroupRequest(2);
  ASSERT_TRUE(gcs_->groups.Create(created_request).ok());
  GrantReserve(0);
  GrantReserve(1);
  const std::string created = created_request.placement_group_id();
  const rpc::PlacementGroupInfo before = Group(created);
  ASSERT_EQ(before.state(), rpc::PlacementGroupInfo::CREATED);
  rpc::PlacementGroupInfo torn_request = GroupRequest(2);
  ASSERT_TRUE(gcs_->groups.Create(torn_request).ok());
  ASSERT_EQ(gcs_->lease.num_reserve_requests(), 4u);
  GrantReserve(2);
  const std::string torn_ids[] = {gcs_->lease.reserve_request(2).reservation_id,
                                  gcs_->lease.reserve_request(3).reservation_id};
  rpc::PlacementGroupInfo removed_request = GroupRequest(1);
  ASSERT_TRUE(gcs_->groups.Create(removed_request).ok());
  GrantReserve(4);
  const std::string removed_id = gcs_->lease.reserve_request(4).reservation_id;
  // Removed, and the GCS stops before its next tick would have returned the reservation.
  ASSERT_TRUE(gcs_->groups.Remove(removed_request.placement_group_id()).ok());

  Restart();
  // CREATED: where it was, with the raylets' reservations, and nothing reserved again.
  rpc::PlacementGroupInfo after = Group(created);
  EXPECT_EQ(after.state(), rpc::PlacementGroupInfo::CREATED);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(after.bundles(i).reservation_id(), before.bundles(i).reservation_id());
    EXPECT_EQ(after.bundles(i).node_id(), before.bundles(i).node_id());
  }
  EXPECT_TRUE(gcs_->groups.Create(created_request).ok());  // a retried creation
  EXPECT_EQ(Group(created).state(), rpc::PlacementGroupInfo::CREATED);
  // Torn: both reservations the dead GCS asked for are returned (granted or not: raylets refuse
  // the unanswered one if it arrives later), then the group is placed anew. Removed: the
  // reservation its record still held (never confirmed returned) goes back too.
  auto returned = gcs_->lease.returned_bundles();
  ASSERT_EQ(returned.size(), 3u);
  std::set<std::string> returned_ids;
  for (const auto& [raylet, id] : returned) returned_ids.insert(id);
  EXPECT_EQ(returned_ids, (std::set<std::string>{torn_ids[0], torn_ids[1], removed_id}));
  EXPECT_EQ(Group(torn_request.placement_group_id()).state(), rpc::PlacementGroupInfo::PENDING);
  ASSERT_TRUE(Report(a).ok());
  ASSERT_TRUE(Report(b).ok());
  gcs_->groups.Tick();
  ASSERT_EQ(gcs_->lease.num_reserve_requests(), 2u);  // only the torn group's bundles
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(gcs_->lease.reserve_request(i).placement_group_id.Binary(),
              torn_request.placement_group_id());
    EXPECT_NE(gcs_->lease.reserve_request(i).reservation_id, torn_ids[0]);
    EXPECT_NE(gcs_->lease.reserve_request(i).reservation_id, torn_ids[1]);
    GrantReserve(i);
  }
  EXPECT_EQ(Group(torn_request.placement_group_id()).state(), rpc::PlacementGroupInfo::CREATED);
  // Removed stays removed; its name would be free.
  EXPECT_EQ(Group(removed_request.placement_group_id()).state(),
            rpc::PlacementGroupInfo::REMOVED);
}

// A reloaded alive node is scheduled on what it registered with until its raylet reports (an
// empty view would make every actor and group wait out a retry delay after a restart); the
// raylet's next report replaces that guess.
TEST_F(GcsRestartTest, ReloadedNodesScheduleOnRegisteredResourcesUntilTheirNextReport) {
  TestNode a = AddNode(7001);
  Restart();
  std::vector<rpc::ResourceUsage> view = gcs_->nodes.GetAllResourceUsage();
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0].node_id(), a.id.Binary());
  EXPECT_EQ(view[0].raylet_address(), a.address);
  EXPECT_EQ(view[0].total().at("CPU"), 4);
  EXPECT_EQ(view[0].available().at("CPU"), 4);
  rpc::ResourceUsage busy;
  busy.set_node_id(a.id.Binary());
  busy.set_report_seq(++report_seq_);
  (*busy.mutable_total())["CPU"] = 4;
  (*busy.mutable_available())["CPU"] = 1;
  ASSERT_TRUE(gcs_->nodes.ReportResourceUsage(busy).ok());
  view = gcs_->nodes.GetAllResourceUsage();
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0].available().at("CPU"), 1);
}

TEST_F(GcsRestartTest, GroupBundlesOnANodeThatDiedWhileTheGcsWasDownArePlacedAgain) {
  TestNode a = AddNode(7001);
  TestNode b = AddNode(7002);
  rpc::PlacementGroupInfo request = GroupRequest(2);
  ASSERT_TRUE(gcs_->groups.Create(request).ok());
  GrantReserve(0);
  GrantReserve(1);
  {
    Publisher publisher(&clock_);
    NodeManager other(cluster_, &store_, &publisher, &clock_);
    ASSERT_TRUE(other.Initialize().ok());
    other.MarkNodeDead(b.id, "health check failed");
  }
  Restart();
  rpc::PlacementGroupInfo group = Group(request.placement_group_id());
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::RESCHEDULING);
  int on_a = 0;
  for (const auto& bundle : group.bundles()) {
    EXPECT_NE(bundle.node_id(), b.id.Binary());
    if (bundle.node_id() == a.id.Binary()) ++on_a;
  }
  // The kept bundle is on a; the lost one may already be proposed there too (a reloaded alive
  // node is scheduled on its registered resources until its raylet reports).
  EXPECT_GE(on_a, 1);
  ASSERT_TRUE(Report(a).ok());
  clock_.Advance(absl::Seconds(1));
  gcs_->groups.Tick();
  ASSERT_EQ(gcs_->lease.num_reserve_requests(), 1u);
  EXPECT_EQ(gcs_->lease.reserve_request(0).raylet_address, a.address);
  GrantReserve(0);
  EXPECT_EQ(Group(request.placement_group_id()).state(), rpc::PlacementGroupInfo::CREATED);
}

}  // namespace
}  // namespace troupe
