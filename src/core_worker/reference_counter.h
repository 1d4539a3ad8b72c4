// Who still needs each object, as seen from one process. An object is needed while this process
// holds ObjectRefs to it (local), has tasks in flight that take it as an argument (submitted),
// has other processes borrowing it (borrowers, for objects it owns), or holds another object that
// contains a reference to it. When nothing needs an object any more:
//   - for an object this process owns, `on_owned_free` runs (drop its value everywhere);
//   - for a borrowed one, `on_borrowed_release` runs (drop cached values; tell the owner we let
//     go if it was told we hold it).
// Thread-safe; callbacks run without the lock held.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "src/common/ids.h"

namespace troupe {

struct ObjectRefInfo {
  ObjectId id;
  std::string owner_address;
};

class ReferenceCounter {
 public:
  using FreeCallback =
      std::function<void(const ObjectId& id, std::vector<ObjectRefInfo> contained)>;
  using ReleaseCallback =
      std::function<void(const ObjectId& id, const std::string& owner, bool owner_knows)>;

  ReferenceCounter(FreeCallback on_owned_free, ReleaseCallback on_borrowed_release);
  // The owner address of objects this process creates; set once, before any other call.
  void SetSelfAddress(std::string address) { self_address_ = std::move(address); }

  void AddLocal(const ObjectRefInfo& ref);
  void RemoveLocal(const ObjectId& id);
  void AddSubmitted(const ObjectRefInfo& ref);
  void RemoveSubmitted(const ObjectId& id);
  void AddBorrower(const ObjectId& id, const std::string& borrower);
  void RemoveBorrower(const ObjectId& id, const std::string& borrower);
  // `outer` (owned here) holds references to `contained`: they live at least as long as it.
  void SetContained(const ObjectId& outer, std::vector<ObjectRefInfo> contained);
  // A task this process submitted returned `outer` with references to `contained` inside:
  // they are held (as local references) as long as `outer` is, or let go at once if nothing
  // holds `outer`. Owners of the borrowed ones already count this process as a borrower (the
  // worker told them), so letting go tells them.
  void SetContainedFromReturn(const ObjectId& outer, std::vector<ObjectRefInfo> contained);
  // Borrowed objects this process holds and has not yet told their owners about; marks them
  // reported. Sent back with a task's reply so owners keep the objects alive.
  std::vector<ObjectRefInfo> TakeUnreportedBorrows();

  bool IsTracked(const ObjectId& id) const;
  // Tracked, and owned by this process.
  bool IsOwnedHere(const ObjectId& id) const;
  bool OwnedByMe(const ObjectRefInfo& ref) const { return ref.owner_address == self_address_; }
  size_t num_tracked() const;

 private:
  struct Entry {
    std::string owner_address;
    int64_t local = 0;
    int64_t submitted = 0;
    absl::flat_hash_set<std::string> borrowers;
    std::vector<ObjectRefInfo> contained;
    bool reported = false;  // borrowed: the owner knows we hold it
  };
  // Removes the entry if nothing needs it; returns the callback to run, if any.
  std::function<void()> MaybeReleaseLocked(const ObjectId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string self_address_;
  FreeCallback on_owned_free_;
  ReleaseCallback on_borrowed_release_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ObjectId, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
