#include "src/cli/cluster_tls.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace troupe
