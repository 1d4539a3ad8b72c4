// Pubsub of GCS state changes (nodes, actors, jobs, placement groups) by long poll. Every
// published message gets the next sequence number; a subscriber polls with the last number it saw
// and gets what is newer on its channels, or waits until something arrives or its timeout passes.
// A bounded buffer keeps the most recent messages; a subscriber that fell further behind (or that
// polls a restarted GCS) is told `messages_lost` and re-reads the tables.
// Thread-safe. Poll callbacks run on the thread that publishes, polls or expires, never under the
// publisher's lock.
#pragma once

#include <deque>
#include <functional>
#include <list>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/gcs.pb.h"
#include "src/common/clock.h"

namespace troupe {

class Publisher {
 public:
  using PollCallback = std::function<void(rpc::PollReply)>;

  // Polls wait at most `max_poll_wait` whatever they ask for.
  Publisher(const Clock* clock, size_t max_buffered = 10000,
            absl::Duration max_poll_wait = absl::Seconds(60));

  // Stamps `message` with the next sequence number, buffers it and answers waiting polls.
  int64_t Publish(rpc::PubMessage message);

  // after_seq < 0: answer at once with the current last_seq (a cursor to start from).
  // Otherwise: answer at once with newer messages on the requested channels (all channels when
  // none are listed), or park the poll until one is published or timeout_ms passes.
  void Poll(const rpc::PollRequest& request, PollCallback done);

  // Answers parked polls whose time is up with an empty reply. Called periodically by the GCS.
  void ExpirePolls();
  // Answers every parked poll now, and every later poll at once (the GCS is shutting down).
  void Shutdown();

  int64_t last_seq() const;
  size_t num_waiting_polls() const;

 private:
  struct Waiter {
    std::vector<int> channels;
    int64_t after_seq;
    absl::Time deadline;
    PollCallback done;
  };
  // Fills `reply` for a poll; returns false when there is nothing to send yet.
  bool CollectLocked(const std::vector<int>& channels, int64_t after_seq,
                     rpc::PollReply* reply) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireWaitersBefore(absl::Time now);

  const Clock* clock_;
  const size_t max_buffered_;
  const absl::Duration max_poll_wait_;
  mutable absl::Mutex mu_;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<rpc::PubMessage> buffer_ ABSL_GUARDED_BY(mu_);
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace troupe
