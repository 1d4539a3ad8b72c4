#include "src/gcs/publisher.h"

#include <algorithm>
#include <utility>

namespace troupe {
namespace {

bool Wants(const std::vector<int>& channels, int channel) {
  return channels.empty() || std::find(channels.begin(), channels.end(), channel) != channels.end();
}

}  // namespace

Publisher::Publisher(const Clock* clock, size_t max_buffered, absl::Duration max_poll_wait,
                     int64_t seq_base)
    : clock_(clock),
      max_buffered_(max_buffered),
      max_poll_wait_(max_poll_wait),
      last_seq_(seq_base) {}

int64_t Publisher::SeqBaseFromClock(const Clock& clock) {
  return absl::ToUnixMicros(clock.Now());
}

bool Publisher::CollectLocked(const std::vector<int>& channels, int64_t after_seq,
                              rpc::PollReply* reply) const {
  reply->set_last_seq(last_seq_);
  const int64_t first_buffered = buffer_.empty() ? last_seq_ + 1 : buffer_.front().seq();
  if (after_seq > last_seq_ || after_seq + 1 < first_buffered) {
    // Ahead of us (the GCS restarted) or behind the buffer: the subscriber must re-sync.
    reply->set_messages_lost(true);
    return true;
  }
  for (auto it = buffer_.begin() + (after_seq + 1 - first_buffered); it != buffer_.end(); ++it) {
    if (Wants(channels, it->channel())) *reply->add_messages() = *it;
  }
  return reply->messages_size() > 0;
}

int64_t Publisher::Publish(rpc::PubMessage message) {
  std::vector<std::pair<PollCallback, rpc::PollReply>> answers;
  int64_t seq;
  {
    absl::MutexLock lock(&mu_);
    seq = ++last_seq_;
    message.set_seq(seq);
    buffer_.push_back(std::move(message));
    if (buffer_.size() > max_buffered_) buffer_.pop_front();
    // A parked poll was offered every message before this one (none was on its channels, or it
    // would have been answered), so only this one can be news to it: O(waiters) per message, not
    // O(waiters x messages since each parked) — many subscribers to quiet channels under a burst
    // on another (a thousand nodes while placement groups come and go) stay cheap, and never look
    // "behind the buffer".
    const rpc::PubMessage& published = buffer_.back();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (Wants(it->channels, published.channel())) {
        rpc::PollReply reply;
        reply.set_last_seq(seq);
        *reply.add_messages() = published;
        answers.emplace_back(std::move(it->done), std::move(reply));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [done, reply] : answers) done(std::move(reply));
  return seq;
}

void Publisher::Poll(const rpc::PollRequest& request, PollCallback done) {
  std::vector<int> channels(request.channels().begin(), request.channels().end());
  rpc::PollReply reply;
  {
    absl::MutexLock lock(&mu_);
    if (request.after_seq() < 0) {
      reply.set_last_seq(last_seq_);
    } else if (!CollectLocked(channels, request.after_seq(), &reply) && request.timeout_ms() > 0 &&
               !shut_down_) {
      absl::Duration wait = std::min(absl::Milliseconds(request.timeout_ms()), max_poll_wait_);
      waiters_.push_back(
          {std::move(channels), request.after_seq(), clock_->Now() + wait, std::move(done)});
      return;
    }
  }
  done(std::move(reply));
}

void Publisher::ExpirePolls() { ExpireWaitersBefore(clock_->Now()); }

void Publisher::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
  }
  ExpireWaitersBefore(absl::InfiniteFuture());
}

void Publisher::ExpireWaitersBefore(absl::Time now) {
  std::vector<std::pair<PollCallback, rpc::PollReply>> answers;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        rpc::PollReply reply;
        reply.set_last_seq(last_seq_);
        answers.emplace_back(std::move(it->done), std::move(reply));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [done, reply] : answers) done(std::move(reply));
}

int64_t Publisher::last_seq() const {
  absl::MutexLock lock(&mu_);
  return last_seq_;
}

size_t Publisher::num_waiting_polls() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace troupe
