#include "src/raylet/object_transfer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {

void TransferSlots::Acquire() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* free) { return *free > 0; }, &free_));
  --free_;
}

void TransferSlots::Release() {
  absl::MutexLock lock(&mu_);
  ++free_;
}

// Receives one pull of [range.begin, range.end): checks the header against the copy and each
// chunk against the range (in order, inside it), and records how far the range got.
class ObjectTransfer::RangeSink : public ChunkSink {
 public:
  RangeSink(ObjectTransfer* transfer, Range range)
      : transfer_(transfer), range_(range), next_(range.begin) {}

  absl::Status OnHeader(const rpc::ObjectChunk& header) override {
    if (transfer_->size_ < 0) return transfer_->CreateCopy(header);
    if (header.total_size() != transfer_->size_) {
      return absl::DataLossError(absl::StrCat("the source says the object has ",
                                              header.total_size(), " bytes, not ",
                                              transfer_->size_));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<char*> Place(int64_t offset, int64_t length) override {
    // A peer's chunk lands in our mapping only where we asked for it.
    if (transfer_->size_ < 0 || offset != next_ || length < 0 || length > range_.end - offset) {
      return absl::DataLossError(absl::StrCat("an object chunk (offset ", offset, ", ", length,
                                              " bytes) is not the expected one (offset ", next_,
                                              ", at most ", range_.end - next_, " bytes)"));
    }
    return transfer_->mapped_ + offset;
  }

  void Placed(int64_t offset, int64_t length) override { next_ = offset + length; }

  int64_t next() const { return next_; }

 private:
  ObjectTransfer* const transfer_;
  const Range range_;
  int64_t next_;
};

ObjectTransfer::ObjectTransfer(ObjectStore* store, ObjectPuller* puller, TransferSlots* slots,
                               const ObjectTransferOptions& options, const ObjectId& id,
                               std::vector<std::string> sources)
    : store_(store),
      puller_(puller),
      slots_(slots),
      options_(options),
      id_(id),
      sources_(std::move(sources)) {}

ObjectTransfer::~ObjectTransfer() {
  if (mapped_ != nullptr) munmap(mapped_, size_);
}

absl::Status ObjectTransfer::Run() {
  absl::Status status = PullFirstChunk();
  if (status.ok()) {
    int streams = 0;
    {
      absl::MutexLock lock(&mu_);
      for (int64_t begin = received_; begin < size_; begin += options_.range_bytes) {
        pending_.push_back({begin, std::min(size_, begin + options_.range_bytes)});
      }
      streams = static_cast<int>(std::min<int64_t>(std::max(options_.streams, 1), pending_.size()));
    }
    std::vector<std::thread> threads;
    for (int i = 1; i < streams; ++i) threads.emplace_back([this, i] { RunStream(i); });
    RunStream(0);
    for (auto& thread : threads) thread.join();
    absl::MutexLock lock(&mu_);
    if (received_ != size_) {
      status = last_source_error_.ok()
                   ? absl::DataLossError(absl::StrCat("received ", received_, " of ", size_,
                                                      " bytes"))
                   : last_source_error_;
    }
  }
  if (mapped_ != nullptr) {
    munmap(mapped_, size_);
    mapped_ = nullptr;
  }
  if (status.ok()) return store_->Seal(id_);
  if (created_) store_->Abort(id_);
  return status;
}

absl::Status ObjectTransfer::PullFirstChunk() {
  for (const std::string& source : sources_) {
    const Range first{0, options_.chunk_bytes};
    RangeSink sink(this, first);
    slots_->Acquire();
    absl::Status status = puller_->Pull(
        {source, id_, first.begin, first.end - first.begin, options_.chunk_bytes, 0}, &sink);
    slots_->Release();
    if (!create_status_.ok()) return create_status_;  // the store's refusal is not the source's
    absl::MutexLock lock(&mu_);
    if (status.ok() && size_ < 0) status = absl::NotFoundError("the source sent nothing");
    if (status.ok() && sink.next() < std::min(size_, first.end)) {
      status = absl::DataLossError(absl::StrCat("the stream ended at byte ", sink.next()));
    }
    if (status.ok()) {
      received_ = sink.next();
      return absl::OkStatus();
    }
    SourceFailedLocked(source, status);
    if (created_) {
      // Start over at the next source: what this one left in the copy is overwritten.
      received_ = 0;
    }
  }
  absl::MutexLock lock(&mu_);
  return last_source_error_;
}

absl::Status ObjectTransfer::CreateCopy(const rpc::ObjectChunk& header) {
  if (header.total_size() < 0) {
    return absl::DataLossError(
        absl::StrCat("an object header says the object has ", header.total_size(), " bytes"));
  }
  const int64_t size = header.total_size();
  // The copy is the owner's like the primary: it goes when the owner does.
  ObjectOwner owner;
  if (auto worker = WorkerId::FromBinary(header.owner_worker_id()); worker.ok()) {
    owner.worker_id = *worker;
  }
  if (auto node = NodeId::FromBinary(header.owner_node_id()); node.ok()) owner.node_id = *node;
  auto path = store_->Create(id_, size, /*primary=*/false, owner);
  if (!path.ok()) {
    create_status_ = path.status();
    return create_status_;
  }
  created_ = true;
  int fd = open(path->c_str(), O_RDWR | O_CLOEXEC);
  void* mapped = MAP_FAILED;
  if (fd >= 0 && size > 0) mapped = mmap(nullptr, size, PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  if (fd >= 0) close(fd);
  if (fd < 0 || (size > 0 && mapped == MAP_FAILED)) {
    create_status_ =
        absl::InternalError(absl::StrCat("cannot map ", *path, ": ", std::strerror(error)));
    return create_status_;
  }
  if (size > 0) mapped_ = static_cast<char*>(mapped);
  size_ = size;
  return absl::OkStatus();
}

void ObjectTransfer::RunStream(int connection) {
  while (true) {
    Range range;
    std::string source;
    {
      absl::MutexLock lock(&mu_);
      if (pending_.empty() || source_index_ >= sources_.size()) return;
      range = pending_.front();
      pending_.pop_front();
      source = sources_[source_index_];
    }
    Populate(range);
    RangeSink sink(this, range);
    slots_->Acquire();
    absl::Status status = puller_->Pull({source, id_, range.begin, range.end - range.begin,
                                         options_.chunk_bytes, connection},
                                        &sink);
    slots_->Release();
    absl::MutexLock lock(&mu_);
    received_ += sink.next() - range.begin;
    if (sink.next() < range.end) {
      if (status.ok()) {
        status = absl::DataLossError(absl::StrCat("the stream ended at byte ", sink.next(),
                                                  " of ", range.end));
      }
      pending_.push_front({sink.next(), range.end});  // the rest comes from the next source
      SourceFailedLocked(source, status);
    }
  }
}

void ObjectTransfer::Populate(const Range& range) const {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it, which only costs speed
#endif
  static const int64_t kPage = sysconf(_SC_PAGESIZE);
  const int64_t begin = range.begin / kPage * kPage;
  madvise(mapped_ + begin, range.end - begin, MADV_POPULATE_WRITE);
}

void ObjectTransfer::SourceFailedLocked(const std::string& source, const absl::Status& status) {
  // Several streams may see one source fail: only the first moves on to the next source.
  if (source_index_ >= sources_.size() || sources_[source_index_] != source) return;
  ++source_index_;
  last_source_error_ = absl::Status(
      status.code(), absl::StrCat("pulling object ", id_.Hex(), " from the raylet at ", source,
                                  " (copy ", source_index_, " of ", sources_.size(),
                                  "): ", status.message()));
  if (source_index_ < sources_.size()) {
    if (source_index_ == 1) {
      TROUPE_LOG(Warning) << last_source_error_.message() << "; the rest comes from the raylet at "
                          << sources_[source_index_];
    }
  } else if (sources_.size() == 1) {
    TROUPE_LOG(Warning) << last_source_error_.message()
                        << "; no copy is left; the partial copy is dropped";
  } else {
    TROUPE_LOG(Warning) << "all " << sources_.size() << " copies of object " << id_.Hex()
                        << " failed (the first is logged above); the last: "
                        << last_source_error_.message() << "; the partial copy is dropped";
  }
}

}  // namespace troupe
