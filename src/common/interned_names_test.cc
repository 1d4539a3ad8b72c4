#include "src/common/interned_names.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(InternedNamesTest, TheSameNameIsStoredOnce) {
  InternedNames names(10);
  const std::string* a = names.Intern("troupe_bench::Echo::Small");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(*a, "troupe_bench::Echo::Small");
  EXPECT_EQ(names.Intern(std::string("troupe_bench::Echo::Small")), a);
  EXPECT_NE(names.Intern("other"), a);
  EXPECT_EQ(names.size(), 2u);
}

TEST(InternedNamesTest, AFullTableStillFindsItsNamesButStoresNoNewOne) {
  InternedNames names(2);
  const std::string* a = names.Intern("a");
  names.Intern("b");
  EXPECT_EQ(names.Intern("c"), nullptr);
  EXPECT_EQ(names.Intern("a"), a);
  EXPECT_EQ(names.size(), 2u);
}

TEST(NameRefTest, HoldsItsOwnCopyWhenTheTableIsFull) {
  InternedNames names(1);
  NameRef first(names, "first");
  std::string second_source = "second-name-longer-than-inline";
  NameRef second(names, second_source);
  second_source.assign("changed");  // the ref does not point at the caller's string
  EXPECT_EQ(first.view(), "first");
  EXPECT_EQ(second.view(), "second-name-longer-than-inline");
  EXPECT_TRUE(NameRef(names, "").empty());
  EXPECT_TRUE(NameRef().empty());
  EXPECT_FALSE(first.empty());
}

}  // namespace
}  // namespace troupe
