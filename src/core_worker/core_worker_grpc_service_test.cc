// The CoreWorkerService glue serves every method proto/worker.proto declares: a declared method
// left to gRPC's default answers UNIMPLEMENTED, which callers would only find out at run time
// (KillActor was such a method until it was removed from the contract).
#include "src/core_worker/core_worker_grpc_service.h"

#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace troupe
