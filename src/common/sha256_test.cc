#include "src/common/sha256.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/abc";
  std::ofstream(path) << "abc";
  EXPECT_EQ(*Sha256OfFile(path), Sha256Hex("abc"));
  EXPECT_FALSE(Sha256OfFile(path + ".missing").ok());
}

}  // namespace
}  // namespace troupe
