// PlacementGroupManager on fakes: bundle reservations are answered by the test (FakeLeaseClient
// as the BundleClient), time is a FakeClock, the store and node table are the real in-memory
// ones. Every test runs in milliseconds.
#include "src/gcs/placement_group_manager.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/rpc/fake_peer_clients.h"

namespace troupe {
namespace {

using State = rpc::PlacementGroupInfo::State;

class PlacementGroupManagerTest : public ::testing::Test {
 protected:
  PlacementGroupManagerTest() {
    nodes_.AddNodeRemovedListener([this](const rpc::NodeInfo& node) { groups_.OnNodeDead(node); });
  }

  // Registers a node with `cpus` CPUs and reports its usage; returns its raylet address.
  std::string AddNode(int port, double cpus) {
    const NodeId id = NodeId::FromRandom();
    rpc::RegisterNodeRequest request;
    request.mutable_node()->set_node_id(id.Binary());
    request.mutable_node()->set_node_ip("10.0.0.1");
    request.mutable_node()->set_raylet_port(port);
    (*request.mutable_node()->mutable_resources_total())["CPU"] = cpus;
    EXPECT_TRUE(nodes_.RegisterNode(request).ok());
    rpc::ResourceUsage usage;
    usage.set_node_id(id.Binary());
    usage.set_report_seq(1);
    (*usage.mutable_total())["CPU"] = cpus;
    (*usage.mutable_available())["CPU"] = cpus;
    EXPECT_TRUE(nodes_.ReportResourceUsage(usage).ok());
    const std::string address = absl::StrCat("10.0.0.1:", port);
    node_ids_[address] = id;
    return address;
  }

  // Reports what the raylet at `address` has available, as its resource report would.
  void ReportAvailable(const std::string& address, double cpus, int64_t seq) {
    rpc::ResourceUsage usage;
    usage.set_node_id(node_ids_[address].Binary());
    usage.set_report_seq(seq);
    for (const auto& node : nodes_.GetAllNodes()) {
      if (node.node_id() == usage.node_id()) *usage.mutable_total() = node.resources_total();
    }
    (*usage.mutable_available())["CPU"] = cpus;
    EXPECT_TRUE(nodes_.ReportResourceUsage(usage).ok());
  }

  PlacementGroupId Create(int bundles, rpc::PlacementGroupInfo::Strategy strategy) {
    rpc::PlacementGroupInfo group;
    const PlacementGroupId id = PlacementGroupId::FromRandom();
    group.set_placement_group_id(id.Binary());
    group.set_strategy(strategy);
    for (int i = 0; i < bundles; ++i) (*group.add_bundles()->mutable_resources())["CPU"] = 1;
    EXPECT_TRUE(groups_.Create(group).ok());
    return id;
  }

  // A one-bundle group (1 CPU) created by `job`; `detached` outlives it.
  PlacementGroupId CreateForJob(const JobId& job, bool detached) {
    rpc::PlacementGroupInfo group;
    const PlacementGroupId id = PlacementGroupId::FromRandom();
    group.set_placement_group_id(id.Binary());
    group.set_creator_job_id(job.Binary());
    group.set_detached(detached);
    (*group.add_bundles()->mutable_resources())["CPU"] = 1;
    EXPECT_TRUE(groups_.Create(group).ok());
    return id;
  }

  rpc::PlacementGroupInfo Get(const PlacementGroupId& id) {
    rpc::GetPlacementGroupRequest request;
    request.set_placement_group_id(id.Binary());
    auto group = groups_.Get(request);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *group : rpc::PlacementGroupInfo();
  }

  // Grants every reservation request from `first` on; reservation IDs are "r<index>".
  void GrantAllFrom(size_t first) {
    for (size_t i = first; i < lease_.num_reserve_requests(); ++i) {
      lease_.ReplyReserve(i, absl::StrCat("r", i));
    }
  }

  FakeClock clock_;
  InMemoryStoreClient store_;
  Publisher publisher_{&clock_};
  NodeManager nodes_{ClusterId::FromRandom(), &store_, &publisher_, &clock_};
  FakeLeaseClient lease_;
  std::vector<std::string> killed_groups_;
  PlacementGroupManager groups_{
      {&store_, &publisher_, &nodes_, &clock_, &lease_,
       [this](const std::string& group) { killed_groups_.push_back(group); }}};
  std::map<std::string, NodeId> node_ids_;
};

TEST_F(PlacementGroupManagerTest, AllBundlesGrantedCommitsTheGroup) {
  const std::string a = AddNode(7001, 4), b = AddNode(7002, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::STRICT_SPREAD);
  ASSERT_EQ(lease_.num_reserve_requests(), 2u);
  std::set<std::string> raylets;
  for (size_t i = 0; i < 2; ++i) {
    auto call = lease_.reserve_request(i);
    EXPECT_EQ(call.placement_group_id, id);
    EXPECT_EQ(call.bundle_index, static_cast<int>(i));
    EXPECT_EQ(call.resources, (std::map<std::string, double>{{"CPU", 1}}));
    raylets.insert(call.raylet_address);
  }
  EXPECT_EQ(raylets, (std::set<std::string>{a, b}));  // strictly spread

  lease_.ReplyReserve(0, std::string("r0"));
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::PENDING);  // not until every bundle is in
  lease_.ReplyReserve(1, std::string("r1"));
  rpc::PlacementGroupInfo group = Get(id);
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_EQ(group.bundles(0).reservation_id(), "r0");
  EXPECT_EQ(group.bundles(1).reservation_id(), "r1");
  EXPECT_TRUE(lease_.returned_bundles().empty());
}

TEST_F(PlacementGroupManagerTest, RefusedBundleRollsBackAndRetriesAfterTheDelay) {
  AddNode(7001, 4);
  AddNode(7002, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::STRICT_SPREAD);
  ASSERT_EQ(lease_.num_reserve_requests(), 2u);
  const std::string granted_at = lease_.reserve_request(0).raylet_address;
  lease_.ReplyReserve(0, std::string("r0"));
  lease_.ReplyReserve(1, absl::FailedPreconditionError("the raylet refused the reservation"));

  // Rollback: the granted one goes back; the group waits with a reason.
  ASSERT_EQ(lease_.returned_bundles().size(), 1u);
  EXPECT_EQ(lease_.returned_bundles()[0], std::make_pair(granted_at, std::string("r0")));
  rpc::PlacementGroupInfo group = Get(id);
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::PENDING);
  EXPECT_EQ(group.pending_reason(), "a node filled up while reserving; retrying");
  EXPECT_TRUE(group.bundles(0).reservation_id().empty());

  groups_.Tick();
  EXPECT_EQ(lease_.num_reserve_requests(), 2u);  // too early
  clock_.Advance(absl::Milliseconds(200));
  groups_.Tick();
  ASSERT_EQ(lease_.num_reserve_requests(), 4u);
  GrantAllFrom(2);
  group = Get(id);
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_TRUE(group.pending_reason().empty());
  EXPECT_EQ(lease_.returned_bundles().size(), 1u);
}

TEST_F(PlacementGroupManagerTest, GroupThatFitsNowhereWaitsAndIsPlacedWhenANodeJoins) {
  AddNode(7001, 1);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::STRICT_SPREAD);
  EXPECT_EQ(lease_.num_reserve_requests(), 0u);
  EXPECT_TRUE(absl::StrContains(Get(id).pending_reason(), "STRICT_SPREAD needs 2"))
      << Get(id).pending_reason();
  AddNode(7002, 1);
  groups_.Tick();
  EXPECT_EQ(lease_.num_reserve_requests(), 0u);
  clock_.Advance(absl::Seconds(1));
  groups_.Tick();
  EXPECT_EQ(lease_.num_reserve_requests(), 2u);
}

TEST_F(PlacementGroupManagerTest, RemoveReturnsEveryReservationAndKillsTheActors) {
  AddNode(7001, 4);
  AddNode(7002, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::SPREAD);
  GrantAllFrom(0);
  ASSERT_EQ(Get(id).state(), rpc::PlacementGroupInfo::CREATED);
  ASSERT_TRUE(groups_.Remove(id.Binary()).ok());
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::REMOVED);
  EXPECT_EQ(killed_groups_, std::vector<std::string>{id.Binary()});
  // The removal itself calls no raylet; the record keeps the IDs until the raylets confirm.
  EXPECT_EQ(lease_.num_return_calls(), 0);
  EXPECT_EQ(Get(id).bundles(0).reservation_id(), "r0");
  groups_.Tick();
  std::set<std::string> returned;
  for (const auto& [raylet, reservation] : lease_.returned_bundles()) returned.insert(reservation);
  EXPECT_EQ(returned, (std::set<std::string>{"r0", "r1"}));
  EXPECT_EQ(lease_.num_return_calls(), 2);  // one per raylet
  const rpc::PlacementGroupInfo removed = Get(id);
  for (const auto& bundle : removed.bundles()) EXPECT_TRUE(bundle.reservation_id().empty());
  groups_.Tick();
  EXPECT_EQ(lease_.num_return_calls(), 2);  // nothing left to return
}

TEST_F(PlacementGroupManagerTest, RemovalsGoBackInOneBatchPerRaylet) {
  const std::string a = AddNode(7001, 8);
  std::vector<PlacementGroupId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Create(1, rpc::PlacementGroupInfo::PACK));
  GrantAllFrom(0);
  for (const auto& id : ids) ASSERT_TRUE(groups_.Remove(id.Binary()).ok());
  groups_.Tick();
  EXPECT_EQ(lease_.num_return_calls(), 1);
  EXPECT_EQ(lease_.returned_bundles().size(), 5u);
  for (const auto& [raylet, reservation] : lease_.returned_bundles()) EXPECT_EQ(raylet, a);
}

TEST_F(PlacementGroupManagerTest, FailedReturnIsSentAgainOnTheNextTick) {
  AddNode(7001, 4);
  PlacementGroupId id = Create(1, rpc::PlacementGroupInfo::PACK);
  GrantAllFrom(0);
  lease_.set_return_status(absl::UnavailableError("raylet unreachable"));
  ASSERT_TRUE(groups_.Remove(id.Binary()).ok());
  groups_.Tick();
  EXPECT_EQ(lease_.num_return_calls(), 1);
  EXPECT_TRUE(lease_.returned_bundles().empty());
  EXPECT_EQ(Get(id).bundles(0).reservation_id(), "r0");  // still owed
  lease_.set_return_status(absl::OkStatus());
  groups_.Tick();
  EXPECT_EQ(lease_.num_return_calls(), 2);
  ASSERT_EQ(lease_.returned_bundles().size(), 1u);
  EXPECT_EQ(lease_.returned_bundles()[0].second, "r0");
  EXPECT_TRUE(Get(id).bundles(0).reservation_id().empty());
}

TEST_F(PlacementGroupManagerTest, ReturnToARayletThatDiedIsDropped) {
  const std::string a = AddNode(7001, 4);
  PlacementGroupId id = Create(1, rpc::PlacementGroupInfo::PACK);
  GrantAllFrom(0);
  lease_.set_return_status(absl::UnavailableError("raylet unreachable"));
  ASSERT_TRUE(groups_.Remove(id.Binary()).ok());
  groups_.Tick();  // fails: the raylet is dying
  nodes_.MarkNodeDead(node_ids_[a], "health check failed");
  EXPECT_TRUE(Get(id).bundles(0).reservation_id().empty());  // died with the node
  lease_.set_return_status(absl::OkStatus());
  groups_.Tick();
  EXPECT_EQ(lease_.num_return_calls(), 1);  // not sent again
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::REMOVED);
}

TEST_F(PlacementGroupManagerTest, GroupCreatedRightAfterARemovalWaitsForTheRayletToFreeIt) {
  const std::string a = AddNode(7001, 1);
  PlacementGroupId first = Create(1, rpc::PlacementGroupInfo::PACK);
  GrantAllFrom(0);
  ReportAvailable(a, 0, /*seq=*/2);  // the raylet holds the reservation
  ASSERT_TRUE(groups_.Remove(first.Binary()).ok());
  PlacementGroupId second = Create(1, rpc::PlacementGroupInfo::PACK);
  // Not counted free until the raylet says so: no reservation is asked for yet.
  EXPECT_EQ(lease_.num_reserve_requests(), 1u);
  EXPECT_EQ(Get(second).state(), rpc::PlacementGroupInfo::PENDING);
  groups_.Tick();  // the return goes out
  ASSERT_EQ(lease_.returned_bundles().size(), 1u);
  ReportAvailable(a, 1, /*seq=*/3);  // freed and reported
  clock_.Advance(absl::Seconds(1));
  groups_.Tick();
  ASSERT_EQ(lease_.num_reserve_requests(), 2u);
  EXPECT_EQ(lease_.reserve_request(1).raylet_address, a);
  GrantAllFrom(1);
  EXPECT_EQ(Get(second).state(), rpc::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupManagerTest, RestartedGcsReturnsWhatWasNotConfirmed) {
  const std::string a = AddNode(7001, 4);
  PlacementGroupId id = Create(1, rpc::PlacementGroupInfo::PACK);
  GrantAllFrom(0);
  ASSERT_TRUE(groups_.Remove(id.Binary()).ok());  // the GCS stops before the next Tick
  FakeLeaseClient lease;
  PlacementGroupManager restarted({&store_, &publisher_, &nodes_, &clock_, &lease,
                                   [](const std::string&) {}});
  ASSERT_TRUE(restarted.Initialize().ok());
  restarted.Tick();
  ASSERT_EQ(lease.returned_bundles().size(), 1u);
  EXPECT_EQ(lease.returned_bundles()[0], std::make_pair(a, std::string("r0")));
}

// Regression (issue 30 item 7): a finished job's group kept its reservation for good, and the
// next job could not be placed.
TEST_F(PlacementGroupManagerTest, AFinishedJobsGroupsAreRemovedButNotDetachedOnes) {
  const std::string a = AddNode(7001, 4);
  const JobId job = JobId::FromInt(1), other = JobId::FromInt(2);
  PlacementGroupId scoped = CreateForJob(job, /*detached=*/false);
  PlacementGroupId detached = CreateForJob(job, /*detached=*/true);
  PlacementGroupId others = CreateForJob(other, /*detached=*/false);
  GrantAllFrom(0);
  for (const auto& id : {scoped, detached, others}) {
    ASSERT_EQ(Get(id).state(), rpc::PlacementGroupInfo::CREATED);
  }
  const std::string scoped_reservation = Get(scoped).bundles(0).reservation_id();

  EXPECT_EQ(groups_.OnJobFinished(job.Binary()), 1);
  EXPECT_EQ(Get(scoped).state(), rpc::PlacementGroupInfo::REMOVED);
  EXPECT_EQ(Get(detached).state(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_TRUE(Get(detached).detached());
  EXPECT_EQ(Get(others).state(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_EQ(killed_groups_, std::vector<std::string>{scoped.Binary()});  // its actors too
  groups_.Tick();
  ASSERT_EQ(lease_.returned_bundles().size(), 1u);
  EXPECT_EQ(lease_.returned_bundles()[0], std::make_pair(a, scoped_reservation));
  EXPECT_EQ(groups_.OnJobFinished(job.Binary()), 0);  // twice changes nothing
}

// A GCS restarted on the same store still knows which groups are detached, and removes the
// groups of jobs that finished before it could.
TEST_F(PlacementGroupManagerTest, ARestartedGcsRemovesTheGroupsOfFinishedJobs) {
  const std::string a = AddNode(7001, 4);
  const JobId job = JobId::FromInt(1);
  PlacementGroupId scoped = CreateForJob(job, /*detached=*/false);
  PlacementGroupId detached = CreateForJob(job, /*detached=*/true);
  GrantAllFrom(0);
  const std::string scoped_reservation = Get(scoped).bundles(0).reservation_id();
  // The job finishes; this GCS dies before it removes the job's groups.
  FakeLeaseClient lease;
  std::vector<std::string> killed;
  PlacementGroupManager restarted({&store_, &publisher_, &nodes_, &clock_, &lease,
                                   [&killed](const std::string& group) { killed.push_back(group); },
                                   [&job](const std::string& id) { return id == job.Binary(); }});
  ASSERT_TRUE(restarted.Initialize().ok());
  rpc::GetPlacementGroupRequest request;
  request.set_placement_group_id(scoped.Binary());
  EXPECT_EQ(restarted.Get(request)->state(), rpc::PlacementGroupInfo::REMOVED);
  request.set_placement_group_id(detached.Binary());
  EXPECT_EQ(restarted.Get(request)->state(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_TRUE(restarted.Get(request)->detached());
  EXPECT_EQ(killed, std::vector<std::string>{scoped.Binary()});
  restarted.Tick();
  ASSERT_EQ(lease.returned_bundles().size(), 1u);
  EXPECT_EQ(lease.returned_bundles()[0], std::make_pair(a, scoped_reservation));
}

// Regression (issue 30 item 10): a bundle no node can ever hold stayed PENDING for good.
TEST_F(PlacementGroupManagerTest, ABundleShapeNoNodeCanHoldIsRefused) {
  rpc::PlacementGroupInfo group;
  group.set_placement_group_id(PlacementGroupId::FromRandom().Binary());
  (*group.add_bundles()->mutable_resources())["GPU"] = 1.5;
  absl::Status status = groups_.Create(group);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "bundle 0 resources['GPU'] is 1.5")) << status;
}

TEST_F(PlacementGroupManagerTest, ReservationGrantedAfterRemoveIsReturned) {
  AddNode(7001, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::PACK);
  ASSERT_EQ(lease_.num_reserve_requests(), 2u);
  lease_.ReplyReserve(0, std::string("r0"));
  ASSERT_TRUE(groups_.Remove(id.Binary()).ok());
  groups_.Tick();
  // r0, and bundle 1's reservation by the ID the GCS chose (the raylet refuses it if it comes).
  ASSERT_EQ(lease_.returned_bundles().size(), 2u);
  EXPECT_EQ(lease_.returned_bundles()[0].second, "r0");
  EXPECT_EQ(lease_.returned_bundles()[1].second, lease_.reserve_request(1).reservation_id);
  lease_.ReplyReserve(1, std::string("r1"));  // late grant
  ASSERT_EQ(lease_.returned_bundles().size(), 3u);
  EXPECT_EQ(lease_.returned_bundles()[2].second, "r1");
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::REMOVED);
}

TEST_F(PlacementGroupManagerTest, NodeDeathReplacesTheLostBundles) {
  const std::string a = AddNode(7001, 4);
  const std::string b = AddNode(7002, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::SPREAD);
  GrantAllFrom(0);
  ASSERT_EQ(Get(id).state(), rpc::PlacementGroupInfo::CREATED);
  const std::string c = AddNode(7003, 4);

  nodes_.MarkNodeDead(node_ids_[a], "health check failed");
  rpc::PlacementGroupInfo group = Get(id);
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::RESCHEDULING);
  ASSERT_EQ(lease_.num_reserve_requests(), 3u);  // only the lost bundle
  auto call = lease_.reserve_request(2);
  EXPECT_EQ(group.bundles(call.bundle_index).raylet_address(), call.raylet_address);
  EXPECT_NE(call.raylet_address, a);
  lease_.ReplyReserve(2, std::string("r2"));
  group = Get(id);
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::CREATED);
  for (const auto& bundle : group.bundles()) {
    EXPECT_NE(bundle.raylet_address(), a);
    EXPECT_FALSE(bundle.reservation_id().empty());
  }
  EXPECT_TRUE(lease_.returned_bundles().empty());  // the survivor on b stays
  (void)b;
  (void)c;
}

TEST_F(PlacementGroupManagerTest, StrictPackNodeDeathPlacesAllBundlesTogetherAgain) {
  const std::string a = AddNode(7001, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::STRICT_PACK);
  ASSERT_EQ(lease_.num_reserve_requests(), 2u);
  EXPECT_EQ(lease_.reserve_request(1).raylet_address, a);
  GrantAllFrom(0);
  const std::string b = AddNode(7002, 4);
  nodes_.MarkNodeDead(node_ids_[a], "health check failed");
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::RESCHEDULING);
  ASSERT_EQ(lease_.num_reserve_requests(), 4u);
  EXPECT_EQ(lease_.reserve_request(2).raylet_address, b);
  EXPECT_EQ(lease_.reserve_request(3).raylet_address, b);
  GrantAllFrom(2);
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupManagerTest, RepliesOfAnAbandonedAttemptAreReturned) {
  const std::string a = AddNode(7001, 4);
  const std::string b = AddNode(7002, 4);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::SPREAD);
  ASSERT_EQ(lease_.num_reserve_requests(), 2u);
  // a dies while both reservations are in flight: the attempt is abandoned, both bundles are
  // placed again (on b), and the old attempt's reservation on b is given back at once (by the
  // ID the GCS chose for it: a restart cannot lose it) and again when its late grant arrives.
  nodes_.MarkNodeDead(node_ids_[a], "health check failed");
  ASSERT_EQ(lease_.num_reserve_requests(), 4u);
  EXPECT_EQ(lease_.reserve_request(2).raylet_address, b);
  EXPECT_EQ(lease_.reserve_request(3).raylet_address, b);
  const size_t old_on_b = lease_.reserve_request(0).raylet_address == b ? 0 : 1;
  ASSERT_EQ(lease_.returned_bundles().size(), 1u);
  EXPECT_EQ(lease_.returned_bundles()[0],
            std::make_pair(b, lease_.reserve_request(old_on_b).reservation_id));
  lease_.ReplyReserve(old_on_b, std::string("stale"));
  lease_.ReplyReserve(1 - old_on_b, absl::UnavailableError("node a is gone"));
  ASSERT_EQ(lease_.returned_bundles().size(), 2u);
  EXPECT_EQ(lease_.returned_bundles()[1], std::make_pair(b, std::string("stale")));
  EXPECT_EQ(Get(id).state(), rpc::PlacementGroupInfo::RESCHEDULING);
  GrantAllFrom(2);
  rpc::PlacementGroupInfo group = Get(id);
  EXPECT_EQ(group.state(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_EQ(group.bundles(0).reservation_id(), "r2");
  EXPECT_EQ(group.bundles(1).reservation_id(), "r3");
}

// ---- WaitUntilReady (the long poll behind WaitPlacementGroupUntilReady) ----

class Answer {
 public:
  PlacementGroupManager::ReadyCallback Callback() {
    return [this](absl::StatusOr<State> state) { value_ = std::move(state); };
  }
  bool answered() const { return value_.has_value(); }
  const absl::StatusOr<State>& value() const { return *value_; }

 private:
  std::optional<absl::StatusOr<State>> value_;
};

TEST_F(PlacementGroupManagerTest, WaiterIsAnsweredWhenTheGroupIsCreated) {
  AddNode(7001, 4);
  PlacementGroupId id = Create(1, rpc::PlacementGroupInfo::PACK);
  Answer answer;
  groups_.WaitUntilReady(id.Binary(), clock_.Now() + absl::Seconds(10), answer.Callback());
  EXPECT_FALSE(answer.answered());
  EXPECT_EQ(groups_.num_waiters(), 1u);
  GrantAllFrom(0);
  ASSERT_TRUE(answer.answered());
  EXPECT_EQ(answer.value().value(), rpc::PlacementGroupInfo::CREATED);
  EXPECT_EQ(groups_.num_waiters(), 0u);

  Answer again;  // already created: answered at once
  groups_.WaitUntilReady(id.Binary(), clock_.Now(), again.Callback());
  ASSERT_TRUE(again.answered());
  EXPECT_EQ(again.value().value(), rpc::PlacementGroupInfo::CREATED);
}

TEST_F(PlacementGroupManagerTest, WaiterIsAnsweredAtItsDeadline) {
  AddNode(7001, 1);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::STRICT_SPREAD);  // does not fit
  Answer answer;
  groups_.WaitUntilReady(id.Binary(), clock_.Now() + absl::Milliseconds(500), answer.Callback());
  clock_.Advance(absl::Milliseconds(499));
  groups_.Tick();
  EXPECT_FALSE(answer.answered());
  clock_.Advance(absl::Milliseconds(1));
  groups_.Tick();
  ASSERT_TRUE(answer.answered());
  EXPECT_EQ(answer.value().value(), rpc::PlacementGroupInfo::PENDING);

  Answer capped;  // an endless wait is answered after kMaxWait; the client asks again
  groups_.WaitUntilReady(id.Binary(), absl::InfiniteFuture(), capped.Callback());
  clock_.Advance(PlacementGroupManager::kMaxWait);
  groups_.Tick();
  ASSERT_TRUE(capped.answered());
  EXPECT_EQ(capped.value().value(), rpc::PlacementGroupInfo::PENDING);
}

TEST_F(PlacementGroupManagerTest, WaiterLearnsOfRemovalAndUnknownGroupsAreNotFound) {
  AddNode(7001, 4);
  PlacementGroupId id = Create(1, rpc::PlacementGroupInfo::PACK);
  Answer answer;
  groups_.WaitUntilReady(id.Binary(), absl::InfiniteFuture(), answer.Callback());
  ASSERT_TRUE(groups_.Remove(id.Binary()).ok());
  ASSERT_TRUE(answer.answered());
  EXPECT_EQ(answer.value().value(), rpc::PlacementGroupInfo::REMOVED);

  Answer unknown;
  groups_.WaitUntilReady(PlacementGroupId::FromRandom().Binary(), absl::InfiniteFuture(),
                         unknown.Callback());
  ASSERT_TRUE(unknown.answered());
  EXPECT_EQ(unknown.value().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PlacementGroupManagerTest, ShutdownAnswersWaiters) {
  AddNode(7001, 1);
  PlacementGroupId id = Create(2, rpc::PlacementGroupInfo::STRICT_SPREAD);
  Answer answer;
  groups_.WaitUntilReady(id.Binary(), absl::InfiniteFuture(), answer.Callback());
  groups_.Shutdown();
  ASSERT_TRUE(answer.answered());
  EXPECT_EQ(answer.value().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(PlacementGroupManagerTest, BadBundleResourcesAreRefused) {
  rpc::PlacementGroupInfo group;
  group.set_placement_group_id(PlacementGroupId::FromRandom().Binary());
  (*group.add_bundles()->mutable_resources())["CPU"] = -1;
  absl::Status status = groups_.Create(group);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "bundle 0")) << status;
  EXPECT_EQ(lease_.num_reserve_requests(), 0u);
}

}  // namespace
}  // namespace troupe
