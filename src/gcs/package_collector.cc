#include "src/gcs/package_collector.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"
#include "src/common/logging.h"
#include "src/common/resources.h"
#include "src/schema/kv_schema.h"

namespace troupe {
namespace {

// Runs an asynchronous KvManager call and waits for its answer (the timer thread may wait).
template <typename T, typename Call>
absl::StatusOr<T> Await(Call call) {
  absl::Notification done;
  absl::StatusOr<T> result = absl::UnknownError("no answer");
  call([&](absl::StatusOr<T> answer) {
    result = std::move(answer);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

// Whether a jobs-API record still keeps what it mentions: its job has not ended, or ended after
// `recent_ms`. Status names and fields as src/jobs/job_record.h writes them (Ray's).
bool RecordCounts(const std::string& text, int64_t recent_ms) {
  const nlohmann::json record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return true;  // unreadable: keep what it mentions
  const auto status = record.find("status");
  const bool terminal = status != record.end() && status->is_string() &&
                        (*status == "SUCCEEDED" || *status == "FAILED" || *status == "STOPPED");
  if (!terminal) return true;
  const auto end = record.find("end_time");
  return end != record.end() && end->is_number() && end->get<int64_t>() >= recent_ms;
}

}  // namespace

PackageCollector::PackageCollector(KvManager* kv, const JobManager* jobs, const Clock* clock,
                                   PackageCollectorOptions options)
    : kv_(kv), jobs_(jobs), clock_(clock), options_(std::move(options)) {}

void PackageCollector::Tick() {
  const absl::Time now = clock_->Now();
  if (now - last_sweep_ < options_.period) return;
  last_sweep_ = now;
  Sweep();
}

int PackageCollector::Sweep() {
  const absl::Time now = clock_->Now();
  const int64_t recent_ms = absl::ToUnixMillis(now - options_.grace);

  absl::flat_hash_set<std::string> referenced;
  for (const rpc::JobInfo& job : jobs_->GetAllJobs()) {
    if (job.state() == rpc::JobInfo::FINISHED && job.end_time_ms() < recent_ms) continue;
    if (!job.working_dir_digest().empty()) referenced.insert(job.working_dir_digest());
    if (!job.executable_digest().empty()) referenced.insert(job.executable_digest());
  }
  // Records of jobs submitted through the jobs API that still count, as text: a digest any of
  // them mentions is referred to.
  std::vector<std::string> records;
  auto record_keys = Await<std::vector<std::string>>(
      [&](auto done) { kv_->Keys(jobs::kJobsNamespace, jobs::kRecordKeyPrefix, std::move(done)); });
  if (!record_keys.ok()) return 0;  // cannot tell what is referred to: collect nothing
  for (const std::string& key : *record_keys) {
    auto text = Await<std::optional<std::string>>(
        [&](auto done) { kv_->Get(jobs::kJobsNamespace, key, std::move(done)); });
    if (!text.ok()) return 0;
    if (text->has_value() && RecordCounts(**text, recent_ms)) records.push_back(**std::move(text));
  }
  auto mentioned = [&](const std::string& digest) {
    return referenced.contains(digest) ||
           std::any_of(records.begin(), records.end(), [&](const std::string& record) {
             return record.find(digest) != std::string::npos;
           });
  };

  int deleted = 0;
  absl::flat_hash_set<std::string> seen;
  for (const char* ns : {kPackagesNamespace, kExecutablesNamespace}) {
    auto digests =
        Await<std::vector<std::string>>([&](auto done) { kv_->Keys(ns, "", std::move(done)); });
    if (!digests.ok()) continue;
    for (const std::string& digest : *digests) {
      const std::string entry = absl::StrCat(ns, "/", digest);
      if (mentioned(digest)) {
        unreferenced_since_.erase(entry);
        continue;
      }
      seen.insert(entry);
      const absl::Time since = unreferenced_since_.emplace(entry, now).first->second;
      if (now - since < options_.grace) continue;
      const std::optional<int64_t> bytes = kv_->SizeOf(ns, digest);
      auto removed = Await<int64_t>(
          [&](auto done) { kv_->Del(ns, digest, /*by_prefix=*/false, std::move(done)); });
      if (!removed.ok()) {
        TROUPE_LOG(Warning) << "collecting " << entry << " failed: " << removed.status().message();
        continue;
      }
      seen.erase(entry);
      unreferenced_since_.erase(entry);
      if (*removed > 0) {
        ++deleted;
        TROUPE_LOG(Info) << "collected " << entry << " (" << FormatBytes(bytes.value_or(0))
                         << "): no job has referred to it for "
                         << absl::FormatDuration(now - since);
      }
    }
  }
  // Forget entries that are gone (deleted by someone else).
  for (auto it = unreferenced_since_.begin(); it != unreferenced_since_.end();) {
    if (!seen.contains(it->first)) {
      unreferenced_since_.erase(it++);
    } else {
      ++it;
    }
  }
  return deleted;
}

}  // namespace troupe
