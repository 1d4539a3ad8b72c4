// Pubsub of GCS state changes (nodes, actors, jobs, placement groups) by long poll. Every
// published message gets the next sequence number; a subscriber polls with the last number it saw
// and gets what is newer on its channels, or waits until something arrives or its timeout passes.
// A bounded buffer keeps the most recent messages; a subscriber that fell further behind (or that
// polls a restarted GCS) is told `messages_lost` and re-reads the tables.
// Sequence numbers survive GCS restarts: the GCS starts each incarnation's numbering at a base
// taken from the wall clock (SeqBaseFromClock, microseconds), above every number an earlier
// incarnation handed out, so an old cursor is always behind the new buffer (messages_lost), never
// a valid position in the new incarnation's stream.
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

  // Polls wait at most `max_poll_wait` whatever they ask for. The first message gets
  // seq_base + 1.
  Publisher(const Clock* clock, size_t max_buffered = 10000,
            absl::Duration max_poll_wait = absl::Seconds(60), int64_t seq_base = 0);

  // A seq_base above any sequence number an earlier publisher of the same GCS can have handed
  // out: microseconds since the Unix epoch (an earlier incarnation would have had to publish
  // more than a million messages a second to catch up with it).
  static int64_t SeqBaseFromClock(const Clock& clock);

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
  int64_t last_seq_ ABSL_GUARDED_BY(mu_);
  std::deque<rpc::PubMessage> buffer_ ABSL_GUARDED_BY(mu_);
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace troupe
