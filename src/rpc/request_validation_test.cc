#include "src/rpc/request_validation.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/ids.h"

namespace troupe {
namespace {

// INVALID_ARGUMENT whose message names `field` (and, if given, contains `also`).
void ExpectInvalid(const absl::Status& status, const std::string& field,
                   const std::string& also = "") {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), field)) << status;
  if (!also.empty()) {
    EXPECT_TRUE(absl::StrContains(status.message(), also)) << status;
  }
}

rpc::RegisterActorRequest ValidActor() {
  rpc::RegisterActorRequest request;
  request.mutable_actor()->set_actor_id(ActorId::FromRandom().Binary());
  request.mutable_actor()->set_job_id(JobId::FromInt(1).Binary());
  (*request.mutable_actor()->mutable_required_resources())["GPU"] = 0.5;
  (*request.mutable_creation_task()->mutable_required_resources())["CPU"] = 1;
  return request;
}

TEST(RequestValidationTest, ValidActorPasses) { EXPECT_TRUE(ValidateRequest(ValidActor()).ok()); }

TEST(RequestValidationTest, ActorResourcesMustBeFiniteNonNegativeAndNamed) {
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e300}) {
    auto request = ValidActor();
    (*request.mutable_actor()->mutable_required_resources())["GPU"] = bad;
    ExpectInvalid(ValidateRequest(request), "actor.required_resources['GPU']", ">= 0");
  }
  auto unnamed = ValidActor();
  (*unnamed.mutable_actor()->mutable_required_resources())[""] = 1;
  ExpectInvalid(ValidateRequest(unnamed), "actor.required_resources", "empty name");
  auto long_name = ValidActor();
  (*long_name.mutable_creation_task()->mutable_required_resources())[std::string(300, 'x')] = 1;
  ExpectInvalid(ValidateRequest(long_name), "creation_task.required_resources", "256");
}

TEST(RequestValidationTest, IdsMustHaveTheirSize) {
  auto request = ValidActor();
  request.mutable_actor()->set_actor_id("abc");
  ExpectInvalid(ValidateRequest(request), "actor.actor_id", "16 bytes");
  rpc::KillActorRequest kill;
  ExpectInvalid(ValidateRequest(kill), "actor_id", "got 0");
  rpc::GetActorInfoRequest by_name;  // an ID is optional here
  by_name.set_name("counter");
  EXPECT_TRUE(ValidateRequest(by_name).ok());
  by_name.set_actor_id("x");
  ExpectInvalid(ValidateRequest(by_name), "actor_id", "or leave it empty");
  rpc::GetAllActorInfoRequest some;
  EXPECT_TRUE(ValidateRequest(some).ok());  // no IDs: every actor
  some.add_actor_ids(ActorId::FromRandom().Binary());
  EXPECT_TRUE(ValidateRequest(some).ok());
  some.add_actor_ids("short");
  ExpectInvalid(ValidateRequest(some), "actor_ids[1]", "16 bytes");
}

TEST(RequestValidationTest, PlacementGroupNeedsBoundedValidBundles) {
  rpc::CreatePlacementGroupRequest request;
  auto* group = request.mutable_placement_group();
  group->set_placement_group_id(PlacementGroupId::FromRandom().Binary());
  ExpectInvalid(ValidateRequest(request), "placement_group.bundles", "empty");
  (*group->add_bundles()->mutable_resources())["CPU"] = 1;
  EXPECT_TRUE(ValidateRequest(request).ok());
  (*group->add_bundles()->mutable_resources())["CPU"] = -2;
  ExpectInvalid(ValidateRequest(request), "placement_group.bundles[1].resources['CPU']");
  group->mutable_bundles(1)->mutable_resources()->at("CPU") = 2;
  group->mutable_bundles(1)->mutable_label_selector()->add_constraints()->set_key("");
  ExpectInvalid(ValidateRequest(request), "placement_group.bundles[1].label_selector", "key");
  group->mutable_bundles(1)->clear_label_selector();
  group->set_strategy(static_cast<rpc::PlacementGroupInfo::Strategy>(42));
  ExpectInvalid(ValidateRequest(request), "placement_group.strategy", "STRICT_PACK");
}

TEST(RequestValidationTest, KvKeysAndValuesAreBounded) {
  rpc::KVPutRequest put;
  put.set_namespace_name("default");
  put.set_key("k");
  put.set_value(std::string(1 << 20, 'v'));  // packages and executables are large: fine
  EXPECT_TRUE(ValidateRequest(put).ok());
  put.set_key(std::string(RequestLimits::kMaxKvKeyBytes + 1, 'k'));
  ExpectInvalid(ValidateRequest(put), "key", "at most 65536 bytes");
  rpc::KVKeysRequest keys;
  keys.set_namespace_name(std::string(RequestLimits::kMaxNameBytes + 1, 'n'));
  ExpectInvalid(ValidateRequest(keys), "namespace_name", "at most 4096 bytes");
}

TEST(RequestValidationTest, LeaseRequestChecksTheResourceSpec) {
  rpc::RequestWorkerLeaseRequest lease;
  (*lease.mutable_resource_spec()->mutable_required_resources())["CPU"] = 1;
  lease.mutable_resource_spec()->set_job_id(JobId::FromInt(3).Binary());
  EXPECT_TRUE(ValidateRequest(lease).ok());
  (*lease.mutable_resource_spec()->mutable_required_resources())["GPU"] = -0.5;
  ExpectInvalid(ValidateRequest(lease), "resource_spec.required_resources['GPU']");
  lease.mutable_resource_spec()->mutable_required_resources()->at("GPU") = 0.25;
  lease.mutable_resource_spec()->set_placement_group_id("short");
  ExpectInvalid(ValidateRequest(lease), "resource_spec.placement_group_id", "PlacementGroupId");
  lease.mutable_resource_spec()->clear_placement_group_id();
  lease.mutable_resource_spec()->set_bundle_index(-7);
  ExpectInvalid(ValidateRequest(lease), "resource_spec.bundle_index");
  lease.mutable_resource_spec()->set_bundle_index(0);
  // A label selector from the wire: an IN without values is refused, not matched.
  rpc::LabelConstraint* in = lease.mutable_resource_spec()
                                 ->mutable_strategy()
                                 ->mutable_label_selector()
                                 ->add_constraints();
  in->set_key("zone");
  in->set_op(rpc::LabelConstraint::IN);
  ExpectInvalid(ValidateRequest(lease), "resource_spec.strategy.label_selector.constraints[0]",
                "IN and NOT_IN 1 to");
  in->add_values("a");
  EXPECT_TRUE(ValidateRequest(lease).ok());
}

TEST(RequestValidationTest, RayletObjectRequests) {
  rpc::GetObjectsRequest get;
  get.add_object_ids(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  EXPECT_TRUE(ValidateRequest(get).ok());
  get.add_object_ids("nope");
  ExpectInvalid(ValidateRequest(get), "object_ids[1]", "ObjectId");
  rpc::CreateObjectRequest create;
  create.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  create.set_size(-1);
  ExpectInvalid(ValidateRequest(create), "size", ">= 0");
  rpc::ReturnWorkerRequest give_back;
  give_back.set_lease_id("x");
  ExpectInvalid(ValidateRequest(give_back), "lease_id", "LeaseId");
}

TEST(RequestValidationTest, AFetchNamesAtMostTheCapOfSources) {
  rpc::FetchObjectRequest fetch;
  fetch.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  fetch.set_from_raylet_address("10.0.0.1:7000");
  for (int i = 1; i < RequestLimits::kMaxFetchSources; ++i) {
    fetch.add_other_raylet_addresses(absl::StrCat("10.0.1.", i, ":7000"));
  }
  EXPECT_TRUE(ValidateRequest(fetch).ok());
  fetch.add_other_raylet_addresses("10.0.2.1:7000");  // one past the cap
  ExpectInvalid(ValidateRequest(fetch), "other_raylet_addresses", "at most 64");
  // 200,000 sources: refused at once, naming the count.
  for (int i = 0; i < 200000; ++i) fetch.add_other_raylet_addresses("10.0.3.1:7000");
  ExpectInvalid(ValidateRequest(fetch), "other_raylet_addresses", "names 200065 copies");
}

TEST(RequestValidationTest, NodeRegistrationAndReports) {
  rpc::RegisterNodeRequest node;
  node.mutable_node()->set_node_id(NodeId::FromRandom().Binary());
  node.mutable_node()->set_node_ip("127.0.0.1");
  node.mutable_node()->set_raylet_port(7000);
  (*node.mutable_node()->mutable_resources_total())["CPU"] = 8;
  EXPECT_TRUE(ValidateRequest(node).ok());
  node.mutable_node()->set_raylet_port(70000);
  ExpectInvalid(ValidateRequest(node), "node.raylet_port", "65535");
  rpc::ReportResourceUsageRequest usage;
  usage.mutable_usage()->set_node_id(NodeId::FromRandom().Binary());
  (*usage.mutable_usage()->mutable_available())["memory"] = -1;
  ExpectInvalid(ValidateRequest(usage), "usage.available['memory']");
}

TEST(RequestValidationTest, WaitPlacementGroupAndPoll) {
  rpc::WaitPlacementGroupUntilReadyRequest wait;
  wait.set_placement_group_id(PlacementGroupId::FromRandom().Binary());
  wait.set_timeout_ms(-5);
  ExpectInvalid(ValidateRequest(wait), "timeout_ms", ">= 0");
  rpc::PollRequest poll;
  poll.add_channels(static_cast<rpc::Channel>(99));
  ExpectInvalid(ValidateRequest(poll), "channels[0]");
}

TEST(RequestValidationTest, ObjectManagerRequests) {
  const std::string object = ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary();
  rpc::PullObjectRequest pull;
  pull.set_object_id(object);
  EXPECT_TRUE(ValidateRequest(pull).ok());
  pull.set_chunk_size(-1);
  ExpectInvalid(ValidateRequest(pull), "chunk_size", "allowed");
  pull.set_chunk_size(int64_t{1} << 40);
  ExpectInvalid(ValidateRequest(pull), "chunk_size");
  pull.set_chunk_size(0);
  pull.set_object_id("abc");
  ExpectInvalid(ValidateRequest(pull), "object_id");

  rpc::FreeObjectsRequest free;
  free.add_object_ids(object);
  EXPECT_TRUE(ValidateRequest(free).ok());
  free.add_object_ids("short");
  ExpectInvalid(ValidateRequest(free), "object_ids[1]");
}

TEST(RequestValidationTest, CoreWorkerRequests) {
  rpc::PushTaskRequest push;
  push.mutable_task()->set_task_id(TaskId::FromRandom().Binary());
  rpc::TaskArg* by_value = push.mutable_task()->add_args();
  by_value->set_inline_value("\x01");
  rpc::TaskArg* by_reference = push.mutable_task()->add_args();
  by_reference->set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  by_reference->set_owner_address("127.0.0.1:1234");
  EXPECT_TRUE(ValidateRequest(push).ok());
  by_reference->set_object_id("bad");  // a worker would look this object up
  ExpectInvalid(ValidateRequest(push), "task.args[1].object_id");
  by_reference->set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  by_reference->clear_owner_address();
  ExpectInvalid(ValidateRequest(push), "task.args[1].owner_address");
  push.mutable_task()->clear_args();
  push.mutable_task()->clear_task_id();
  ExpectInvalid(ValidateRequest(push), "task.task_id");
  push.mutable_task()->set_task_id(TaskId::FromRandom().Binary());
  push.mutable_task()->set_actor_id("tiny");
  ExpectInvalid(ValidateRequest(push), "task.actor_id");
  push.mutable_task()->clear_actor_id();
  push.set_lease_sequence(-1);
  ExpectInvalid(ValidateRequest(push), "lease_sequence");
  push.set_lease_sequence(std::numeric_limits<int64_t>::max());
  ExpectInvalid(ValidateRequest(push), "lease_sequence");
  push.set_lease_sequence(7);
  EXPECT_TRUE(ValidateRequest(push).ok());

  push.mutable_task()->clear_actor_id();
  rpc::PushTasksRequest batch;
  ExpectInvalid(ValidateRequest(batch), "pushes", "empty");
  *batch.add_pushes() = push;
  EXPECT_TRUE(ValidateRequest(batch).ok()) << ValidateRequest(batch);
  *batch.add_pushes() = push;
  batch.mutable_pushes(1)->mutable_task()->clear_task_id();
  ExpectInvalid(ValidateRequest(batch), "pushes[1]: task.task_id");
  batch.mutable_pushes(1)->mutable_task()->set_task_id(TaskId::FromRandom().Binary());
  batch.mutable_pushes(1)->mutable_task()->set_type(rpc::TaskSpec::ACTOR_TASK);
  ExpectInvalid(ValidateRequest(batch), "pushes[1].task.type", "differs");
  // One caller's calls to one actor go together too; an actor's creation never does.
  for (auto& each : *batch.mutable_pushes()) {
    each.mutable_task()->set_type(rpc::TaskSpec::ACTOR_TASK);
    each.mutable_task()->set_actor_id(ActorId::FromRandom().Binary());
  }
  EXPECT_TRUE(ValidateRequest(batch).ok()) << ValidateRequest(batch);
  for (auto& each : *batch.mutable_pushes()) {
    each.mutable_task()->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
  }
  ExpectInvalid(ValidateRequest(batch), "pushes[0].task.type", "NORMAL_TASK");

  rpc::GetObjectStatusRequest status;
  status.set_object_id("x");
  ExpectInvalid(ValidateRequest(status), "object_id");
  status.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  status.add_lost_copy_raylet_addresses(std::string(5000, 'a'));
  ExpectInvalid(ValidateRequest(status), "lost_copy_raylet_addresses[0]");
  status.set_lost_copy_raylet_addresses(0, "127.0.0.1:1");
  EXPECT_TRUE(ValidateRequest(status).ok());
  rpc::AddObjectLocationRequest location;
  location.set_object_id(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  ExpectInvalid(ValidateRequest(location), "raylet_address");
  rpc::AddBorrowersRequest borrowers;
  borrowers.add_object_ids(ObjectId::FromIndex(TaskId::FromRandom(), 1).Binary());
  ExpectInvalid(ValidateRequest(borrowers), "borrower_address");
  borrowers.set_borrower_address("127.0.0.1:1");
  EXPECT_TRUE(ValidateRequest(borrowers).ok());
  rpc::RemoveBorrowersRequest remove;
  remove.add_object_ids("no");
  remove.set_borrower_address("127.0.0.1:1");
  ExpectInvalid(ValidateRequest(remove), "object_ids[0]");
  rpc::CancelTaskRequest cancel;
  cancel.set_task_id("short");
  ExpectInvalid(ValidateRequest(cancel), "task_id");
  cancel.set_task_id(TaskId::FromRandom().Binary());
  EXPECT_TRUE(ValidateRequest(cancel).ok());
  // A streaming generator's item (issue 34 item 3): numbered from 1, naming a valid object.
  rpc::ReportStreamItemRequest item;
  const TaskId stream = TaskId::FromRandom();
  item.set_task_id(stream.Binary());
  item.set_index(1);
  item.mutable_item()->set_object_id(ObjectId::FromIndex(stream, 2).Binary());
  EXPECT_TRUE(ValidateRequest(item).ok());
  auto unnumbered = item;
  unnumbered.set_index(0);
  ExpectInvalid(ValidateRequest(unnumbered), "index");
  auto nameless = item;
  nameless.mutable_item()->set_object_id("x");
  ExpectInvalid(ValidateRequest(nameless), "item.object_id");
}

TEST(RequestValidationTest, CertificateRequestsNeedACsrAndPlainAddresses) {
  rpc::IssueNodeCertificateRequest request;
  request.set_csr_pem("-----BEGIN CERTIFICATE REQUEST-----");
  request.add_addresses("10.0.0.2");
  EXPECT_TRUE(ValidateRequest(request).ok());
  auto no_csr = request;
  no_csr.clear_csr_pem();
  ExpectInvalid(ValidateRequest(no_csr), "csr_pem");
  auto no_address = request;
  no_address.clear_addresses();
  ExpectInvalid(ValidateRequest(no_address), "addresses");
  for (const char* bad : {"", "a,b", "IP:1.2.3.4", "x y"}) {
    auto injected = request;
    injected.add_addresses(bad);
    ExpectInvalid(ValidateRequest(injected), "addresses");
  }
}

}  // namespace
}  // namespace troupe
