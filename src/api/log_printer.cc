#include "src/api/log_printer.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"

namespace troupe::internal {

WorkerLogPrinter::WorkerLogPrinter(GcsClient* gcs, JobId job_id)
    : gcs_(gcs), job_id_(std::move(job_id)), thread_([this] { Follow(); }) {}

void WorkerLogPrinter::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void WorkerLogPrinter::Follow() {
  int64_t cursor = -1;
  absl::Time drain_until = absl::InfiniteFuture();  // set when Stop is asked for
  while (true) {
    const bool stopping = stop_.HasBeenNotified();
    if (stopping && drain_until == absl::InfiniteFuture()) drain_until = absl::Now() + kDrainLimit;
    rpc::PollRequest poll;
    poll.add_channels(rpc::LOG_CHANNEL);
    poll.set_after_seq(cursor);
    // Following: long polls. Stopping: each poll waits one quiet period for more lines.
    poll.set_timeout_ms(
        cursor < 0 ? 0
                   : absl::ToInt64Milliseconds(stopping ? kQuietPeriod : absl::Milliseconds(200)));
    auto reply = gcs_->Poll(poll);
    bool printed = false;
    if (reply.ok()) {
      // messages_lost (the GCS restarted, or output outran its buffer): those lines are gone;
      // logs have no table to re-read, so printing goes on from the new cursor.
      cursor = reply->last_seq();
      for (const auto& message : reply->messages()) {
        const rpc::LogBatch& batch = message.log();
        if (batch.job_id() != job_id_.Binary()) continue;
        const std::string prefix = absl::StrCat(
            "(pid=", batch.pid(), ", node=", BytesToHex(batch.node_id()).substr(0, 8), ") ");
        std::string text;
        for (const auto& line : batch.lines()) absl::StrAppend(&text, prefix, line, "\n");
        fwrite(text.data(), 1, text.size(), stdout);
        printed = true;
      }
      fflush(stdout);
    }
    // Stopping: done once a whole quiet period brought nothing (a poll that another job's lines
    // ended early goes on), or the limit passed.
    const bool quiet = !printed && (!reply.ok() || reply->messages().empty());
    if (stopping && (quiet || absl::Now() >= drain_until)) return;
    if (!reply.ok()) stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500));
  }
}

}  // namespace troupe::internal
