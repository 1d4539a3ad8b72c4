#include "src/http/log_tail.h"

#include "gtest/gtest.h"

namespace troupe::http {
namespace {

TEST(LogTailTest, AFrameNeverEndsInsideACharacter) {
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, 3 bytes
  EXPECT_EQ(CompleteUtf8Prefix("plain"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + euro), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + euro.substr(0, 1)), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a" + euro.substr(0, 2)), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98"), 1u);  // 3 of an emoji's 4 bytes
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);          // invalid: goes out (as U+FFFD)
}

TEST(LogTailTest, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(ValidUtf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  EXPECT_EQ(ValidUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(ValidUtf8("end\xE2\x82"), "end\xEF\xBF\xBD\xEF\xBF\xBD");  // cut at the end
}

}  // namespace
}  // namespace troupe::http
