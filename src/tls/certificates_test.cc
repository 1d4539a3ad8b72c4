#include "src/tls/certificates.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/tls/tls_files.h"

namespace troupe {
namespace {

TEST(CertificatesTest, CaSignsANodeCsrThatVerifiesWithTheRequestedNames) {
  auto ca_files = GenerateCa("test");
  ASSERT_TRUE(ca_files.ok()) << ca_files.status();
  auto ca = CertificateAuthority::Load(*ca_files);
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto csr = GenerateKeyAndCsr("node-1");
  ASSERT_TRUE(csr.ok()) << csr.status();
  auto cert = ca->SignCsr(csr->csr_pem, {"node-1", {"10.0.0.7", "127.0.0.1", "localhost"}});
  ASSERT_TRUE(cert.ok()) << cert.status();
  EXPECT_TRUE(VerifyCertificate(ca_files->cert_pem, *cert).ok());
  auto names = SubjectAltNames(*cert);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"10.0.0.7", "127.0.0.1", "localhost"}));
}

TEST(CertificatesTest, OnlyASelfSignedCaCertificateCanBeTheClusterCa) {
  auto ca_files = GenerateCa("test");
  ASSERT_TRUE(ca_files.ok());
  EXPECT_TRUE(CheckCaCertificate(ca_files->cert_pem).ok());
  auto leaf = CertificateAuthority::Load(*ca_files)->Issue({"node", {"127.0.0.1"}});
  ASSERT_TRUE(leaf.ok());
  absl::Status status = CheckCaCertificate(leaf->cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_FALSE(CertificateAuthority::Load(*leaf).ok()) << "a node certificate loaded as a CA";
  EXPECT_FALSE(CheckCaCertificate("not pem").ok());
}

TEST(CertificatesTest, ACertificateOfAnotherCaIsRefused) {
  auto ours = GenerateCa("ours");
  auto theirs = GenerateCa("theirs");
  ASSERT_TRUE(ours.ok() && theirs.ok());
  auto foreign = CertificateAuthority::Load(*theirs)->Issue({"node", {"127.0.0.1"}});
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  absl::Status status = VerifyCertificate(ours->cert_pem, foreign->cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
}

TEST(CertificatesTest, AnExpiredCertificateIsRefused) {
  auto ca_files = GenerateCa("test");
  ASSERT_TRUE(ca_files.ok());
  CertificateRequest request{"node", {"127.0.0.1"}};
  request.not_before = absl::Now() - absl::Hours(48);
  request.lifetime = absl::Hours(24);
  auto expired = CertificateAuthority::Load(*ca_files)->Issue(request);
  ASSERT_TRUE(expired.ok()) << expired.status();
  absl::Status status = VerifyCertificate(ca_files->cert_pem, expired->cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(status.message().find("expired"), std::string::npos) << status;
}

TEST(CertificatesTest, PinIsTheSha256OfTheCaPublicKeyAndDiffersPerCa) {
  auto a = GenerateCa("a");
  auto b = GenerateCa("b");
  ASSERT_TRUE(a.ok() && b.ok());
  auto pin_a = CaPin(a->cert_pem);
  ASSERT_TRUE(pin_a.ok());
  EXPECT_EQ(pin_a->size(), 7u + 64u);
  EXPECT_EQ(pin_a->rfind("sha256:", 0), 0u);
  EXPECT_EQ(*pin_a, *CaPin(a->cert_pem));
  EXPECT_NE(*pin_a, *CaPin(b->cert_pem));
}

TEST(CertificatesTest, ATamperedOrGarbageCsrIsRejected) {
  auto ca = CertificateAuthority::Load(*GenerateCa("test"));
  ASSERT_TRUE(ca.ok());
  EXPECT_EQ(ca->SignCsr("not a csr", {"x", {"127.0.0.1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto csr = GenerateKeyAndCsr("node");
  ASSERT_TRUE(csr.ok());
  // Flip one base64 character inside the signed body.
  std::string tampered = csr->csr_pem;
  const size_t middle = tampered.size() / 2;
  tampered[middle] = tampered[middle] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(ca->SignCsr(tampered, {"x", {"127.0.0.1"}}).ok());
}

TEST(CertificatesTest, TheCaRefusesAKeyThatIsNotItsOwn) {
  auto a = GenerateCa("a");
  auto b = GenerateCa("b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(CertificateAuthority::Load({b->key_pem, a->cert_pem}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TlsFilesTest, KeysAreWrittenMode0600) {
  const std::string dir = ::testing::TempDir() + "/tls_files_test_" + std::to_string(getpid());
  ASSERT_TRUE(WriteFileWithMode(CaKeyPath(dir), "secret", 0600).ok());
  struct stat info {};
  ASSERT_EQ(stat(CaKeyPath(dir).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(*ReadWholeFile(CaKeyPath(dir)), "secret");
  EXPECT_EQ(ReadTlsMaterial(dir).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace troupe
