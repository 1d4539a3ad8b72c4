#include "src/gcs/package_collector.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/gcs/publisher.h"
#include "src/schema/kv_schema.h"

namespace troupe {
namespace {

const std::string kDigestA(64, 'a');
const std::string kDigestB(64, 'b');
const std::string kDigestC(64, 'c');

class PackageCollectorTest : public ::testing::Test {
 protected:
  void Put(const std::string& ns, const std::string& key, const std::string& value) {
    kv_.Put(ns, key, value, /*overwrite=*/true,
            [](absl::StatusOr<bool> added) { ASSERT_TRUE(added.ok()) << added.status(); });
  }
  bool Has(const std::string& ns, const std::string& key) {
    return kv_.SizeOf(ns, key).has_value();
  }
  JobId AddJob(const std::string& working_dir_digest, const std::string& executable_digest) {
    rpc::JobInfo job;
    job.set_working_dir_digest(working_dir_digest);
    job.set_executable_digest(executable_digest);
    auto id = jobs_.AddJob(job);
    EXPECT_TRUE(id.ok());
    return *id;
  }
  // A jobs-API record as src/jobs writes it.
  void PutRecord(const std::string& id, const std::string& status, const std::string& digest,
                 int64_t end_time_ms = 0) {
    Put(jobs::kJobsNamespace, jobs::RecordKey(id),
        absl::StrCat(R"({"submission_id":")", id, R"(","status":")", status,
                     R"(","runtime_env":{"working_dir":"gcs://troupe_pkg_)", digest,
                     R"(.pkg"},"end_time":)", end_time_ms, "}"));
  }
  int64_t NowMs() const { return absl::ToUnixMillis(clock_.Now()); }

  FakeClock clock_;
  InMemoryStoreClient store_;
  Publisher publisher_{&clock_, 100, absl::Seconds(60)};
  KvManager kv_{&store_};
  JobManager jobs_{&store_, &publisher_, &clock_};
  PackageCollector collector_{&kv_, &jobs_, &clock_, {absl::Hours(1), absl::Minutes(1)}};
};

TEST_F(PackageCollectorTest, UnreferencedPackageIsDeletedOnlyAfterTheGracePeriod) {
  Put(kPackagesNamespace, kDigestA, "package bytes");
  Put(kExecutablesNamespace, kDigestB, "executable bytes");
  EXPECT_EQ(collector_.Sweep(), 0);  // just uploaded: the grace period starts now
  clock_.Advance(absl::Minutes(59));
  EXPECT_EQ(collector_.Sweep(), 0);
  EXPECT_TRUE(Has(kPackagesNamespace, kDigestA));
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(collector_.Sweep(), 2);
  EXPECT_FALSE(Has(kPackagesNamespace, kDigestA));
  EXPECT_FALSE(Has(kExecutablesNamespace, kDigestB));
  EXPECT_EQ(kv_.used_bytes(), 0);
}

TEST_F(PackageCollectorTest, PackagesOfRunningAndRecentlyFinishedJobsAreKept) {
  Put(kPackagesNamespace, kDigestA, "working dir");
  Put(kExecutablesNamespace, kDigestB, "driver");
  const JobId job = AddJob(kDigestA, kDigestB);
  collector_.Sweep();
  clock_.Advance(absl::Hours(5));
  EXPECT_EQ(collector_.Sweep(), 0);  // the job runs: kept however long
  ASSERT_TRUE(jobs_.MarkJobFinished(job.Binary()).ok());
  clock_.Advance(absl::Minutes(30));
  EXPECT_EQ(collector_.Sweep(), 0);  // finished recently
  clock_.Advance(absl::Minutes(31));
  EXPECT_EQ(collector_.Sweep(), 0);  // unreferenced from now on: the grace period starts
  EXPECT_TRUE(Has(kPackagesNamespace, kDigestA));
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(collector_.Sweep(), 2);
  EXPECT_FALSE(Has(kPackagesNamespace, kDigestA));
}

TEST_F(PackageCollectorTest, JobsApiRecordsKeepTheirPackageUntilTheJobEnded) {
  Put(kPackagesNamespace, kDigestA, "pending job's dir");
  Put(kPackagesNamespace, kDigestB, "long finished job's dir");
  Put(kPackagesNamespace, kDigestC, "recently finished job's dir");
  PutRecord("pending", "PENDING", kDigestA);
  PutRecord("old", "SUCCEEDED", kDigestB, NowMs() - 2 * 3600 * 1000);
  collector_.Sweep();
  clock_.Advance(absl::Hours(2));
  PutRecord("recent", "FAILED", kDigestC, NowMs() - 60 * 1000);
  EXPECT_EQ(collector_.Sweep(), 1);
  EXPECT_TRUE(Has(kPackagesNamespace, kDigestA));   // its job has not started yet
  EXPECT_FALSE(Has(kPackagesNamespace, kDigestB));  // ended long ago
  EXPECT_TRUE(Has(kPackagesNamespace, kDigestC));   // ended a minute ago
}

TEST_F(PackageCollectorTest, TickSweepsOncePerPeriod) {
  Put(kPackagesNamespace, kDigestA, "bytes");
  collector_.Tick();  // first sweep: starts the wait
  clock_.Advance(absl::Hours(1));
  Put(kPackagesNamespace, kDigestB, "bytes");
  collector_.Tick();  // collects A; B's wait starts
  EXPECT_FALSE(Has(kPackagesNamespace, kDigestA));
  clock_.Advance(absl::Hours(1) - absl::Seconds(1));
  collector_.Tick();
  clock_.Advance(absl::Seconds(1));
  collector_.Tick();  // within the period of the last sweep: nothing happens
  EXPECT_TRUE(Has(kPackagesNamespace, kDigestB));
  clock_.Advance(absl::Minutes(1));
  collector_.Tick();
  EXPECT_FALSE(Has(kPackagesNamespace, kDigestB));
}

}  // namespace
}  // namespace troupe
