// LeaseManager on a FakeWorkerLauncher and a FakeClock: no processes, no network. The launcher
// is asked for workers from the manager's lookup thread, so tests wait for those requests
// (AwaitPops) and answer them on the test thread.
#include "src/raylet/lease_manager.h"

#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/raylet/fake_worker_launcher.h"

namespace troupe {
namespace {

using Amounts = std::map<std::string, double>;

ResourceSet Resources(const Amounts& amounts) { return *ResourceSet::FromMap(amounts); }

// Where a lease request's reply lands. Replies may come from the manager's lookup thread.
class ReplySlot {
 public:
  LeaseManager::LeaseCallback Callback() {
    return [this](rpc::RequestWorkerLeaseReply reply) {
      absl::MutexLock lock(&mu_);
      ++count_;
      reply_ = std::move(reply);
    };
  }
  bool answered() const {
    absl::MutexLock lock(&mu_);
    return count_ > 0;
  }
  int count() const {
    absl::MutexLock lock(&mu_);
    return count_;
  }
  // The reply, waiting for it if need be (10 s is a safety net against a hung test).
  rpc::RequestWorkerLeaseReply Await() const {
    absl::MutexLock lock(&mu_);
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ > 0; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&answered), absl::Seconds(10))) << "no reply";
    return reply_;
  }

 private:
  mutable absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  rpc::RequestWorkerLeaseReply reply_ ABSL_GUARDED_BY(mu_);
};

class LeaseManagerTest : public ::testing::Test {
 protected:
  const Amounts kTotal = {{"CPU", 4}, {"GPU", 2}};

  LeaseManagerTest()
      : manager_(
            local_, Resources(kTotal), &launcher_,
            [this](const JobId& job_id) -> absl::StatusOr<rpc::JobInfo> {
              if (job_id != job_) return absl::NotFoundError("the GCS does not know job");
              rpc::JobInfo job;
              job.set_job_id(job_id.Binary());
              return job;
            },
            &clock_) {}

  rpc::RequestWorkerLeaseRequest Request(const Amounts& demand) const {
    rpc::RequestWorkerLeaseRequest request;
    rpc::TaskSpec* spec = request.mutable_resource_spec();
    spec->set_job_id(job_.Binary());
    for (const auto& [name, amount] : demand) (*spec->mutable_required_resources())[name] = amount;
    return request;
  }
  rpc::RequestWorkerLeaseRequest BundleRequest(const Amounts& demand, bool reservation,
                                               int index = 0) const {
    rpc::RequestWorkerLeaseRequest request = Request(demand);
    request.mutable_resource_spec()->set_placement_group_id(group_);
    request.mutable_resource_spec()->set_bundle_index(index);
    request.mutable_resource_spec()->set_bundle_reservation(reservation);
    return request;
  }

  std::shared_ptr<ReplySlot> Ask(const rpc::RequestWorkerLeaseRequest& request) {
    auto slot = std::make_shared<ReplySlot>();
    manager_.RequestLease(request, slot->Callback());
    return slot;
  }

  // Asks for `demand`, waits for the launcher to be asked (pop number `pop`) and grants it.
  struct Granted {
    rpc::RequestWorkerLeaseReply reply;
    std::shared_ptr<Worker> worker;
  };
  Granted Grant(const Amounts& demand, int pop) { return Grant(Request(demand), pop); }
  Granted Grant(const rpc::RequestWorkerLeaseRequest& request, int pop) {
    auto slot = Ask(request);
    EXPECT_TRUE(launcher_.AwaitPops(pop + 1));
    Granted granted;
    granted.worker = launcher_.GrantPop(pop);
    EXPECT_TRUE(slot->answered());
    granted.reply = slot->Await();
    return granted;
  }

  Amounts Available() const { return manager_.Available().ToMap(); }

  // The cluster view with this node (as the GCS last saw it) and a remote node with room.
  void ShowRemoteNodeWithRoom() {
    rpc::ResourceUsage local;
    local.set_node_id(local_.Binary());
    rpc::ResourceUsage remote;
    remote.set_node_id(remote_.Binary());
    remote.set_raylet_address("10.0.0.2:7000");
    for (const auto& [name, amount] : Amounts{{"CPU", 8}}) {
      (*remote.mutable_total())[name] = amount;
      (*remote.mutable_available())[name] = amount;
    }
    manager_.UpdateClusterView({local, remote});
  }

  const NodeId local_ = NodeId::FromRandom();
  const NodeId remote_ = NodeId::FromRandom();
  const JobId job_ = JobId::FromInt(7);
  const std::string group_ = PlacementGroupId::FromRandom().Binary();
  FakeClock clock_;
  FakeWorkerLauncher launcher_;
  LeaseManager manager_;
};

TEST_F(LeaseManagerTest, GrantsAWorkerWhenResourcesFit) {
  auto slot = Ask(Request({{"CPU", 1}, {"GPU", 1}}));
  // The resources are taken at once; the worker comes from the launcher.
  EXPECT_EQ(Available(), (Amounts{{"CPU", 3}, {"GPU", 1}}));
  ASSERT_TRUE(launcher_.AwaitPops(1));
  EXPECT_EQ(launcher_.pop(0).job.job_id(), job_.Binary());
  EXPECT_EQ(launcher_.pop(0).cuda_visible_devices, "0");
  EXPECT_FALSE(slot->answered());

  auto worker = launcher_.GrantPop(0);
  ASSERT_TRUE(slot->answered());
  const rpc::RequestWorkerLeaseReply reply = slot->Await();
  EXPECT_FALSE(reply.rejected());
  EXPECT_EQ(reply.worker_address(), worker->address);
  EXPECT_EQ(reply.worker_id(), worker->worker_id.Binary());
  EXPECT_EQ(reply.worker_pid(), worker->pid);
  EXPECT_EQ(reply.node_id(), local_.Binary());
  EXPECT_FALSE(reply.lease_id().empty());
  ASSERT_EQ(reply.gpu_ids_size(), 1);
  EXPECT_EQ(reply.gpu_ids(0), 0);
  EXPECT_EQ(manager_.num_leased(), 1);
  EXPECT_EQ(manager_.NewestLeasedWorker(), worker);

  ASSERT_TRUE(manager_.ReturnWorker(reply.lease_id(), /*disconnect_worker=*/false).ok());
  EXPECT_EQ(launcher_.pushed(), std::vector<WorkerId>{worker->worker_id});
  EXPECT_TRUE(launcher_.killed().empty());
  EXPECT_EQ(Available(), kTotal);
  EXPECT_EQ(manager_.num_leased(), 0);
  EXPECT_TRUE(absl::IsNotFound(manager_.ReturnWorker(reply.lease_id(), false)));
}

TEST_F(LeaseManagerTest, ReturningWithDisconnectStopsTheWorkerGracefully) {
  Granted a = Grant({{"CPU", 1}}, 0);
  ASSERT_TRUE(manager_.ReturnWorker(a.reply.lease_id(), /*disconnect_worker=*/true).ok());
  EXPECT_EQ(launcher_.stopped(), std::vector<WorkerId>{a.worker->worker_id});
  EXPECT_TRUE(launcher_.killed().empty());
  EXPECT_TRUE(launcher_.pushed().empty());
  EXPECT_EQ(Available(), kTotal);
}

TEST_F(LeaseManagerTest, QueuesInOrderWhenFullAndGrantsOnReturn) {
  Granted a = Grant({{"CPU", 4}}, 0);
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));
  auto b = Ask(Request({{"CPU", 3}}));
  auto c = Ask(Request({{"CPU", 2}}));
  EXPECT_EQ(manager_.num_pending(), 2);
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));

  // Returning A frees 4 CPUs: B (first in line) gets 3; C does not fit in the one left.
  ASSERT_TRUE(manager_.ReturnWorker(a.reply.lease_id(), false).ok());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 2}}));
  EXPECT_EQ(manager_.num_pending(), 1);
  ASSERT_TRUE(launcher_.AwaitPops(2));
  launcher_.GrantPop(1);
  const rpc::RequestWorkerLeaseReply b_reply = b->Await();
  EXPECT_FALSE(c->answered());

  ASSERT_TRUE(manager_.ReturnWorker(b_reply.lease_id(), false).ok());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}, {"GPU", 2}}));
  EXPECT_EQ(manager_.num_pending(), 0);
  ASSERT_TRUE(launcher_.AwaitPops(3));
  launcher_.GrantPop(2);
  EXPECT_FALSE(c->Await().lease_id().empty());
}

// A node knows its own labels before the GCS's view of it arrives: a required selector they match
// is served here; one no known node matches is refused, naming the node's labels.
TEST_F(LeaseManagerTest, LabelSelectorsMatchThisNodesOwnLabels) {
  LeaseManager labelled(
      local_, Resources(kTotal), &launcher_,
      [](const JobId& job_id) -> absl::StatusOr<rpc::JobInfo> {
        rpc::JobInfo job;
        job.set_job_id(job_id.Binary());
        return job;
      },
      &clock_, {{"zone", "a"}});
  auto in_zone = [&](const std::string& zone) {
    rpc::RequestWorkerLeaseRequest request = Request({{"CPU", 1}});
    rpc::LabelConstraint* constraint = request.mutable_resource_spec()
                                           ->mutable_strategy()
                                           ->mutable_label_selector()
                                           ->add_constraints();
    constraint->set_key("zone");
    constraint->add_values(zone);
    return request;
  };
  ReplySlot elsewhere;
  labelled.RequestLease(in_zone("b"), elsewhere.Callback());
  ASSERT_TRUE(elsewhere.answered());
  EXPECT_TRUE(elsewhere.Await().rejected());
  EXPECT_TRUE(absl::StrContains(elsewhere.Await().failure_message(), "{zone=b}"))
      << elsewhere.Await().failure_message();
  EXPECT_TRUE(absl::StrContains(elsewhere.Await().failure_message(), "{zone=a}"))
      << elsewhere.Await().failure_message();
  ReplySlot here;
  labelled.RequestLease(in_zone("a"), here.Callback());
  ASSERT_TRUE(launcher_.AwaitPops(1));
  launcher_.GrantPop(0);
  const rpc::RequestWorkerLeaseReply reply = here.Await();
  EXPECT_FALSE(reply.rejected()) << reply.failure_message();
  EXPECT_TRUE(labelled.ReturnWorker(reply.lease_id(), /*disconnect_worker=*/false).ok());
}

TEST_F(LeaseManagerTest, SpillsBackWhenAnotherNodeHasRoom) {
  Grant({{"CPU", 4}}, 0);
  auto queued = Ask(Request({{"CPU", 2}}));  // no other node known yet: waits here
  EXPECT_EQ(manager_.num_pending(), 1);

  // The cluster view shows a node with room: the queued request goes there.
  ShowRemoteNodeWithRoom();
  ASSERT_TRUE(queued->answered());
  EXPECT_EQ(queued->Await().retry_at_raylet_address(), "10.0.0.2:7000");
  EXPECT_EQ(manager_.num_pending(), 0);

  // So does a new one, at once; nothing is taken here.
  auto fresh = Ask(Request({{"CPU", 2}}));
  ASSERT_TRUE(fresh->answered());
  EXPECT_EQ(fresh->Await().retry_at_raylet_address(), "10.0.0.2:7000");
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));
  EXPECT_EQ(launcher_.num_pops(), 1);
}

TEST_F(LeaseManagerTest, GrantOrRejectIsRejectedInsteadOfRedirected) {
  Grant({{"CPU", 4}}, 0);
  ShowRemoteNodeWithRoom();
  rpc::RequestWorkerLeaseRequest request = Request({{"CPU", 2}});
  request.set_grant_or_reject(true);
  auto slot = Ask(request);
  ASSERT_TRUE(slot->answered());
  EXPECT_TRUE(slot->Await().rejected());
  EXPECT_TRUE(slot->Await().retry_at_raylet_address().empty());
  EXPECT_EQ(manager_.num_pending(), 0);
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));

  // When it fits, it is granted here.
  request = Request({{"GPU", 1}});
  request.set_grant_or_reject(true);
  auto fits = Ask(request);
  EXPECT_EQ(Available(), (Amounts{{"GPU", 1}}));
  ASSERT_TRUE(launcher_.AwaitPops(2));
  launcher_.GrantPop(1);
  EXPECT_FALSE(fits->Await().rejected());
}

TEST_F(LeaseManagerTest, InfeasibleDemandsAreAnsweredAndListedForTenSeconds) {
  auto slot = Ask(Request({{"GPU", 8}}));
  ASSERT_TRUE(slot->answered());
  const rpc::RequestWorkerLeaseReply reply = slot->Await();
  EXPECT_TRUE(reply.infeasible());
  EXPECT_NE(reply.failure_message().find("GPU"), std::string::npos) << reply.failure_message();
  EXPECT_EQ(Available(), kTotal);
  EXPECT_EQ(manager_.num_pending(), 0);

  std::vector<std::string> demands = manager_.InfeasibleDemands();
  ASSERT_EQ(demands.size(), 1u);
  EXPECT_NE(demands[0].find("GPU"), std::string::npos) << demands[0];
  clock_.Advance(absl::Seconds(9));
  EXPECT_EQ(manager_.InfeasibleDemands().size(), 1u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(manager_.InfeasibleDemands().empty());
}

TEST_F(LeaseManagerTest, AWorkerThatFailsToStartIsTriedThreeTimesThenTheLeaseFails) {
  auto slot = Ask(Request({{"CPU", 2}}));
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSERT_TRUE(launcher_.AwaitPops(attempt + 1));
    EXPECT_FALSE(slot->answered());
    EXPECT_EQ(Available(), (Amounts{{"CPU", 2}, {"GPU", 2}}));  // held while trying
    launcher_.FailPop(attempt,
                      absl::UnavailableError("worker process exited before it registered"));
  }
  ASSERT_TRUE(slot->answered());
  const rpc::RequestWorkerLeaseReply reply = slot->Await();
  EXPECT_TRUE(reply.rejected());
  EXPECT_EQ(reply.failure_message(),
            "cannot start a worker: worker process exited before it registered");
  EXPECT_EQ(Available(), kTotal);
  EXPECT_EQ(manager_.num_leased(), 0);
  EXPECT_EQ(launcher_.num_pops(), 3);
}

TEST_F(LeaseManagerTest, AWorkerThatStartsOnTheSecondTryIsGranted) {
  auto slot = Ask(Request({{"CPU", 1}}));
  ASSERT_TRUE(launcher_.AwaitPops(1));
  launcher_.FailPop(0, absl::ResourceExhaustedError("fork: out of memory"));
  ASSERT_TRUE(launcher_.AwaitPops(2));
  auto worker = launcher_.GrantPop(1);
  EXPECT_EQ(slot->Await().worker_id(), worker->worker_id.Binary());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 3}, {"GPU", 2}}));
}

TEST_F(LeaseManagerTest, AnUnknownJobFailsTheLeaseWithoutStartingAWorker) {
  rpc::RequestWorkerLeaseRequest request = Request({{"CPU", 1}});
  request.mutable_resource_spec()->set_job_id(JobId::FromInt(99).Binary());
  auto slot = Ask(request);
  const rpc::RequestWorkerLeaseReply reply = slot->Await();  // answered on the lookup thread
  EXPECT_TRUE(reply.rejected());
  EXPECT_EQ(reply.failure_message(), "cannot start a worker: the GCS does not know job");
  EXPECT_EQ(Available(), kTotal);
  EXPECT_EQ(launcher_.num_pops(), 0);
}

TEST_F(LeaseManagerTest, BundleReservationIsGrantedAtOnceOrRefused) {
  auto reserved = Ask(BundleRequest({{"CPU", 3}, {"GPU", 1}}, /*reservation=*/true));
  ASSERT_TRUE(reserved->answered());
  const rpc::RequestWorkerLeaseReply reply = reserved->Await();
  EXPECT_FALSE(reply.rejected());
  EXPECT_FALSE(reply.lease_id().empty());
  EXPECT_EQ(reply.node_id(), local_.Binary());
  EXPECT_TRUE(reply.worker_address().empty());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 1}}));

  auto refused = Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/true, /*index=*/1));
  ASSERT_TRUE(refused->answered());
  EXPECT_TRUE(refused->Await().rejected());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 1}}));
  EXPECT_EQ(manager_.num_pending(), 0);
  EXPECT_EQ(launcher_.num_pops(), 0);
}

TEST_F(LeaseManagerTest, ARepeatedReservationWithTheSameIdIsTheSameReservation) {
  // A restarted GCS (or a retry) asks again for a reservation the raylet already holds.
  rpc::RequestWorkerLeaseRequest request = BundleRequest({{"CPU", 3}}, /*reservation=*/true);
  const std::string id = LeaseId::FromRandom().Binary();
  request.set_reservation_id(id);
  auto first = Ask(request);
  EXPECT_EQ(first->Await().lease_id(), id);
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 2}}));
  auto again = Ask(request);
  EXPECT_FALSE(again->Await().rejected());
  EXPECT_EQ(again->Await().lease_id(), id);
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 2}}));  // not reserved twice
  // Once returned, the resources are back.
  ASSERT_TRUE(manager_.ReturnWorker(id, false).ok());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 4}, {"GPU", 2}}));
}

TEST_F(LeaseManagerTest, AReservationReturnedBeforeItArrivedIsRefused) {
  // A restarted GCS returns a reservation the dead one may have sent; it arrives afterwards.
  const std::string id = LeaseId::FromRandom().Binary();
  EXPECT_EQ(manager_.ReturnWorker(id, false).code(), absl::StatusCode::kNotFound);
  rpc::RequestWorkerLeaseRequest request = BundleRequest({{"CPU", 1}}, /*reservation=*/true);
  request.set_reservation_id(id);
  auto late = Ask(request);
  EXPECT_TRUE(late->Await().rejected());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 4}, {"GPU", 2}}));
}

TEST_F(LeaseManagerTest, LeasesInsideABundleComeFromItsPool) {
  Granted outside = Grant({{"GPU", 1}}, 0);  // takes device 0
  ASSERT_EQ(outside.reply.gpu_ids(0), 0);
  auto reserved = Ask(BundleRequest({{"CPU", 2}, {"GPU", 1}}, /*reservation=*/true));
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}}));

  auto inside = Ask(BundleRequest({{"CPU", 1}, {"GPU", 1}}, /*reservation=*/false));
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}}));  // the node's own resources are untouched
  ASSERT_TRUE(launcher_.AwaitPops(2));
  EXPECT_EQ(launcher_.pop(1).cuda_visible_devices, "1");  // the bundle's device, as the node's id
  launcher_.GrantPop(1);
  const rpc::RequestWorkerLeaseReply reply = inside->Await();
  ASSERT_EQ(reply.gpu_ids_size(), 1);
  EXPECT_EQ(reply.gpu_ids(0), 1);

  // The bundle has one CPU left: a lease wanting two waits, though the node has two free.
  auto waiting = Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/false));
  EXPECT_EQ(manager_.num_pending(), 1);
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}}));
  ASSERT_TRUE(manager_.ReturnWorker(reply.lease_id(), false).ok());
  EXPECT_EQ(manager_.num_pending(), 0);
  ASSERT_TRUE(launcher_.AwaitPops(3));
  launcher_.GrantPop(2);
  EXPECT_FALSE(waiting->Await().lease_id().empty());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}}));
}

// A lease that asks for any bundle of its group (-1) is told which one it got: the task's or
// actor's runtime context names it (issue 34 item 4).
TEST_F(LeaseManagerTest, ALeaseForAnyBundleSaysWhichBundleItGot) {
  auto reserved = Ask(BundleRequest({{"CPU", 1}}, /*reservation=*/true, /*index=*/2));
  EXPECT_FALSE(reserved->Await().lease_id().empty());
  auto inside = Ask(BundleRequest({{"CPU", 1}}, /*reservation=*/false, /*index=*/-1));
  ASSERT_TRUE(launcher_.AwaitPops(1));
  launcher_.GrantPop(0);
  const rpc::RequestWorkerLeaseReply reply = inside->Await();
  EXPECT_FALSE(reply.lease_id().empty());
  EXPECT_EQ(reply.bundle_index(), 2);
}

TEST_F(LeaseManagerTest, ReturningAReservationKillsItsWorkersAndFreesItsResources) {
  auto reserved = Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/true));
  const std::string reservation = reserved->Await().lease_id();
  auto inside = Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/false));
  ASSERT_TRUE(launcher_.AwaitPops(1));
  auto worker = launcher_.GrantPop(0);
  const std::string lease = inside->Await().lease_id();
  auto waiting = Ask(BundleRequest({{"CPU", 1}}, /*reservation=*/false));
  EXPECT_EQ(manager_.num_pending(), 1);
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}, {"GPU", 2}}));

  ASSERT_TRUE(manager_.ReturnWorker(reservation, false).ok());
  EXPECT_EQ(launcher_.killed(), std::vector<WorkerId>{worker->worker_id});
  EXPECT_EQ(Available(), kTotal);
  // A lease still waiting for the bundle learns it is gone.
  ASSERT_TRUE(waiting->answered());
  EXPECT_TRUE(waiting->Await().rejected());
  EXPECT_NE(waiting->Await().failure_message().find("has no bundle 0"), std::string::npos);

  // The killed worker's exit releases its lease without giving the bundle's CPUs twice.
  EXPECT_EQ(manager_.num_leased(), 1);
  manager_.OnWorkerExit(*worker);
  EXPECT_EQ(manager_.num_leased(), 0);
  EXPECT_EQ(Available(), kTotal);
  EXPECT_TRUE(absl::IsNotFound(manager_.ReturnWorker(lease, false)));
}

// Regression (issue 30 item 8): the group was removed while a task's lease in its bundle was
// still held; the holder then returned that lease normally. The worker, already being killed for
// the returned bundle, went back to the pool and the next lease (a new actor) got it, and died.
TEST_F(LeaseManagerTest, AWorkerKilledWithItsBundleIsNotGivenBackWhenItsLeaseIsReturned) {
  auto reserved = Ask(BundleRequest({{"CPU", 1}}, /*reservation=*/true));
  const std::string reservation = reserved->Await().lease_id();
  auto inside = Ask(BundleRequest({{"CPU", 1}}, /*reservation=*/false));
  ASSERT_TRUE(launcher_.AwaitPops(1));
  auto worker = launcher_.GrantPop(0);
  const std::string lease = inside->Await().lease_id();

  // The GCS returns the bundle (the group was removed): its worker is killed...
  ASSERT_TRUE(manager_.ReturnWorker(reservation, false).ok());
  EXPECT_EQ(launcher_.killed(), std::vector<WorkerId>{worker->worker_id});
  // ...and the task's owner, done with it, returns its lease before the worker's exit is seen.
  ASSERT_TRUE(manager_.ReturnWorker(lease, /*disconnect_worker=*/false).ok());
  EXPECT_TRUE(launcher_.pushed().empty()) << "the dying worker went back to the pool";
  EXPECT_EQ(launcher_.killed().size(), 1u);  // not killed twice
  EXPECT_EQ(manager_.num_leased(), 0);
  EXPECT_EQ(Available(), kTotal);
  // The worker's exit, seen later, changes nothing.
  manager_.OnWorkerExit(*worker);
  EXPECT_EQ(Available(), kTotal);
}

// The same for a worker the GCS killed (an actor's): its lease returned meanwhile does not give
// the dying process back.
TEST_F(LeaseManagerTest, AKilledLeasedWorkerIsNotGivenBackWhenItsLeaseIsReturned) {
  Granted granted = Grant({{"CPU", 1}}, 0);
  ASSERT_TRUE(manager_.KillLeasedWorker(granted.reply.lease_id()).ok());
  ASSERT_TRUE(manager_.ReturnWorker(granted.reply.lease_id(), false).ok());
  EXPECT_TRUE(launcher_.pushed().empty());
  EXPECT_EQ(launcher_.killed(), std::vector<WorkerId>{granted.worker->worker_id});
  EXPECT_EQ(Available(), kTotal);
}

// Regression: a bundle lease whose worker never started gave the bundle's resources to the node.
TEST_F(LeaseManagerTest, ABundleLeaseThatFailsGivesItsResourcesBackToTheBundle) {
  Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/true));
  auto inside = Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/false));
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSERT_TRUE(launcher_.AwaitPops(attempt + 1));
    launcher_.FailPop(attempt, absl::InternalError("no executable"));
  }
  EXPECT_TRUE(inside->Await().rejected());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 2}, {"GPU", 2}}));
  // The bundle has its two CPUs again.
  auto again = Ask(BundleRequest({{"CPU", 2}}, /*reservation=*/false));
  EXPECT_EQ(manager_.num_pending(), 0);
  ASSERT_TRUE(launcher_.AwaitPops(4));
  launcher_.GrantPop(3);
  EXPECT_FALSE(again->Await().lease_id().empty());
}

TEST_F(LeaseManagerTest, ABundleOnAnotherNodeSendsTheCallerThere) {
  ShowRemoteNodeWithRoom();
  rpc::RequestWorkerLeaseRequest request = BundleRequest({{"CPU", 1}}, /*reservation=*/false);
  request.mutable_resource_spec()->mutable_strategy()->set_kind(
      rpc::SchedulingStrategy::NODE_AFFINITY);
  request.mutable_resource_spec()->mutable_strategy()->set_node_id(remote_.Binary());
  auto slot = Ask(request);
  EXPECT_EQ(slot->Await().retry_at_raylet_address(), "10.0.0.2:7000");

  const NodeId dead = NodeId::FromRandom();
  manager_.MarkNodeDead(dead);
  request.mutable_resource_spec()->mutable_strategy()->set_node_id(dead.Binary());
  auto on_dead = Ask(request);
  EXPECT_TRUE(on_dead->Await().rejected());
  EXPECT_NE(on_dead->Await().failure_message().find("died"), std::string::npos);
  EXPECT_EQ(Available(), kTotal);
}

TEST_F(LeaseManagerTest, ABlockedWorkerLendsItsCpusUntilItUnblocks) {
  Granted a = Grant({{"CPU", 3}}, 0);
  auto b = Ask(Request({{"CPU", 3}}));
  EXPECT_EQ(manager_.num_pending(), 1);

  manager_.NotifyBlocked(a.worker->worker_id, /*blocked=*/true);
  // A's CPUs went to B, which was waiting for them.
  EXPECT_EQ(manager_.num_pending(), 0);
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 2}}));
  ASSERT_TRUE(launcher_.AwaitPops(2));
  launcher_.GrantPop(1);
  const std::string b_lease = b->Await().lease_id();

  // A takes its CPUs back, over-subscribing the node until B returns its lease.
  manager_.NotifyBlocked(a.worker->worker_id, /*blocked=*/false);
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));
  manager_.NotifyBlocked(a.worker->worker_id, /*blocked=*/false);  // no change twice
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));
  ASSERT_TRUE(manager_.ReturnWorker(b_lease, false).ok());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 1}, {"GPU", 2}}));
  ASSERT_TRUE(manager_.ReturnWorker(a.reply.lease_id(), false).ok());
  EXPECT_EQ(Available(), kTotal);
}

TEST_F(LeaseManagerTest, ABlockedWorkerReturnedWhileBlockedFreesItsCpusOnce) {
  Granted a = Grant({{"CPU", 2}}, 0);
  manager_.NotifyBlocked(a.worker->worker_id, /*blocked=*/true);
  EXPECT_EQ(Available(), kTotal);
  ASSERT_TRUE(manager_.ReturnWorker(a.reply.lease_id(), false).ok());
  EXPECT_EQ(Available(), kTotal);
}

TEST_F(LeaseManagerTest, HardAffinityToADeadNodeFails) {
  const NodeId gone = NodeId::FromRandom();
  rpc::RequestWorkerLeaseRequest request = Request({{"CPU", 1}});
  request.mutable_resource_spec()->mutable_strategy()->set_kind(
      rpc::SchedulingStrategy::NODE_AFFINITY);
  request.mutable_resource_spec()->mutable_strategy()->set_node_id(gone.Binary());
  // Unknown (it may be joining): infeasible for now.
  auto unknown = Ask(request);
  EXPECT_TRUE(unknown->Await().infeasible());

  manager_.MarkNodeDead(gone);
  auto dead = Ask(request);
  const rpc::RequestWorkerLeaseReply reply = dead->Await();
  EXPECT_TRUE(reply.rejected());
  EXPECT_NE(reply.failure_message().find("is dead"), std::string::npos) << reply.failure_message();

  // Soft affinity falls back to this node.
  request.mutable_resource_spec()->mutable_strategy()->set_soft(true);
  auto soft = Ask(request);
  EXPECT_FALSE(soft->answered());
  EXPECT_EQ(Available(), (Amounts{{"CPU", 3}, {"GPU", 2}}));
  ASSERT_TRUE(launcher_.AwaitPops(1));
  launcher_.GrantPop(0);
  EXPECT_FALSE(soft->Await().lease_id().empty());
}

TEST_F(LeaseManagerTest, AWorkerExitReleasesItsLease) {
  Granted a = Grant({{"CPU", 4}}, 0);
  auto b = Ask(Request({{"CPU", 1}}));
  ASSERT_TRUE(manager_.KillLeasedWorker(a.reply.lease_id()).ok());
  EXPECT_EQ(launcher_.killed(), std::vector<WorkerId>{a.worker->worker_id});
  EXPECT_EQ(manager_.num_leased(), 1);  // until the exit is seen
  EXPECT_EQ(Available(), (Amounts{{"GPU", 2}}));

  manager_.OnWorkerExit(*a.worker);
  EXPECT_EQ(manager_.num_leased(), 0);
  EXPECT_EQ(Available(), (Amounts{{"CPU", 3}, {"GPU", 2}}));  // B got one
  EXPECT_TRUE(absl::IsNotFound(manager_.ReturnWorker(a.reply.lease_id(), false)));
  EXPECT_TRUE(absl::IsNotFound(manager_.KillLeasedWorker(a.reply.lease_id())));
  manager_.OnWorkerExit(*a.worker);  // a second exit report changes nothing
  EXPECT_EQ(Available(), (Amounts{{"CPU", 3}, {"GPU", 2}}));
  ASSERT_TRUE(launcher_.AwaitPops(2));
  launcher_.GrantPop(1);
  EXPECT_FALSE(b->Await().lease_id().empty());
}

TEST_F(LeaseManagerTest, RejectAllPendingAnswersEveryQueuedRequest) {
  Grant({{"CPU", 4}}, 0);
  auto b = Ask(Request({{"CPU", 1}}));
  auto c = Ask(Request({{"CPU", 2}}));
  manager_.RejectAllPending("the raylet is shutting down");
  EXPECT_EQ(b->Await().failure_message(), "the raylet is shutting down");
  EXPECT_TRUE(c->Await().rejected());
  EXPECT_EQ(manager_.num_pending(), 0);
}

TEST_F(LeaseManagerTest, TheNewestLeaseIsTheMemoryMonitorsVictim) {
  EXPECT_EQ(manager_.NewestLeasedWorker(), nullptr);
  Granted a = Grant({{"CPU", 1}}, 0);
  Granted b = Grant({{"CPU", 1}}, 1);
  EXPECT_EQ(manager_.NewestLeasedWorker(), b.worker);
  ASSERT_TRUE(manager_.ReturnWorker(b.reply.lease_id(), false).ok());
  EXPECT_EQ(manager_.NewestLeasedWorker(), a.worker);
}

// Regression: the memory monitor killed the newest lease whatever it was, so an actor (whose
// state dies with it) went before a task that would simply have been retried.
TEST_F(LeaseManagerTest, TheMemoryMonitorPicksRetriableTasksFirstAndActorsLast) {
  rpc::RequestWorkerLeaseRequest retriable = Request({{"CPU", 1}});
  retriable.mutable_resource_spec()->set_max_retries(3);
  rpc::RequestWorkerLeaseRequest once = Request({{"CPU", 1}});
  once.mutable_resource_spec()->set_max_retries(0);
  rpc::RequestWorkerLeaseRequest actor = Request({{"CPU", 1}});
  actor.mutable_resource_spec()->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
  Granted old_retriable = Grant(retriable, 0);
  Granted new_retriable = Grant(retriable, 1);
  Granted not_retried = Grant(once, 2);
  Granted newest_actor = Grant(actor, 3);
  EXPECT_EQ(manager_.NewestLeasedWorker(), new_retriable.worker);
  ASSERT_TRUE(manager_.ReturnWorker(new_retriable.reply.lease_id(), true).ok());
  EXPECT_EQ(manager_.NewestLeasedWorker(), old_retriable.worker);
  ASSERT_TRUE(manager_.ReturnWorker(old_retriable.reply.lease_id(), true).ok());
  EXPECT_EQ(manager_.NewestLeasedWorker(), not_retried.worker);
  ASSERT_TRUE(manager_.ReturnWorker(not_retried.reply.lease_id(), true).ok());
  EXPECT_EQ(manager_.NewestLeasedWorker(), newest_actor.worker);
}

}  // namespace
}  // namespace troupe
