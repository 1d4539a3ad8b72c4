// Malformed requests at the gRPC boundary: a real head (GCS + raylet) gets requests with bad
// resources, IDs of the wrong size, oversized strings and out-of-range fields over real gRPC
// (raw stubs with the cluster token). Each must be answered INVALID_ARGUMENT naming the field,
// and both daemons must keep running and answering afterwards.
#include <grpcpp/generic/generic_stub.h>
#include <signal.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/gcs.grpc.pb.h"
#include "proto/raylet.grpc.pb.h"
#include "src/common/ids.h"
#include "src/rpc/auth.h"
#include "src/rpc/server.h"
#include "tests/test_cluster.h"

namespace troupe::testing {
namespace {

struct Case {
  std::string name;
  std::function<grpc::Status()> call;
  std::string field;  // the error message must name it
};

class MalformedRequestsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto cluster = TestCluster::Start({"--num-cpus=2"});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = new TestCluster(std::move(*cluster));
    auto nodes = cluster_->gcs().GetAllNodeInfo();
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    ASSERT_EQ(nodes->size(), 1u);
    raylet_address_ = absl::StrCat((*nodes)[0].node_ip(), ":", (*nodes)[0].raylet_port());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  template <typename Stub, typename Request, typename Reply>
  static grpc::Status Call(Stub* stub,
                           grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                        Reply*),
                           const Request& request) {
    grpc::ClientContext context;
    AttachToken(&context, cluster_->token());
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    Reply reply;
    return (stub->*method)(&context, request, &reply);
  }

  static void ExpectAllInvalid(const std::vector<Case>& cases) {
    for (const auto& c : cases) {
      grpc::Status status = c.call();
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << c.name << ": " << status.error_code() << " " << status.error_message();
      EXPECT_TRUE(absl::StrContains(status.error_message(), c.field))
          << c.name << ": '" << status.error_message() << "' does not name " << c.field;
    }
  }

  // Both daemons still answer, and still work.
  static void ExpectDaemonsAlive() {
    EXPECT_GT(cluster_->GcsPid(), 0);
    EXPECT_EQ(kill(cluster_->GcsPid(), 0), 0) << "the GCS process is gone";
    auto info = cluster_->gcs().GetClusterInfo();
    EXPECT_TRUE(info.ok()) << info.status();
    auto nodes = cluster_->gcs().GetAllNodeInfo();
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    ASSERT_EQ(nodes->size(), 1u);
    EXPECT_EQ((*nodes)[0].state(), rpc::NodeInfo::ALIVE);
    auto raylet = rpc::NodeManagerService::NewStub(MakeChannel(raylet_address_));
    EXPECT_TRUE(
        Call(raylet.get(), &rpc::NodeManagerService::Stub::HealthCheck, rpc::HealthCheckRequest())
            .ok());
    auto put = cluster_->gcs().KVPut("malformed_test", "still-works", "yes", true);
    EXPECT_TRUE(put.ok()) << put.status();
  }

  static TestCluster* cluster_;
  static std::string raylet_address_;
};

TestCluster* MalformedRequestsTest::cluster_ = nullptr;
std::string MalformedRequestsTest::raylet_address_;

rpc::RegisterActorRequest ActorWith(const std::string& resource, double amount) {
  rpc::RegisterActorRequest request;
  request.mutable_actor()->set_actor_id(ActorId::FromRandom().Binary());
  (*request.mutable_actor()->mutable_required_resources())[resource] = amount;
  (*request.mutable_creation_task()->mutable_required_resources())[resource] = amount;
  return request;
}

TEST_F(MalformedRequestsTest, GcsRefusesMalformedRequestsAndKeepsServing) {
  auto channel = MakeChannel(cluster_->gcs_address());
  auto actors = rpc::ActorInfoService::NewStub(channel);
  auto groups = rpc::PlacementGroupService::NewStub(channel);
  auto kv = rpc::InternalKVService::NewStub(channel);
  auto nodes = rpc::NodeInfoService::NewStub(channel);
  auto jobs = rpc::JobInfoService::NewStub(channel);
  auto pubsub = rpc::PubSubService::NewStub(channel);
  auto tasks = rpc::TaskInfoService::NewStub(channel);
  using AS = rpc::ActorInfoService::Stub;
  using PS = rpc::PlacementGroupService::Stub;
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();

  std::vector<Case> cases;
  for (double bad : {-1.0, nan, inf, 1e300}) {
    cases.push_back(
        {absl::StrCat("actor GPU=", bad),
         [&, bad] { return Call(actors.get(), &AS::RegisterActor, ActorWith("GPU", bad)); },
         "actor.required_resources['GPU']"});
  }
  cases.push_back({"actor resource without a name",
                   [&] { return Call(actors.get(), &AS::RegisterActor, ActorWith("", 1)); },
                   "actor.required_resources"});
  cases.push_back({"actor id of 3 bytes",
                   [&] {
                     auto request = ActorWith("CPU", 1);
                     request.mutable_actor()->set_actor_id("abc");
                     return Call(actors.get(), &AS::RegisterActor, request);
                   },
                   "actor.actor_id"});
  cases.push_back({"actor name of 1 MiB",
                   [&] {
                     auto request = ActorWith("CPU", 1);
                     request.mutable_actor()->set_name(std::string(1 << 20, 'n'));
                     return Call(actors.get(), &AS::RegisterActor, request);
                   },
                   "actor.name"});
  cases.push_back({"actor name with a terminal escape",
                   [&] {
                     auto request = ActorWith("CPU", 1);
                     request.mutable_actor()->set_name("\x1b[2Jgotcha");
                     return Call(actors.get(), &AS::RegisterActor, request);
                   },
                   "actor.name"});
  cases.push_back({"actor registered as already running in some worker",
                   [&] {
                     auto request = ActorWith("CPU", 1);
                     request.mutable_actor()->set_state(rpc::ActorInfo::ALIVE);
                     request.mutable_actor()->set_worker_id(WorkerId::FromRandom().Binary());
                     return Call(actors.get(), &AS::RegisterActor, request);
                   },
                   "actor.state"});
  cases.push_back({"actor exit reported without the reporting worker",
                   [&] {
                     rpc::ReportActorExitRequest request;
                     request.set_actor_id(ActorId::FromRandom().Binary());
                     return Call(actors.get(), &AS::ReportActorExit, request);
                   },
                   "worker_id"});
  cases.push_back({"placement group name with a terminal escape",
                   [&] {
                     rpc::CreatePlacementGroupRequest request;
                     auto* group = request.mutable_placement_group();
                     group->set_placement_group_id(PlacementGroupId::FromRandom().Binary());
                     group->set_name("pg\x07\x1b]0;title\x07");
                     (*group->add_bundles()->mutable_resources())["CPU"] = 1;
                     return Call(groups.get(), &PS::CreatePlacementGroup, request);
                   },
                   "placement_group.name"});
  cases.push_back({"placement group created as already placed",
                   [&] {
                     rpc::CreatePlacementGroupRequest request;
                     auto* group = request.mutable_placement_group();
                     group->set_placement_group_id(PlacementGroupId::FromRandom().Binary());
                     rpc::Bundle* bundle = group->add_bundles();
                     (*bundle->mutable_resources())["CPU"] = 1;
                     bundle->set_node_id(NodeId::FromRandom().Binary());
                     bundle->set_raylet_address("10.9.9.9:1");
                     return Call(groups.get(), &PS::CreatePlacementGroup, request);
                   },
                   "placement_group.bundles[0].node_id"});
  cases.push_back({"kill without an actor id",
                   [&] { return Call(actors.get(), &AS::KillActor, rpc::KillActorRequest()); },
                   "actor_id"});
  cases.push_back({"placement group bundle CPU=inf",
                   [&] {
                     rpc::CreatePlacementGroupRequest request;
                     auto* group = request.mutable_placement_group();
                     group->set_placement_group_id(PlacementGroupId::FromRandom().Binary());
                     (*group->add_bundles()->mutable_resources())["CPU"] = inf;
                     return Call(groups.get(), &PS::CreatePlacementGroup, request);
                   },
                   "placement_group.bundles[0].resources['CPU']"});
  cases.push_back({"placement group with an unknown strategy",
                   [&] {
                     rpc::CreatePlacementGroupRequest request;
                     auto* group = request.mutable_placement_group();
                     group->set_placement_group_id(PlacementGroupId::FromRandom().Binary());
                     group->set_strategy(static_cast<rpc::PlacementGroupInfo::Strategy>(17));
                     (*group->add_bundles()->mutable_resources())["CPU"] = 1;
                     return Call(groups.get(), &PS::CreatePlacementGroup, request);
                   },
                   "placement_group.strategy"});
  cases.push_back({"wait with a negative timeout",
                   [&] {
                     rpc::WaitPlacementGroupUntilReadyRequest request;
                     request.set_placement_group_id(PlacementGroupId::FromRandom().Binary());
                     request.set_timeout_ms(-1);
                     return Call(groups.get(), &PS::WaitPlacementGroupUntilReady, request);
                   },
                   "timeout_ms"});
  cases.push_back({"KV key of 100 KiB",
                   [&] {
                     rpc::KVPutRequest request;
                     request.set_namespace_name("ns");
                     request.set_key(std::string(100 << 10, 'k'));
                     request.set_value("v");
                     return Call(kv.get(), &rpc::InternalKVService::Stub::KVPut, request);
                   },
                   "key"});
  cases.push_back({"KV namespace of 5000 bytes",
                   [&] {
                     rpc::KVGetRequest request;
                     request.set_namespace_name(std::string(5000, 's'));
                     request.set_key("k");
                     return Call(kv.get(), &rpc::InternalKVService::Stub::KVGet, request);
                   },
                   "namespace_name"});
  cases.push_back({"resource report from a 2-byte node id",
                   [&] {
                     rpc::ReportResourceUsageRequest request;
                     request.mutable_usage()->set_node_id("ab");
                     return Call(nodes.get(), &rpc::NodeInfoService::Stub::ReportResourceUsage,
                                 request);
                   },
                   "usage.node_id"});
  cases.push_back({"node registering negative CPUs",
                   [&] {
                     rpc::RegisterNodeRequest request;
                     request.mutable_node()->set_node_id(NodeId::FromRandom().Binary());
                     request.mutable_node()->set_node_ip("127.0.0.1");
                     request.mutable_node()->set_raylet_port(1);
                     (*request.mutable_node()->mutable_resources_total())["CPU"] = -4;
                     return Call(nodes.get(), &rpc::NodeInfoService::Stub::RegisterNode, request);
                   },
                   "node.resources_total['CPU']"});
  cases.push_back({"finish a job with a 9-byte id",
                   [&] {
                     rpc::MarkJobFinishedRequest request;
                     request.set_job_id("123456789");
                     return Call(jobs.get(), &rpc::JobInfoService::Stub::MarkJobFinished, request);
                   },
                   "job_id"});
  cases.push_back({"poll an unknown channel",
                   [&] {
                     rpc::PollRequest request;
                     request.add_channels(static_cast<rpc::Channel>(99));
                     return Call(pubsub.get(), &rpc::PubSubService::Stub::Poll, request);
                   },
                   "channels[0]"});
  cases.push_back({"task event with a 3-byte task id",
                   [&] {
                     rpc::AddTaskEventDataRequest request;
                     rpc::TaskEvent* event = request.add_events();
                     event->set_task_id("abc");
                     event->set_job_id(JobId::FromInt(1).Binary());
                     return Call(tasks.get(), &rpc::TaskInfoService::Stub::AddTaskEventData,
                                 request);
                   },
                   "events[0].task_id"});
  cases.push_back({"task events with a negative limit",
                   [&] {
                     rpc::GetTaskEventsRequest request;
                     request.set_limit(-1);
                     return Call(tasks.get(), &rpc::TaskInfoService::Stub::GetTaskEvents, request);
                   },
                   "limit"});
  ExpectAllInvalid(cases);
  ExpectDaemonsAlive();

  // A well-formed group is still placed, and the long poll reports it ready.
  PlacementGroupId id = PlacementGroupId::FromRandom();
  rpc::PlacementGroupInfo group;
  group.set_placement_group_id(id.Binary());
  (*group.add_bundles()->mutable_resources())["CPU"] = 1;
  ASSERT_TRUE(cluster_->gcs().CreatePlacementGroup(group).ok());
  auto ready =
      cluster_->gcs().WaitPlacementGroupUntilReady(id.Binary(), absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(*ready);
  auto unknown = cluster_->gcs().WaitPlacementGroupUntilReady(
      PlacementGroupId::FromRandom().Binary(), absl::Now() + absl::Seconds(1));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  ASSERT_TRUE(cluster_->gcs().RemovePlacementGroup(id.Binary()).ok());
  auto removed =
      cluster_->gcs().WaitPlacementGroupUntilReady(id.Binary(), absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_FALSE(*removed);
}

// ReportResourceUsage is served raw (bytes in, bytes out): bytes that are no request at all
// are refused naming the message, and the GCS keeps serving.
TEST_F(MalformedRequestsTest, GcsRefusesAResourceReportThatDoesNotParse) {
  grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer> stub(
      MakeChannel(cluster_->gcs_address()));
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f";  // field 1, 4 GiB long, then nothing
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::ClientContext context;
  AttachToken(&context, cluster_->token());
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(
      &context,
      absl::StrCat("/", rpc::NodeInfoService::service_full_name(), "/ReportResourceUsage"),
      grpc::StubOptions(), &request, &reply, [&](grpc::Status result) {
        status = std::move(result);
        done.Notify();
      });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "ReportResourceUsageRequest"))
      << status.error_message();
  ExpectDaemonsAlive();
}

TEST_F(MalformedRequestsTest, RayletRefusesMalformedRequestsAndKeepsServing) {
  auto raylet = rpc::NodeManagerService::NewStub(MakeChannel(raylet_address_));
  using NS = rpc::NodeManagerService::Stub;
  auto lease_with = [](const std::string& resource, double amount) {
    rpc::RequestWorkerLeaseRequest request;
    (*request.mutable_resource_spec()->mutable_required_resources())[resource] = amount;
    return request;
  };
  std::vector<Case> cases;
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    cases.push_back(
        {absl::StrCat("lease CPU=", bad),
         [&, bad] { return Call(raylet.get(), &NS::RequestWorkerLease, lease_with("CPU", bad)); },
         "resource_spec.required_resources['CPU']"});
  }
  cases.push_back({"lease of an unnamed resource",
                   [&] { return Call(raylet.get(), &NS::RequestWorkerLease, lease_with("", 1)); },
                   "resource_spec.required_resources"});
  cases.push_back({"lease in a 5-byte placement group",
                   [&] {
                     auto request = lease_with("CPU", 1);
                     request.mutable_resource_spec()->set_placement_group_id("short");
                     return Call(raylet.get(), &NS::RequestWorkerLease, request);
                   },
                   "resource_spec.placement_group_id"});
  cases.push_back({"return a 1-byte lease",
                   [&] {
                     rpc::ReturnWorkerRequest request;
                     request.set_lease_id("x");
                     return Call(raylet.get(), &NS::ReturnWorker, request);
                   },
                   "lease_id"});
  cases.push_back({"get a 4-byte object",
                   [&] {
                     rpc::GetObjectsRequest request;
                     request.add_object_ids("nope");
                     return Call(raylet.get(), &NS::GetObjects, request);
                   },
                   "object_ids[0]"});
  cases.push_back({"create an object of size -1",
                   [&] {
                     rpc::CreateObjectRequest request;
                     request.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
                     request.set_size(-1);
                     return Call(raylet.get(), &NS::CreateObject, request);
                   },
                   "size"});
  cases.push_back({"register a worker with a short id",
                   [&] {
                     rpc::RegisterWorkerRequest request;
                     request.set_worker_id("w");
                     request.set_job_id(JobId::FromInt(1).Binary());
                     request.set_pid(1);
                     return Call(raylet.get(), &NS::RegisterWorker, request);
                   },
                   "worker_id"});
  cases.push_back({"fetch from 200,000 copies",
                   [&] {
                     rpc::FetchObjectRequest request;
                     request.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
                     request.set_from_raylet_address("127.0.0.1:1");
                     for (int i = 0; i < 200000; ++i) {
                       request.add_other_raylet_addresses("127.0.0.1:1");
                     }
                     return Call(raylet.get(), &NS::FetchObject, request);
                   },
                   "at most 64"});
  // The object manager's service (node-to-node transfer) on the same port.
  auto objects = rpc::ObjectManagerService::NewStub(MakeChannel(raylet_address_));
  cases.push_back({"free a 2-byte object",
                   [&] {
                     rpc::FreeObjectsRequest request;
                     request.add_object_ids("no");
                     return Call(objects.get(), &rpc::ObjectManagerService::Stub::FreeObjects,
                                 request);
                   },
                   "object_ids[0]"});
  cases.push_back({"pull with a negative chunk size",
                   [&] {
                     rpc::PullObjectRequest request;
                     request.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
                     request.set_chunk_size(-5);
                     grpc::ClientContext context;
                     AttachToken(&context, cluster_->token());
                     context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
                     auto reader = objects->PullObject(&context, request);
                     rpc::ObjectChunk chunk;
                     while (reader->Read(&chunk)) {
                     }
                     return reader->Finish();
                   },
                   "chunk_size"});
  ExpectAllInvalid(cases);
  ExpectDaemonsAlive();
}

}  // namespace
}  // namespace troupe::testing
