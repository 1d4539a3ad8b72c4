#include "src/cli/cluster_tls.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "src/tls/tls_files.h"

namespace troupe {
namespace {

TEST(ClusterTlsTest, AutoTurnsTlsOnBeyondLoopbackOnly) {
  EXPECT_FALSE(*ResolveTlsMode("auto", "127.0.0.1"));
  EXPECT_FALSE(*ResolveTlsMode("auto", "127.0.0.2"));
  EXPECT_FALSE(*ResolveTlsMode("auto", "localhost"));
  EXPECT_TRUE(*ResolveTlsMode("auto", "0.0.0.0"));
  EXPECT_TRUE(*ResolveTlsMode("auto", "10.0.0.5"));
  EXPECT_TRUE(*ResolveTlsMode("on", "127.0.0.1"));
  EXPECT_FALSE(*ResolveTlsMode("off", "10.0.0.5"));
  EXPECT_FALSE(ResolveTlsMode("maybe", "10.0.0.5").ok());
}

TEST(ClusterTlsTest, CertificatesNameTheNodeAndLoopback) {
  EXPECT_EQ(CertificateNames("10.0.0.5", "0.0.0.0"),
            (std::vector<std::string>{"10.0.0.5", "127.0.0.1", "localhost"}));
  EXPECT_EQ(CertificateNames("127.0.0.1", "127.0.0.1"),
            (std::vector<std::string>{"127.0.0.1", "localhost"}));
}

TEST(ClusterTlsTest, JoinCommandCarriesAddressTokenAndPin) {
  EXPECT_EQ(JoinCommand("10.0.0.5:6380", "troupe_x", "sha256:ab"),
            "troupe start --address=10.0.0.5:6380 --token=troupe_x --ca-cert-hash=sha256:ab");
  EXPECT_EQ(JoinCommand("127.0.0.1:6380", "t", ""),
            "troupe start --address=127.0.0.1:6380 --token=t");
}

TEST(ClusterTlsTest, ExtraNamesAreHostNamesOrAddresses) {
  EXPECT_EQ(*ParseExtraNames("troupe-head, troupe-head.default.svc,10.0.0.9"),
            (std::vector<std::string>{"troupe-head", "troupe-head.default.svc", "10.0.0.9"}));
  EXPECT_TRUE(ParseExtraNames("")->empty());
  EXPECT_FALSE(ParseExtraNames("troupe head").ok());
  EXPECT_FALSE(ParseExtraNames("*.svc").ok());
}

std::string Scratch(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(ClusterTlsTest, AKeyFileOpenToOtherUsersIsRefused) {
  ASSERT_TRUE(WriteFileWithMode(Scratch("private.key"), "k", 0600).ok());
  ASSERT_TRUE(WriteFileWithMode(Scratch("group.key"), "k", 0440).ok());  // Kubernetes fsGroup
  ASSERT_TRUE(WriteFileWithMode(Scratch("open.key"), "k", 0644).ok());
  EXPECT_TRUE(CheckPrivateKeyFileMode(Scratch("private.key")).ok());
  EXPECT_TRUE(CheckPrivateKeyFileMode(Scratch("group.key")).ok());
  absl::Status open = CheckPrivateKeyFileMode(Scratch("open.key"));
  EXPECT_EQ(open.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(open.message().find("chmod 600"), absl::string_view::npos) << open;
  EXPECT_FALSE(CheckPrivateKeyFileMode(Scratch("missing.key")).ok());
}

TEST(ClusterTlsTest, AGivenCaIsCheckedAgainstItsKeyAndPin) {
  auto ca = GenerateCa("given");
  auto other = GenerateCa("other");
  ASSERT_TRUE(ca.ok() && other.ok());
  ASSERT_TRUE(WriteFileWithMode(Scratch("ca.crt"), ca->cert_pem, 0644).ok());
  ASSERT_TRUE(WriteFileWithMode(Scratch("ca.key"), ca->key_pem, 0600).ok());
  ASSERT_TRUE(WriteFileWithMode(Scratch("other.key"), other->key_pem, 0600).ok());
  auto given = ReadGivenCa(Scratch("ca.crt"), Scratch("ca.key"));
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->cert_pem, ca->cert_pem);
  EXPECT_EQ(ReadGivenCa(Scratch("ca.crt"), Scratch("other.key")).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string pin = *CaPin(ca->cert_pem);
  EXPECT_EQ(*ReadTrustedCa(Scratch("ca.crt"), ""), ca->cert_pem);
  EXPECT_EQ(*ReadTrustedCa(Scratch("ca.crt"), pin), ca->cert_pem);
  auto mismatch = ReadTrustedCa(Scratch("ca.crt"), *CaPin(other->cert_pem));
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find(pin), absl::string_view::npos) << mismatch.status();
}

}  // namespace
}  // namespace troupe
