// ActorManager on fakes: leases and creation pushes are answered by the test (FakeLeaseClient,
// FakeTaskPushClient), time is a FakeClock, the store and the node table are the real in-memory
// ones. Every test runs in milliseconds.
#include "src/gcs/actor_manager.h"

#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/rpc/fake_peer_clients.h"

namespace troupe {
namespace {

struct TestNode {
  NodeId id;
  std::string address;
};

class ActorManagerTest : public ::testing::Test {
 protected:
  ActorManagerTest() {
    actors_.set_bundle_locator(
        [](const std::string&, int) -> absl::StatusOr<std::pair<std::string, int>> {
          return absl::NotFoundError("no placement groups in this test");
        });
    nodes_.AddNodeRemovedListener([this](const rpc::NodeInfo& node) { actors_.OnNodeDead(node); });
  }

  // Registers a node and reports its usage, so scheduling sees it.
  TestNode AddNode(int port, std::map<std::string, double> resources) {
    TestNode node{NodeId::FromRandom(), absl::StrCat("10.0.0.1:", port)};
    rpc::RegisterNodeRequest request;
    request.mutable_node()->set_node_id(node.id.Binary());
    request.mutable_node()->set_node_ip("10.0.0.1");
    request.mutable_node()->set_raylet_port(port);
    for (const auto& [name, amount] : resources) {
      (*request.mutable_node()->mutable_resources_total())[name] = amount;
    }
    EXPECT_TRUE(nodes_.RegisterNode(request).ok());
    rpc::ResourceUsage usage;
    usage.set_node_id(node.id.Binary());
    usage.set_report_seq(1);
    for (const auto& [name, amount] : resources) {
      (*usage.mutable_total())[name] = amount;
      (*usage.mutable_available())[name] = amount;
    }
    EXPECT_TRUE(nodes_.ReportResourceUsage(usage).ok());
    return node;
  }

  rpc::RegisterActorRequest ActorRequest(int64_t max_restarts,
                                         std::map<std::string, double> resources = {{"CPU", 1}},
                                         uint32_t job = 1, bool detached = false) {
    rpc::RegisterActorRequest request;
    rpc::ActorInfo* actor = request.mutable_actor();
    actor->set_actor_id(ActorId::FromRandom().Binary());
    actor->set_job_id(JobId::FromInt(job).Binary());
    actor->set_class_name("Counter");
    actor->set_max_restarts(max_restarts);
    actor->set_detached(detached);
    rpc::TaskSpec* task = request.mutable_creation_task();
    task->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
    task->set_job_id(actor->job_id());
    task->set_function_name("Counter::Create");
    for (const auto& [name, amount] : resources) {
      (*actor->mutable_required_resources())[name] = amount;
      (*task->mutable_required_resources())[name] = amount;
    }
    return request;
  }

  ActorId Register(const rpc::RegisterActorRequest& request) {
    EXPECT_TRUE(actors_.RegisterActor(request).ok());
    return *ActorId::FromBinary(request.actor().actor_id());
  }

  rpc::ActorInfo Info(const ActorId& id) {
    rpc::GetActorInfoRequest request;
    request.set_actor_id(id.Binary());
    auto info = actors_.GetActor(request);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : rpc::ActorInfo();
  }

  // Grants lease request `index` with a fresh worker; returns the worker's ID.
  std::string GrantLease(size_t index, const TestNode& node, int pid) {
    rpc::RequestWorkerLeaseReply reply;
    const std::string worker_id = WorkerId::FromRandom().Binary();
    reply.set_worker_id(worker_id);
    reply.set_worker_address(absl::StrCat("10.0.0.1:", 20000 + pid));
    reply.set_lease_id(absl::StrCat("lease-", index));
    reply.set_node_id(node.id.Binary());
    reply.set_worker_pid(pid);
    lease_.ReplyLease(index, reply);
    return worker_id;
  }
  void CreationSucceeds(size_t push_index) { push_.Reply(push_index, rpc::PushTaskReply()); }

  // Registers an actor and takes it to ALIVE on `node`; returns its worker ID in *worker.
  ActorId CreateAlive(const rpc::RegisterActorRequest& request, const TestNode& node,
                      std::string* worker, int pid = 42) {
    const size_t lease_index = lease_.num_lease_requests();
    const size_t push_index = push_.num_pushes();
    ActorId id = Register(request);
    EXPECT_EQ(lease_.num_lease_requests(), lease_index + 1);
    *worker = GrantLease(lease_index, node, pid);
    EXPECT_EQ(push_.num_pushes(), push_index + 1);
    CreationSucceeds(push_index);
    EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);
    return id;
  }

  FakeClock clock_;
  InMemoryStoreClient store_;
  Publisher publisher_{&clock_};
  NodeManager nodes_{ClusterId::FromRandom(), &store_, &publisher_, &clock_};
  FakeLeaseClient lease_;
  FakeTaskPushClient push_;
  ActorManager actors_{{&store_, &publisher_, &nodes_, &clock_, &lease_, &push_}};
};

TEST_F(ActorManagerTest, LeasesPushesCreationAndBecomesAlive) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  ActorId id = Register(ActorRequest(0));
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::PENDING_CREATION);
  ASSERT_EQ(lease_.num_lease_requests(), 1u);
  auto lease = lease_.lease_request(0);
  EXPECT_EQ(lease.raylet_address, node.address);
  EXPECT_EQ(lease.request.resource_spec().type(), rpc::TaskSpec::ACTOR_CREATION_TASK);
  EXPECT_EQ(lease.request.resource_spec().required_resources().at("CPU"), 1);
  EXPECT_FALSE(lease.request.grant_or_reject());

  GrantLease(0, node, 42);
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::PENDING_CREATION);  // not before the constructor ran
  ASSERT_EQ(push_.num_pushes(), 1u);
  EXPECT_EQ(push_.push(0).worker_address, "10.0.0.1:20042");
  EXPECT_EQ(push_.push(0).request.task().function_name(), "Counter::Create");
  CreationSucceeds(0);
  rpc::ActorInfo info = Info(id);
  EXPECT_EQ(info.state(), rpc::ActorInfo::ALIVE);
  EXPECT_EQ(info.pid(), 42);
  EXPECT_EQ(info.raylet_address(), node.address);
  EXPECT_EQ(info.lease_id(), "lease-0");
}

TEST_F(ActorManagerTest, GetActorsAnswersTheIdsAskedInOrderTheUnknownAsDead) {
  AddNode(7001, {{"CPU", 4}});
  const ActorId first = Register(ActorRequest(0));
  const ActorId second = Register(ActorRequest(1));
  const ActorId unknown = ActorId::FromRandom();
  google::protobuf::RepeatedPtrField<std::string> ids;
  *ids.Add() = second.Binary();
  *ids.Add() = unknown.Binary();
  *ids.Add() = "not an actor ID";  // skipped
  *ids.Add() = first.Binary();
  auto infos = actors_.GetActors(ids);
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[0].actor_id(), second.Binary());
  EXPECT_EQ(infos[0].state(), rpc::ActorInfo::PENDING_CREATION);
  // A handle exists only for a registered actor: one the GCS does not know is dead to callers.
  EXPECT_EQ(infos[1].actor_id(), unknown.Binary());
  EXPECT_EQ(infos[1].state(), rpc::ActorInfo::DEAD);
  EXPECT_TRUE(absl::StrContains(infos[1].death_cause(), "no record of actor " + unknown.Hex()))
      << infos[1].death_cause();
  EXPECT_TRUE(absl::StrContains(infos[1].death_cause(), "--max-dead-actors"));
  EXPECT_EQ(infos[2].actor_id(), first.Binary());
  EXPECT_TRUE(actors_.GetActors({}).empty());
  EXPECT_EQ(actors_.GetAllActors().size(), 2u);
}

// Raylets free the objects an exited process owned when they see its exit on the WORKER channel;
// drivers and plain task workers hold no actor, and are published all the same.
TEST_F(ActorManagerTest, EveryWorkerExitIsPublishedOnTheWorkerChannel) {
  const std::string driver = WorkerId::FromRandom().Binary();
  const std::string node = NodeId::FromRandom().Binary();
  rpc::PollRequest poll;
  poll.set_after_seq(0);
  poll.add_channels(rpc::WORKER_CHANNEL);
  actors_.OnWorkerExit(driver, "was killed by signal 9", node);
  rpc::PollReply reply;
  publisher_.Poll(poll, [&](rpc::PollReply r) { reply = std::move(r); });
  ASSERT_EQ(reply.messages_size(), 1);
  EXPECT_EQ(reply.messages(0).key(), driver);
  EXPECT_EQ(reply.messages(0).worker_exit().worker_id(), driver);
  EXPECT_EQ(reply.messages(0).worker_exit().node_id(), node);
  EXPECT_EQ(reply.messages(0).worker_exit().how(), "was killed by signal 9");
}

// The GCS drops its client to a worker once the worker is gone (restart or death).
TEST_F(ActorManagerTest, TellsWhenAnActorsWorkerIsGone) {
  std::vector<std::string> gone;
  actors_.set_worker_gone_listener([&](const std::string& address) { gone.push_back(address); });
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/1), node, &worker);
  EXPECT_TRUE(gone.empty());
  actors_.OnWorkerExit(worker, "exited with code 1");  // restarts on a new worker
  EXPECT_EQ(gone, std::vector<std::string>{"10.0.0.1:20042"});
  worker = GrantLease(1, node, 43);
  CreationSucceeds(1);
  ASSERT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);
  actors_.OnWorkerExit(worker, "was killed by signal 9");  // dies
  EXPECT_EQ(gone, (std::vector<std::string>{"10.0.0.1:20042", "10.0.0.1:20043"}));

  // Buried with its job (its lease returned, no exit report needed), and a constructor that
  // threw: the workers are gone all the same.
  gone.clear();
  CreateAlive(ActorRequest(0, {{"CPU", 1}}, /*job=*/9), node, &worker, 44);
  actors_.OnJobFinished(JobId::FromInt(9).Binary());
  EXPECT_EQ(gone, std::vector<std::string>{"10.0.0.1:20044"});
  Register(ActorRequest(0));
  GrantLease(lease_.num_lease_requests() - 1, node, 45);
  rpc::PushTaskReply threw;
  threw.add_returns()->set_is_application_error(true);
  push_.Reply(push_.num_pushes() - 1, threw);
  EXPECT_EQ(gone, (std::vector<std::string>{"10.0.0.1:20044", "10.0.0.1:20045"}));
}

TEST_F(ActorManagerTest, RestartsWithTheCauseUntilMaxRestartsThenDies) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/1), node, &worker);

  actors_.OnWorkerExit(worker, "exited with code 1");
  rpc::ActorInfo info = Info(id);
  EXPECT_EQ(info.state(), rpc::ActorInfo::RESTARTING);
  EXPECT_EQ(info.num_restarts(), 1);
  EXPECT_EQ(info.death_cause(), "the actor's process (pid 42) exited with code 1");
  ASSERT_EQ(lease_.num_lease_requests(), 2u);  // a new lease for the restart

  worker = GrantLease(1, node, 43);
  ASSERT_EQ(push_.num_pushes(), 2u);
  EXPECT_EQ(push_.push(1).request.task().actor_num_restarts(), 1);
  CreationSucceeds(1);
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);
  EXPECT_EQ(Info(id).pid(), 43);

  actors_.OnWorkerExit(worker, "was killed by signal 9");
  info = Info(id);
  EXPECT_EQ(info.state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(info.death_cause(),
            "the actor's process (pid 43) was killed by signal 9 (no restarts left: "
            "max_restarts=1)");
  EXPECT_EQ(lease_.num_lease_requests(), 2u);  // no third attempt
}

TEST_F(ActorManagerTest, ConstructorThrowingKillsTheWorkerAndNeverRestarts) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  ActorId id = Register(ActorRequest(/*max_restarts=*/5));
  std::string worker = GrantLease(0, node, 42);
  rpc::PushTaskReply threw;
  rpc::ReturnObject* result = threw.add_returns();
  result->set_is_application_error(true);
  result->set_exception_type("std::runtime_error");
  result->set_error_message("bad config");
  push_.Reply(0, threw);

  rpc::ActorInfo info = Info(id);
  EXPECT_EQ(info.state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(info.death_cause(), "the constructor threw std::runtime_error: bad config");
  ASSERT_EQ(lease_.killed_workers().size(), 1u);
  EXPECT_EQ(lease_.killed_workers()[0], std::make_pair(node.address, std::string("lease-0")));
  actors_.OnWorkerExit(worker, "was killed by signal 9");  // the kill's exit report
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(Info(id).death_cause(), "the constructor threw std::runtime_error: bad config");
  EXPECT_EQ(lease_.num_lease_requests(), 1u);
}

TEST_F(ActorManagerTest, KillWithNoRestartDiesOnTheExitReport) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/-1), node, &worker);
  ASSERT_TRUE(actors_.KillActor(id.Binary(), /*no_restart=*/true).ok());
  ASSERT_EQ(lease_.killed_workers().size(), 1u);
  EXPECT_EQ(lease_.killed_workers()[0].second, "lease-0");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);  // until the raylet reports the exit
  actors_.OnWorkerExit(worker, "was killed by signal 9");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(Info(id).death_cause(), "killed by troupe::Kill");
  EXPECT_EQ(lease_.num_lease_requests(), 1u);  // infinite restarts, yet no restart
}

TEST_F(ActorManagerTest, KillOfAnActorWhoseRayletIsGoneIsFinishedByTheNodesDeath) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/-1), node, &worker);
  lease_.SetKillStatus(absl::UnavailableError("raylet at 10.0.0.1:7001: connection refused"));
  // The caller is not told an error: the kill stands.
  ASSERT_TRUE(actors_.KillActor(id.Binary(), /*no_restart=*/true).ok());
  nodes_.MarkNodeDead(node.id, "health check failed");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
  EXPECT_NE(Info(id).death_cause().find("killed by troupe::Kill"), std::string::npos)
      << Info(id).death_cause();
  EXPECT_EQ(lease_.num_lease_requests(), 1u);  // infinite restarts, yet no restart
}

// A raylet that does not answer (cut off: the call waits out its 10 s deadline) holds the caller
// for ActorManager::kKillAnswerWait at most: the kill is recorded and answered, and the exit
// report finishes it.
TEST_F(ActorManagerTest, KillDoesNotWaitOutACutOffRaylet) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/0), node, &worker);
  lease_.HoldKills();
  ASSERT_TRUE(actors_.KillActor(id.Binary(), /*no_restart=*/true).ok());
  ASSERT_EQ(lease_.killed_workers().size(), 1u) << "the raylet was asked";
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);  // until the exit report
  actors_.OnWorkerExit(worker, "was killed by signal 9");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(Info(id).death_cause(), "killed by troupe::Kill");
  // The raylet's late answer, even an error, changes nothing.
  EXPECT_EQ(lease_.AnswerKills(absl::DeadlineExceededError("deadline")), 1u);
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
}

TEST_F(ActorManagerTest, KillWithRestartRestarts) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/2), node, &worker);
  ASSERT_TRUE(actors_.KillActor(id.Binary(), /*no_restart=*/false).ok());
  actors_.OnWorkerExit(worker, "was killed by signal 9");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::RESTARTING);
  EXPECT_EQ(Info(id).death_cause(), "killed by troupe::Kill (restarting)");
  EXPECT_EQ(lease_.num_lease_requests(), 2u);
}

TEST_F(ActorManagerTest, ExitActorDiesWithoutRestart) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/3), node, &worker);
  ASSERT_TRUE(actors_.OnActorExit(id.Binary(), worker).ok());
  actors_.OnWorkerExit(worker, "exited with code 0");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(Info(id).death_cause(), "the actor exited with troupe::ExitActor()");
  EXPECT_EQ(lease_.num_lease_requests(), 1u);
}

TEST_F(ActorManagerTest, ExitReportsFromProcessesThatDoNotRunTheActorAreRefused) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  TestNode other = AddNode(7002, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/3), node, &worker);
  // Another worker says the actor exits on purpose: refused, so a crash still restarts it.
  absl::Status exit = actors_.OnActorExit(id.Binary(), WorkerId::FromRandom().Binary());
  EXPECT_EQ(exit.code(), absl::StatusCode::kPermissionDenied) << exit;
  EXPECT_TRUE(absl::StrContains(exit.message(), "only the worker running an actor")) << exit;
  // Another node reports the actor's worker dead: refused, the actor stays ALIVE.
  absl::Status died = actors_.ReportWorkerExit(worker, "was killed by signal 9", other.id.Binary());
  EXPECT_EQ(died.code(), absl::StatusCode::kPermissionDenied) << died;
  died = actors_.ReportWorkerExit(worker, "was killed by signal 9", "");
  EXPECT_EQ(died.code(), absl::StatusCode::kPermissionDenied) << died;
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);
  // Its own node's report goes through: a crash, so it restarts.
  ASSERT_TRUE(actors_.ReportWorkerExit(worker, "was killed by signal 9", node.id.Binary()).ok());
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::RESTARTING);
  // Workers that run no actor (drivers, task workers) are reported as before.
  EXPECT_TRUE(actors_
                  .ReportWorkerExit(WorkerId::FromRandom().Binary(), "exited with code 0",
                                    other.id.Binary())
                  .ok());
}

TEST_F(ActorManagerTest, NodeDeathRestartsElsewhereWithTheCause) {
  TestNode a = AddNode(7001, {{"CPU", 4}});
  std::string worker;
  ActorId id = CreateAlive(ActorRequest(/*max_restarts=*/1), a, &worker);
  TestNode b = AddNode(7002, {{"CPU", 4}});
  nodes_.MarkNodeDead(a.id, "health check failed");
  rpc::ActorInfo info = Info(id);
  EXPECT_EQ(info.state(), rpc::ActorInfo::RESTARTING);
  EXPECT_EQ(info.death_cause(),
            absl::StrCat("its node ", a.id.ShortHex(), " died (health check failed)"));
  ASSERT_EQ(lease_.num_lease_requests(), 2u);
  EXPECT_EQ(lease_.lease_request(1).raylet_address, b.address);
  // A late exit report of the old worker changes nothing.
  actors_.OnWorkerExit(worker, "was killed by signal 9");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::RESTARTING);
  EXPECT_EQ(Info(id).num_restarts(), 1);
}

TEST_F(ActorManagerTest, FinishedJobTakesItsActorsButNotDetachedOnes) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  std::string w1, w2;
  ActorId owned = CreateAlive(ActorRequest(3, {{"CPU", 1}}, /*job=*/7), node, &w1, 42);
  ActorId detached =
      CreateAlive(ActorRequest(3, {{"CPU", 1}}, /*job=*/7, /*detached=*/true), node, &w2, 43);
  actors_.OnJobFinished(JobId::FromInt(7).Binary());
  EXPECT_EQ(Info(owned).state(), rpc::ActorInfo::DEAD);
  EXPECT_EQ(Info(owned).death_cause(), "its job finished (the actor is not detached)");
  EXPECT_EQ(Info(detached).state(), rpc::ActorInfo::ALIVE);
  auto returned = lease_.returned_workers();
  ASSERT_EQ(returned.size(), 1u);
  EXPECT_EQ(returned[0].lease_id, "lease-0");
  EXPECT_TRUE(returned[0].disconnect);
  actors_.OnWorkerExit(w1, "exited with code 0");  // no restart for the buried actor
  EXPECT_EQ(lease_.num_lease_requests(), 2u);
}

TEST_F(ActorManagerTest, FollowsSpillbackWithGrantOrReject) {
  TestNode a = AddNode(7001, {{"CPU", 4}});
  ActorId id = Register(ActorRequest(0));
  ASSERT_EQ(lease_.num_lease_requests(), 1u);
  const std::string first = lease_.lease_request(0).raylet_address;
  const std::string other = first == a.address ? "10.0.0.9:7009" : a.address;
  rpc::RequestWorkerLeaseReply spill;
  spill.set_retry_at_raylet_address(other);
  lease_.ReplyLease(0, spill);
  ASSERT_EQ(lease_.num_lease_requests(), 2u);
  EXPECT_EQ(lease_.lease_request(1).raylet_address, other);
  EXPECT_TRUE(lease_.lease_request(1).request.grant_or_reject());
  GrantLease(1, a, 42);
  CreationSucceeds(0);
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);
  EXPECT_EQ(Info(id).raylet_address(), other);
}

TEST_F(ActorManagerTest, LeaseGrantedAfterTheActorDiedIsReturned) {
  AddNode(7001, {{"CPU", 4}});
  TestNode node = AddNode(7002, {{"CPU", 4}});
  ActorId id = Register(ActorRequest(0));
  ASSERT_TRUE(actors_.KillActor(id.Binary(), /*no_restart=*/true).ok());  // lease in flight
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::DEAD);
  const std::string raylet = lease_.lease_request(0).raylet_address;
  GrantLease(0, node, 42);
  EXPECT_EQ(push_.num_pushes(), 0u);
  auto returned = lease_.returned_workers();
  ASSERT_EQ(returned.size(), 1u);
  EXPECT_EQ(returned[0].raylet_address, raylet);
  EXPECT_EQ(returned[0].lease_id, "lease-0");
  EXPECT_FALSE(returned[0].disconnect);
}

TEST_F(ActorManagerTest, StaleAttemptsRepliesAreIgnored) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  ActorId id = Register(ActorRequest(/*max_restarts=*/1));
  std::string worker = GrantLease(0, node, 42);  // attempt 1: creation push in flight
  actors_.OnWorkerExit(worker, "exited with code 1");
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::RESTARTING);
  ASSERT_EQ(lease_.num_lease_requests(), 2u);  // attempt 2
  CreationSucceeds(0);                         // attempt 1's push answers late
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::RESTARTING);
  GrantLease(1, node, 43);
  CreationSucceeds(1);
  EXPECT_EQ(Info(id).state(), rpc::ActorInfo::ALIVE);
  EXPECT_EQ(Info(id).pid(), 43);
}

TEST_F(ActorManagerTest, InfeasibleWaitsWithReasonAndRetriesAfterTheDelay) {
  AddNode(7001, {{"CPU", 4}});
  ActorId id = Register(ActorRequest(0, {{"GPU", 1}}));
  EXPECT_EQ(lease_.num_lease_requests(), 0u);
  rpc::ActorInfo info = Info(id);
  EXPECT_EQ(info.state(), rpc::ActorInfo::PENDING_CREATION);
  EXPECT_TRUE(absl::StrContains(info.pending_reason(), "GPU")) << info.pending_reason();

  TestNode gpu = AddNode(7002, {{"CPU", 4}, {"GPU", 1}});
  actors_.Tick();
  EXPECT_EQ(lease_.num_lease_requests(), 0u);  // the retry delay has not passed
  clock_.Advance(absl::Seconds(1));
  actors_.Tick();
  ASSERT_EQ(lease_.num_lease_requests(), 1u);
  EXPECT_EQ(lease_.lease_request(0).raylet_address, gpu.address);

  // The raylet says infeasible (its view changed): the reason is kept, and it retries later.
  rpc::RequestWorkerLeaseReply infeasible;
  infeasible.set_infeasible(true);
  infeasible.set_failure_message("no node has GPU: 1");
  lease_.ReplyLease(0, infeasible);
  EXPECT_EQ(Info(id).pending_reason(), "no node has GPU: 1");
  actors_.Tick();
  EXPECT_EQ(lease_.num_lease_requests(), 1u);
  clock_.Advance(absl::Seconds(1));
  actors_.Tick();
  EXPECT_EQ(lease_.num_lease_requests(), 2u);
}

TEST_F(ActorManagerTest, InvalidResourcesAreRefusedAtRegistration) {
  AddNode(7001, {{"CPU", 4}});
  for (double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    auto request = ActorRequest(0, {{"GPU", bad}});
    absl::Status status = actors_.RegisterActor(request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "actor.required_resources")) << status;
    rpc::GetActorInfoRequest get;
    get.set_actor_id(request.actor().actor_id());
    EXPECT_EQ(actors_.GetActor(get).status().code(), absl::StatusCode::kNotFound);
  }
  auto unnamed = ActorRequest(0, {{"", 1}});
  EXPECT_EQ(actors_.RegisterActor(unnamed).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease_.num_lease_requests(), 0u);
}

// Dead actors are kept for `troupe list actors` and late callers, but only the last
// max_dead_actors: the oldest deaths are forgotten on the next Tick(), memory and store rows.
TEST_F(ActorManagerTest, ForgetsTheOldestDeadActorsBeyondTheLimit) {
  TestNode node = AddNode(7001, {{"CPU", 8}});
  ActorManager actors({&store_, &publisher_, &nodes_, &clock_, &lease_, &push_},
                      {.max_dead_actors = 2});
  auto register_one = [&](bool named = false) {
    auto request = ActorRequest(0);
    request.mutable_creation_task()->set_task_id(TaskId::FromRandom().Binary());
    if (named) request.mutable_actor()->set_name("kept-name");
    EXPECT_TRUE(actors.RegisterActor(request).ok());
    return request;
  };
  auto id_of = [](const rpc::RegisterActorRequest& r) {
    return *ActorId::FromBinary(r.actor().actor_id());
  };
  auto get = [&](const ActorId& id) {
    rpc::GetActorInfoRequest request;
    request.set_actor_id(id.Binary());
    return actors.GetActor(request);
  };
  auto rows = [&](const char* table) { return ScanTableSync(&store_, table)->size(); };
  std::vector<rpc::RegisterActorRequest> dead;
  for (int i = 0; i < 3; ++i) {
    dead.push_back(register_one());
    clock_.Advance(absl::Seconds(1));
    // Not leased yet: a kill without restart buries it at once.
    ASSERT_TRUE(actors.KillActor(id_of(dead.back()).Binary(), /*no_restart=*/true).ok());
  }
  const auto alive = register_one(/*named=*/true);
  EXPECT_EQ(actors.GetAllActors().size(), 4u);  // forgetting waits for the tick
  EXPECT_EQ(rows("ACTOR_TASK"), 1u);            // a dead actor's creation task goes at once
  // Registering a dead actor again (a retried call) is still recognised as the same actor.
  EXPECT_TRUE(actors.RegisterActor(dead[2]).ok());

  actors.Tick();
  EXPECT_EQ(actors.GetAllActors().size(), 3u);
  auto forgotten = get(id_of(dead[0]));
  EXPECT_EQ(forgotten.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(forgotten.status().message(), "--max-dead-actors"))
      << forgotten.status();
  EXPECT_EQ(get(id_of(dead[1]))->death_cause(), "killed by troupe::Kill");
  EXPECT_EQ(get(id_of(alive))->state(), rpc::ActorInfo::PENDING_CREATION);
  EXPECT_EQ(rows("ACTOR"), 3u);

  // A GCS restarted on the same store keeps the same dead, oldest first out.
  ActorManager restarted({&store_, &publisher_, &nodes_, &clock_, &lease_, &push_},
                         {.max_dead_actors = 1});
  restarted.set_bundle_locator(
      [](const std::string&, int) -> absl::StatusOr<std::pair<std::string, int>> {
        return absl::NotFoundError("no placement groups in this test");
      });
  ASSERT_EQ(restarted.Initialize().value(), 3);
  restarted.Tick();
  EXPECT_EQ(restarted.GetAllActors().size(), 2u);
  google::protobuf::RepeatedPtrField<std::string> ids;
  *ids.Add() = id_of(dead[1]).Binary();
  *ids.Add() = id_of(dead[2]).Binary();
  auto infos = restarted.GetActors(ids);
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_TRUE(absl::StrContains(infos[0].death_cause(), "no record")) << infos[0].death_cause();
  EXPECT_EQ(infos[1].death_cause(), "killed by troupe::Kill");
  EXPECT_EQ(rows("ACTOR"), 2u);
}

TEST_F(ActorManagerTest, AForgottenActorsLateWorkerExitFindsNothing) {
  TestNode node = AddNode(7001, {{"CPU", 4}});
  ActorManager actors({&store_, &publisher_, &nodes_, &clock_, &lease_, &push_},
                      {.max_dead_actors = 0});
  auto request = ActorRequest(/*max_restarts=*/5);
  ASSERT_TRUE(actors.RegisterActor(request).ok());
  std::string worker = GrantLease(0, node, 42);
  rpc::PushTaskReply threw;  // the constructor threw: dead, its worker killed
  threw.add_returns()->set_is_application_error(true);
  push_.Reply(0, threw);
  actors.Tick();
  EXPECT_TRUE(actors.GetAllActors().empty());
  actors.OnWorkerExit(worker, "was killed by signal 9");  // the kill's exit report, late
  actors.Tick();
  EXPECT_TRUE(actors.GetAllActors().empty());
  EXPECT_EQ(lease_.num_lease_requests(), 1u);
  EXPECT_EQ(ScanTableSync(&store_, "ACTOR")->size(), 0u);
}

}  // namespace
}  // namespace troupe
