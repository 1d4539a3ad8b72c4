#include "src/gcs/job_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {
namespace {
constexpr char kTable[] = "JOB";
}  // namespace

JobManager::JobManager(StoreClient* store, Publisher* publisher, const Clock* clock)
    : store_(store), publisher_(publisher), clock_(clock) {}

absl::Status JobManager::Initialize() {
  auto rows = ScanTableSync(store_, kTable);
  if (!rows.ok()) return rows.status();
  absl::MutexLock lock(&mu_);
  for (const auto& [key, value] : *rows) {
    rpc::JobInfo job;
    auto job_id = JobId::FromBinary(key);
    if (!job_id.ok() || !job.ParseFromString(value)) {
      TROUPE_LOG(Error) << "skipping a corrupt row in the " << kTable << " table";
      continue;
    }
    jobs_[*job_id] = job;
    last_job_number_ = std::max(last_job_number_, job_id->ToInt());
  }
  return absl::OkStatus();
}

absl::StatusOr<JobId> JobManager::AddJob(rpc::JobInfo job) {
  absl::MutexLock lock(&mu_);
  JobId job_id;
  if (job.job_id().empty()) {
    job_id = JobId::FromInt(++last_job_number_);
  } else {
    auto parsed = JobId::FromBinary(job.job_id());
    if (!parsed.ok()) return parsed.status();
    if (jobs_.contains(*parsed)) {
      return absl::AlreadyExistsError(absl::StrCat("job ", parsed->Hex(), " already exists"));
    }
    job_id = *parsed;
    last_job_number_ = std::max(last_job_number_, job_id.ToInt());
  }
  job.set_job_id(job_id.Binary());
  job.set_state(rpc::JobInfo::RUNNING);
  job.set_start_time_ms(absl::ToUnixMillis(clock_->Now()));
  jobs_[job_id] = job;
  SaveAndPublishLocked(job);
  return job_id;
}

absl::Status JobManager::MarkJobFinished(const std::string& job_id_binary) {
  auto job_id = JobId::FromBinary(job_id_binary);
  if (!job_id.ok()) return job_id.status();
  std::vector<std::function<void(const std::string&)>> listeners;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(*job_id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", job_id->Hex()));
    if (it->second.state() == rpc::JobInfo::FINISHED) return absl::OkStatus();
    it->second.set_state(rpc::JobInfo::FINISHED);
    it->second.set_end_time_ms(absl::ToUnixMillis(clock_->Now()));
    SaveAndPublishLocked(it->second);
    listeners = finished_listeners_;
  }
  for (const auto& listener : listeners) listener(job_id_binary);
  return absl::OkStatus();
}

bool JobManager::IsJobFinished(const std::string& job_id_binary) const {
  auto job_id = JobId::FromBinary(job_id_binary);
  if (!job_id.ok()) return false;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(*job_id);
  return it != jobs_.end() && it->second.state() == rpc::JobInfo::FINISHED;
}

void JobManager::AddJobFinishedListener(std::function<void(const std::string&)> listener) {
  absl::MutexLock lock(&mu_);
  finished_listeners_.push_back(std::move(listener));
}

std::vector<rpc::JobInfo> JobManager::GetAllJobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<rpc::JobInfo> jobs;
  for (const auto& [id, job] : jobs_) jobs.push_back(job);
  std::sort(jobs.begin(), jobs.end(),
            [](const auto& a, const auto& b) { return a.job_id() < b.job_id(); });
  return jobs;
}

void JobManager::SaveAndPublishLocked(const rpc::JobInfo& job) {
  PutBestEffort(store_, kTable, job.job_id(), job.SerializeAsString());
  rpc::PubMessage message;
  message.set_channel(rpc::JOB_CHANNEL);
  message.set_key(job.job_id());
  *message.mutable_job() = job;
  publisher_->Publish(std::move(message));
}

}  // namespace troupe
