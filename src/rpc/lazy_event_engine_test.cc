// The lazy EventEngine: a server, a channel and a call (unary, callback API, as our services
// and clients use) start none of gRPC's EventEngine threads; the first real use of the engine
// creates the built-in one and runs what it was given.
#include "src/rpc/lazy_event_engine.h"

#include <grpc/event_engine/event_engine.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "proto/raylet.grpc.pb.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

TEST(LazyEventEngineTest, ServersChannelsAndCallsNeedNoEngineThreadsAndFirstUseMakesOne) {
  // The process's first server and channel (the latter pins gRPC's callback queue with a
  // channel of its own) write nothing to stderr: a worker's stderr is its user's output.
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string captured = std::string(dir != nullptr ? dir : "/tmp") + "/stderr.txt";
  const int saved_stderr = dup(2);
  const int file = open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(file, 0);
  dup2(file, 2);
  close(file);
  int port = 0;
  // A real server needs one registered service; which one does not matter: the call below goes
  // to a method no service has, so its answer comes from the server itself.
  rpc::ObjectManagerService::CallbackService registered_service;
  auto server = StartGrpcServer("127.0.0.1", 0, {&registered_service}, &port);
  auto channel = MakeChannel("127.0.0.1:" + std::to_string(port));
  dup2(saved_stderr, 2);
  close(saved_stderr);
  std::stringstream written;
  written << std::ifstream(captured).rdbuf();
  EXPECT_EQ(written.str(), "") << "gRPC logged while making a server and a channel";
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/troupe.NoSuch/Method", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  // UNIMPLEMENTED is the server's answer (a round trip over the channel happened), not a
  // transport error: calls work without the engine.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  EXPECT_FALSE(BuiltInEventEngineCreated());

  // Something that does use the engine gets a working one.
  auto engine = grpc_event_engine::experimental::CreateEventEngine();
  absl::Notification ran;
  engine->Run([&] { ran.Notify(); });
  ran.WaitForNotification();
  EXPECT_TRUE(BuiltInEventEngineCreated());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace troupe
