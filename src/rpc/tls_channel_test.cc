// Real gRPC servers and channels under TLS (src/rpc/transport_security.h): a client that trusts
// the cluster CA gets through; plaintext clients, servers with a certificate of another CA, an
// expired one, or one that does not name the address are all refused.
#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/gcs.grpc.pb.h"
#include "src/rpc/server.h"
#include "src/rpc/transport_security.h"
#include "src/tls/certificates.h"

namespace troupe {
namespace {

class InfoService : public rpc::ClusterInfoService::CallbackService {
  grpc::ServerUnaryReactor* GetClusterInfo(grpc::CallbackServerContext* context,
                                           const rpc::GetClusterInfoRequest*,
                                           rpc::GetClusterInfoReply* reply) override {
    reply->set_version("tls-test");
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

class TlsChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = GenerateCa("test");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    SetTransportSecurity(std::nullopt);
  }

  KeyAndCertificate Issue(const KeyAndCertificate& ca, CertificateRequest request) {
    auto issued = CertificateAuthority::Load(ca)->Issue(request);
    EXPECT_TRUE(issued.ok()) << issued.status();
    return *issued;
  }

  // Starts a server on 127.0.0.1 presenting `leaf` (issued by `issuer`); nullopt: plaintext.
  void Serve(std::optional<std::pair<KeyAndCertificate, KeyAndCertificate>> leaf_and_issuer) {
    if (leaf_and_issuer) {
      const auto& [leaf, issuer] = *leaf_and_issuer;
      SetTransportSecurity(TlsMaterial{issuer.cert_pem, leaf.cert_pem, leaf.key_pem});
    } else {
      SetTransportSecurity(std::nullopt);
    }
    auto server = StartGrpcServer("127.0.0.1", 0, {&service_}, &port_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  grpc::Status Call(std::shared_ptr<grpc::Channel> channel) {
    auto stub = rpc::ClusterInfoService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rpc::GetClusterInfoRequest request;
    rpc::GetClusterInfoReply reply;
    return stub->GetClusterInfo(&context, request, &reply);
  }
  // A call through MakeChannel by a client that trusts only our CA.
  grpc::Status CallTrustingOurCa() {
    SetTransportSecurity(TlsMaterial{ca_.cert_pem, "", ""});
    return Call(MakeChannel("127.0.0.1:" + std::to_string(port_)));
  }

  KeyAndCertificate ca_;
  InfoService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(TlsChannelTest, AClientTrustingTheClusterCaGetsThrough) {
  Serve(std::pair{Issue(ca_, {"node", {"127.0.0.1", "localhost"}}), ca_});
  grpc::Status status = CallTrustingOurCa();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(TlsChannelTest, APlaintextClientIsRefused) {
  Serve(std::pair{Issue(ca_, {"node", {"127.0.0.1"}}), ca_});
  grpc::Status status = Call(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                 grpc::InsecureChannelCredentials()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsChannelTest, AServerWithAForeignCaCertificateIsRefused) {
  auto foreign_ca = GenerateCa("foreign");
  ASSERT_TRUE(foreign_ca.ok());
  Serve(std::pair{Issue(*foreign_ca, {"node", {"127.0.0.1"}}), *foreign_ca});
  grpc::Status status = CallTrustingOurCa();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsChannelTest, AServerWithAnExpiredCertificateIsRefused) {
  CertificateRequest expired{"node", {"127.0.0.1"}};
  expired.not_before = absl::Now() - absl::Hours(48);
  expired.lifetime = absl::Hours(24);
  Serve(std::pair{Issue(ca_, expired), ca_});
  grpc::Status status = CallTrustingOurCa();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsChannelTest, AServerWhoseCertificateDoesNotNameTheAddressIsRefused) {
  Serve(std::pair{Issue(ca_, {"node", {"10.255.0.9"}}), ca_});
  grpc::Status status = CallTrustingOurCa();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsChannelTest, APlaintextServerIsRefusedByATlsClient) {
  Serve(std::nullopt);
  grpc::Status status = CallTrustingOurCa();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsChannelTest, ServingWithoutANodeCertificateFailsClearly) {
  SetTransportSecurity(TlsMaterial{ca_.cert_pem, "", ""});
  int port = 0;
  auto server = StartGrpcServer("127.0.0.1", 0, {&service_}, &port);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace troupe
