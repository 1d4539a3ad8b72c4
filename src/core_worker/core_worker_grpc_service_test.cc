// The CoreWorkerService glue serves every method proto/worker.proto declares: a declared method
// left to gRPC's default answers UNIMPLEMENTED, which callers would only find out at run time
// (KillActor was such a method until it was removed from the contract).
#include "src/core_worker/core_worker_grpc_service.h"

#include <grpcpp/generic/generic_stub.h>

#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "src/rpc/core_worker_client.h"

namespace troupe {
namespace {

TEST(CoreWorkerGrpcServiceTest, EveryDeclaredMethodIsImplemented) {
  const TokenAuthenticator auth(ClusterToken::Generate(ClusterId::FromRandom()));
  // Calls without the token stop at the token check, so no executor or object service is needed.
  CoreWorkerGrpcService service(&auth, /*executor=*/nullptr, /*objects=*/nullptr);
  int port = 0;
  auto server = StartGrpcServer("127.0.0.1", 0, {&service}, &port);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const google::protobuf::ServiceDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          rpc::CoreWorkerService::service_full_name());
  ASSERT_NE(descriptor, nullptr);
  ASSERT_GT(descriptor->method_count(), 0);
  for (int i = 0; i < descriptor->method_count(); ++i) {
    const std::string method =
        absl::StrCat("/", descriptor->full_name(), "/", descriptor->method(i)->name());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::ByteBuffer request, reply;
    grpc::Slice empty("");
    request = grpc::ByteBuffer(&empty, 1);
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method << " answered " << status.error_code() << ": " << status.error_message();
  }
  (*server)->Shutdown();
}

rpc::PushTaskRequest NormalTask(const std::string& name) {
  rpc::PushTaskRequest push;
  push.mutable_task()->set_task_id(TaskId::FromRandom().Binary());
  push.mutable_task()->set_function_name(name);
  push.mutable_task()->set_type(rpc::TaskSpec::NORMAL_TASK);
  return push;
}

// A worker's service over real gRPC with an executor whose tasks answer with their function
// name (as the reply's worker_address); a task named "block" waits for `unblock`.
class PushTasksTest : public ::testing::Test {
 protected:
  PushTasksTest()
      : token_(ClusterToken::Generate(ClusterId::FromRandom())),
        auth_(token_),
        executor_([this](const rpc::PushTaskRequest& request) {
          if (request.task().function_name() == "block") {
            started_block_.Notify();
            unblock_.WaitForNotification();
          }
          {
            absl::MutexLock lock(&ran_mu_);
            ran_.push_back(request.task().function_name());
          }
          rpc::PushTaskReply reply;
          reply.set_worker_address(request.task().function_name());
          return reply;
        }),
        service_(&auth_, &executor_, /*objects=*/nullptr) {
    int port = 0;
    auto server = StartGrpcServer("127.0.0.1", 0, {&service_}, &port);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ =
        std::make_shared<CoreWorkerClient>(absl::StrCat("127.0.0.1:", port), token_.ToString());
    loop_ = std::thread([this] { executor_.RunLoop(); });
  }
  ~PushTasksTest() override {
    if (!unblock_.HasBeenNotified()) unblock_.Notify();
    executor_.Shutdown();
    server_->Shutdown();
    loop_.join();
  }
  // Pushes `names` in one call; returns each index's outcome once all have arrived.
  struct Collected {
    std::map<size_t, absl::StatusOr<rpc::PushTaskReply>> outcomes;
    size_t expected = 0;
    bool Done() const { return outcomes.size() == expected; }
  };
  std::map<size_t, absl::StatusOr<rpc::PushTaskReply>> PushAll(
      const std::vector<std::string>& names, const std::function<void()>& meanwhile = {}) {
    rpc::PushTasksRequest request;
    for (const auto& name : names) *request.add_pushes() = NormalTask(name);
    absl::Mutex mu;
    Collected collected;
    collected.expected = names.size();
    client_->PushTasksAsync(std::move(request), [&](CoreWorkerClient::PushResults results) {
      absl::MutexLock lock(&mu);
      for (auto& [index, reply] : results) {
        EXPECT_TRUE(collected.outcomes.emplace(index, std::move(reply)).second) << index;
      }
    });
    if (meanwhile) meanwhile();
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&collected, &Collected::Done));
    return std::move(collected.outcomes);
  }

  absl::Mutex ran_mu_;
  std::vector<std::string> ran_ ABSL_GUARDED_BY(ran_mu_);  // function names, as run
  ClusterToken token_;
  TokenAuthenticator auth_;
  absl::Notification started_block_, unblock_;
  TaskExecutor executor_;
  CoreWorkerGrpcService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<CoreWorkerClient> client_;
  std::thread loop_;
};

TEST_F(PushTasksTest, EveryTaskOfABatchRunsInOrderAndGetsItsOwnReply) {
  auto outcomes = PushAll({"a", "b", "c"});
  ASSERT_EQ(outcomes.size(), 3u);
  const char* names[] = {"a", "b", "c"};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(outcomes.at(i).ok()) << outcomes.at(i).status();
    EXPECT_EQ(outcomes.at(i)->worker_address(), names[i]);
  }
}

TEST_F(PushTasksTest, AResultDoesNotWaitForTheRestOfItsBatch) {
  rpc::PushTasksRequest request;
  *request.add_pushes() = NormalTask("first");
  *request.add_pushes() = NormalTask("block");
  // Shared with the callback, which may still run (for "block") after the test body returns.
  struct FirstResult {
    absl::Mutex mu;
    std::optional<absl::StatusOr<rpc::PushTaskReply>> reply ABSL_GUARDED_BY(mu);
  };
  auto first = std::make_shared<FirstResult>();
  client_->PushTasksAsync(std::move(request), [first](CoreWorkerClient::PushResults results) {
    absl::MutexLock lock(&first->mu);
    for (auto& [index, reply] : results) {
      if (index == 0) first->reply = std::move(reply);
    }
  });
  // "block" runs until the fixture ends: the first task's result must arrive meanwhile. A
  // service that answered a batch only once all of it ran would never answer "first" here.
  ASSERT_TRUE(started_block_.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the batch's second task never started";
  absl::MutexLock lock(&first->mu);
  const bool answered = first->mu.AwaitWithTimeout(
      absl::Condition(
          +[](std::optional<absl::StatusOr<rpc::PushTaskReply>>* r) { return r->has_value(); },
          &first->reply),
      absl::Seconds(30));
  ASSERT_TRUE(answered) << "the first task's result waited for the rest of its batch";
  ASSERT_TRUE(first->reply->ok()) << first->reply->status();
  EXPECT_EQ((*first->reply)->worker_address(), "first");
}

TEST_F(PushTasksTest, TasksAWorkerLeavingWillNotRunFailOnTheirOwn) {
  auto outcomes = PushAll({"done", "block", "queued"}, [this] {
    started_block_.WaitForNotification();
    // The worker exits while "block" runs: "queued" never runs; "block" still answers.
    executor_.Shutdown();
    unblock_.Notify();
  });
  ASSERT_TRUE(outcomes.at(0).ok());
  EXPECT_EQ(outcomes.at(0)->worker_address(), "done");
  ASSERT_TRUE(outcomes.at(1).ok()) << outcomes.at(1).status();
  EXPECT_EQ(outcomes.at(2).status().code(), absl::StatusCode::kUnavailable)
      << outcomes.at(2).status();
}

TEST_F(PushTasksTest, TasksWithoutAResultWhenTheStreamBreaksGetItsError) {
  std::thread shutdown;
  auto outcomes = PushAll({"done", "block", "queued"}, [&] {
    started_block_.WaitForNotification();
    // The server goes away mid-batch (as with a dying worker): its calls are cancelled.
    shutdown = std::thread([this] {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    });
  });
  ASSERT_TRUE(outcomes.at(0).ok()) << outcomes.at(0).status();
  EXPECT_FALSE(outcomes.at(1).ok());
  EXPECT_FALSE(outcomes.at(2).ok());
  EXPECT_EQ(outcomes.at(1).status(), outcomes.at(2).status());
  unblock_.Notify();
  executor_.Shutdown();  // answers the rest, so the server's shutdown can end
  shutdown.join();
}

TEST_F(PushTasksTest, ABatchWithAnActorCallIsRefusedForEveryTask) {
  rpc::PushTasksRequest request;
  *request.add_pushes() = NormalTask("a");
  rpc::PushTaskRequest actor_call = NormalTask("b");
  actor_call.mutable_task()->set_type(rpc::TaskSpec::ACTOR_TASK);
  *request.add_pushes() = actor_call;
  absl::Mutex mu;
  std::map<size_t, absl::Status> outcomes;
  client_->PushTasksAsync(std::move(request), [&](CoreWorkerClient::PushResults results) {
    absl::MutexLock lock(&mu);
    for (auto& [index, reply] : results) outcomes[index] = reply.status();
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](std::map<size_t, absl::Status>* o) { return o->size() == 2; }, &outcomes));
  for (const auto& [index, status] : outcomes) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << index << ": " << status;
  }
}

rpc::PushTaskRequest ActorCall(const std::string& name, int64_t seq) {
  rpc::PushTaskRequest push = NormalTask(name);
  push.mutable_task()->set_type(rpc::TaskSpec::ACTOR_TASK);
  push.mutable_task()->set_actor_id(ActorId::FromRandom().Binary());
  static const std::string caller = WorkerId::FromRandom().Binary();
  push.mutable_task()->set_caller_worker_id(caller);
  push.mutable_task()->set_sequence_number(seq);
  return push;
}

// One caller's actor calls in two batches that arrive in the wrong order: the later batch's
// calls wait for the earlier ones, and each gets its own reply.
TEST_F(PushTasksTest, ActorCallsInBatchesRunInTheCallersOrder) {
  absl::Mutex mu;
  std::map<std::string, absl::StatusOr<rpc::PushTaskReply>> outcomes;
  auto push = [&](std::vector<std::pair<std::string, int64_t>> calls) {
    rpc::PushTasksRequest request;
    std::vector<std::string> names;
    for (const auto& [name, seq] : calls) {
      *request.add_pushes() = ActorCall(name, seq);
      names.push_back(name);
    }
    client_->PushTasksAsync(std::move(request), [&, names](CoreWorkerClient::PushResults results) {
      absl::MutexLock lock(&mu);
      for (auto& [index, reply] : results) outcomes.emplace(names.at(index), std::move(reply));
    });
  };
  push({{"c", 2}, {"d", 3}});
  push({{"a", 0}, {"b", 1}});
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](std::map<std::string, absl::StatusOr<rpc::PushTaskReply>>* o) { return o->size() == 4; },
      &outcomes));
  for (const auto& [name, reply] : outcomes) {
    ASSERT_TRUE(reply.ok()) << name << ": " << reply.status();
    EXPECT_EQ(reply->worker_address(), name);
  }
  absl::MutexLock ran_lock(&ran_mu_);
  EXPECT_EQ(ran_, (std::vector<std::string>{"a", "b", "c", "d"}));
}

// Many short streams whose last result comes from the executor's thread while gRPC may end the
// stream on another: the reactor must not touch itself after starting the write that ends it
// (it used to finish under its own lock, which OnDone could delete meanwhile: "Mutex unlocked
// when destroyed" aborted workers under load).
TEST_F(PushTasksTest, ManyShortStreamsEndCleanly) {
  constexpr int kStreams = 2000;
  absl::Mutex mu;
  int answered = 0;
  for (int i = 0; i < kStreams; ++i) {
    rpc::PushTasksRequest request;
    *request.add_pushes() = NormalTask("a");
    *request.add_pushes() = NormalTask("b");
    client_->PushTasksAsync(std::move(request), [&](CoreWorkerClient::PushResults results) {
      absl::MutexLock lock(&mu);
      for (auto& [index, reply] : results) {
        EXPECT_TRUE(reply.ok()) << reply.status();
        ++answered;
      }
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(+[](int* n) { return *n == 2 * kStreams; }, &answered));
}

}  // namespace
}  // namespace troupe
