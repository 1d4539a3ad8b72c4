// ObjectManager without gRPC: fetches go through a FakeObjectPuller that answers on the pulling
// threads, from scripted messages or from another node's ObjectManager::ServeObject.
#include "src/raylet/object_manager.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

// A data message of a scripted stream.
struct Data {
  int64_t offset;
  std::string bytes;
};

// One source as the fake serves it: scripted (header, data, end) or, with `node` set, what that
// node's ObjectManager serves for the asked range. After `fail_after` data messages in all (-1:
// never), its streams break with Unavailable, as when the source's raylet dies.
struct FakeSource {
  ObjectManager* node = nullptr;
  int64_t header_size = 0;
  std::vector<Data> data;
  absl::Status end;
  int fail_after = -1;
};

// Feeds a ChunkSink as GrpcObjectPuller does: header, then each message's bytes copied to where
// the sink places them.
class SinkWriter : public ChunkWriter {
 public:
  // `may_send`: false once the source is dead.
  SinkWriter(ChunkSink* sink, std::function<bool()> may_send)
      : sink_(sink), may_send_(std::move(may_send)) {}
  bool WriteHeader(const rpc::ObjectChunk& header) override {
    status = sink_->OnHeader(header);
    return status.ok();
  }
  bool WriteData(int64_t offset, const char* data, int64_t length,
                 const std::shared_ptr<const void>&) override {
    if (!may_send_()) {
      broke = true;
      return false;
    }
    auto place = sink_->Place(offset, length);
    if (!place.ok()) {
      status = place.status();
      return false;
    }
    std::memcpy(*place, data, length);
    sink_->Placed(offset, length);
    bytes += length;
    return true;
  }
  absl::Status status;
  bool broke = false;
  int64_t bytes = 0;

 private:
  ChunkSink* const sink_;
  const std::function<bool()> may_send_;
};

class FakeObjectPuller : public ObjectPuller {
 public:
  absl::Status Pull(const PullRange& range, ChunkSink* sink) override {
    FakeSource source;
    {
      absl::MutexLock lock(&mu);
      pulls.push_back(range);
      source = sources[range.address];
      max_concurrent = std::max(max_concurrent, ++concurrent);
      // Give other streams the chance to overlap (bounded: never waits past a second).
      mu.AwaitWithTimeout(absl::Condition(this, &FakeObjectPuller::EnoughOverlap), overlap_wait);
    }
    absl::Status status = Serve(source, range, sink);
    absl::MutexLock lock(&mu);
    --concurrent;
    return status;
  }

  bool EnoughOverlap() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return concurrent >= wait_for_concurrent;
  }

  absl::Status Serve(const FakeSource& source, const PullRange& range, ChunkSink* sink) {
    SinkWriter writer(sink, [this, address = range.address, fail_after = source.fail_after] {
      absl::MutexLock lock(&mu);
      return fail_after < 0 || sent[address]++ < fail_after;
    });
    if (source.node != nullptr) {
      absl::Status served =
          source.node->ServeObject(range.id, range.offset, range.length, range.chunk_size, &writer);
      {
        absl::MutexLock lock(&mu);
        bytes_from[range.address] += writer.bytes;
      }
      if (!writer.status.ok()) return writer.status;
      if (writer.broke) return absl::UnavailableError("the source's raylet died");
      return served;
    }
    if (source.header_size < -1) return source.end;  // a stream with no header
    rpc::ObjectChunk header;
    header.set_total_size(source.header_size);
    if (!writer.WriteHeader(header)) return writer.status;
    for (const Data& data : source.data) {
      if (!writer.WriteData(data.offset, data.bytes.data(), data.bytes.size(), nullptr)) {
        return writer.broke ? absl::UnavailableError("the source's raylet died") : writer.status;
      }
    }
    return source.end;
  }

  absl::Mutex mu;
  std::map<std::string, FakeSource> sources ABSL_GUARDED_BY(mu);
  std::vector<PullRange> pulls ABSL_GUARDED_BY(mu);
  std::map<std::string, int64_t> bytes_from ABSL_GUARDED_BY(mu);
  std::map<std::string, int> sent ABSL_GUARDED_BY(mu);  // data messages per source
  int concurrent ABSL_GUARDED_BY(mu) = 0;
  int max_concurrent ABSL_GUARDED_BY(mu) = 0;
  int wait_for_concurrent ABSL_GUARDED_BY(mu) = 0;
  absl::Duration overlap_wait ABSL_GUARDED_BY(mu) = absl::Seconds(1);
};

FakeSource Scripted(int64_t size, std::vector<Data> data, absl::Status end = absl::OkStatus()) {
  FakeSource source;
  source.header_size = size;
  source.data = std::move(data);
  source.end = std::move(end);
  return source;
}

std::string RandomBytes(int64_t size) {
  std::mt19937_64 random(size);
  std::string bytes(size, '\0');
  for (auto& b : bytes) b = static_cast<char>(random());
  return bytes;
}

// Small chunks and ranges, so a small object moves in many pieces over several streams.
ObjectManagerOptions SmallChunks(int streams = 3, int max_streams = 16) {
  ObjectManagerOptions options;
  options.transfer.chunk_bytes = 1 << 10;
  options.transfer.range_bytes = 4 << 10;
  options.transfer.streams = streams;
  options.max_streams = max_streams;
  return options;
}

class ObjectManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<ObjectStore> MakeStore() {
    static int counter = 0;
    std::string base =
        std::string(std::getenv("TEST_TMPDIR")) + "/node" + std::to_string(counter++);
    return std::make_unique<ObjectStore>(
        ObjectStoreOptions{base + "/shm", base + "/spill", /*capacity_bytes=*/16 << 20});
  }
  ~ObjectManagerTest() override {
    for (auto& store : stores_) store->Destroy();
  }

  std::string Read(ObjectStore* store, const ObjectId& id) {
    auto location = store->Get(id);
    if (!location.ok()) return "<" + location.status().ToString() + ">";
    std::ifstream in(location->path, std::ios::binary);
    std::stringstream contents;
    contents << in.rdbuf();
    store->Release(id);
    return contents.str();
  }

  // Another node holding `data` as object id_, served from its own store.
  ObjectManager* RemoteWith(const std::string& data) {
    stores_.push_back(MakeStore());
    ObjectStore* store = stores_.back().get();
    auto path = store->Create(id_, data.size(), /*primary=*/true);
    EXPECT_TRUE(path.ok()) << path.status();
    std::ofstream(*path, std::ios::binary) << data;
    EXPECT_TRUE(store->Seal(id_).ok());
    remotes_.push_back(std::make_unique<ObjectManager>(store, &unused_));
    return remotes_.back().get();
  }

  void SetSource(const std::string& address, FakeSource source) {
    absl::MutexLock lock(&puller_.mu);
    puller_.sources[address] = std::move(source);
    puller_.sent[address] = 0;
  }
  FakeSource Remote(ObjectManager* node, int fail_after = -1) {
    FakeSource source;
    source.node = node;
    source.fail_after = fail_after;
    return source;
  }

  const ObjectId id_ = ObjectId::FromIndex(TaskId::FromRandom(), 1);
  std::vector<std::unique_ptr<ObjectStore>> stores_;
  std::vector<std::unique_ptr<ObjectManager>> remotes_;
  FakeObjectPuller unused_;
  FakeObjectPuller puller_;
  ObjectStore* store_ = (stores_.push_back(MakeStore()), stores_.back().get());
  ObjectManager objects_{store_, &puller_};
};

TEST_F(ObjectManagerTest, FetchWritesTheChunksIntoASealedCopy) {
  SetSource("10.0.0.2:7000", Scripted(10, {{0, "hello"}, {5, "world"}}));
  ASSERT_TRUE(objects_.Fetch(id_, {"10.0.0.2:7000"}).ok());
  absl::MutexLock lock(&puller_.mu);
  ASSERT_EQ(puller_.pulls.size(), 1u);
  EXPECT_EQ(puller_.pulls[0].address, "10.0.0.2:7000");
  EXPECT_EQ(puller_.pulls[0].id, id_);
  EXPECT_EQ(puller_.pulls[0].chunk_size, kObjectChunkBytes);
  EXPECT_EQ(Read(store_, id_), "helloworld");
}

TEST_F(ObjectManagerTest, FetchOfAnObjectAlreadyHereDoesNotPull) {
  SetSource("a", Scripted(2, {{0, "ab"}}));
  ASSERT_TRUE(objects_.Fetch(id_, {"a"}).ok());
  ASSERT_TRUE(objects_.Fetch(id_, {"a"}).ok());
  absl::MutexLock lock(&puller_.mu);
  EXPECT_EQ(puller_.pulls.size(), 1u);
}

TEST_F(ObjectManagerTest, AChunkPastTheSizeIsDataLossAndLeavesNoCopy) {
  SetSource("a", Scripted(4, {{0, "abc"}, {3, "de"}}));
  absl::Status status = objects_.Fetch(id_, {"a"});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_FALSE(store_->Contains(id_));
  EXPECT_EQ(store_->Stats().used_bytes, 0);
  // The failed copy is gone: a later fetch starts over.
  SetSource("a", Scripted(4, {{0, "abcd"}}));
  EXPECT_TRUE(objects_.Fetch(id_, {"a"}).ok());
  EXPECT_EQ(Read(store_, id_), "abcd");
}

// A buggy or hostile peer must not make us write outside the copy's mapping.
TEST_F(ObjectManagerTest, ChunksOutsideTheObjectAreRefused) {
  for (const FakeSource& source : {
           Scripted(4, {{-2, "ab"}}),                // before the start
           Scripted(4, {{5, ""}}),                   // past the end
           Scripted(4, {{2, "abc"}}),                // runs past the end
           Scripted(4, {{2, "ab"}}),                 // out of order (a gap)
           Scripted(-1, {}),                         // a negative size
           Scripted(4, {{int64_t{1} << 62, "abcd"}})  // offset + size overflows
       }) {
    SetSource("a", source);
    absl::Status status = objects_.Fetch(id_, {"a"});
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_FALSE(store_->Contains(id_));
    EXPECT_EQ(store_->Stats().used_bytes, 0);
  }
}

TEST_F(ObjectManagerTest, AShortStreamIsDataLoss) {
  SetSource("a", Scripted(8, {{0, "abcd"}}));
  absl::Status status = objects_.Fetch(id_, {"a"});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "ended at byte 4")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "raylet at a")) << status;
  EXPECT_FALSE(store_->Contains(id_));
}

TEST_F(ObjectManagerTest, StreamErrorsAndEmptyStreamsFail) {
  FakeSource down;
  down.header_size = -2;  // no header
  down.end = absl::UnavailableError("raylet at a: down");
  SetSource("a", down);
  EXPECT_EQ(objects_.Fetch(id_, {"a"}).code(), absl::StatusCode::kUnavailable);
  down.end = absl::OkStatus();
  SetSource("a", down);
  EXPECT_EQ(objects_.Fetch(id_, {"a"}).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store_->Contains(id_));
  EXPECT_EQ(objects_.Fetch(id_, {}).code(), absl::StatusCode::kInvalidArgument);
}

// Records what ServeObject writes.
class RecordingWriter : public ChunkWriter {
 public:
  explicit RecordingWriter(int accept = 1 << 30) : accept_(accept) {}
  bool WriteHeader(const rpc::ObjectChunk& h) override {
    header = h;
    return true;
  }
  bool WriteData(int64_t offset, const char* data, int64_t length,
                 const std::shared_ptr<const void>& mapping) override {
    held = mapping;  // as a writer still sending would
    chunks.push_back({offset, std::string(data, length)});
    return static_cast<int>(chunks.size()) < accept_;
  }
  rpc::ObjectChunk header;
  std::vector<Data> chunks;
  std::shared_ptr<const void> held;

 private:
  const int accept_;
};

TEST_F(ObjectManagerTest, ServeObjectSendsAHeaderThenTheRangeInChunksOfTheAskedSize) {
  auto path = store_->Create(id_, 5, /*primary=*/true);
  ASSERT_TRUE(path.ok());
  std::ofstream(*path, std::ios::binary) << "abcde";
  ASSERT_TRUE(store_->Seal(id_).ok());
  RecordingWriter whole;
  ASSERT_TRUE(objects_.ServeObject(id_, 0, 0, 2, &whole).ok());
  EXPECT_EQ(whole.header.total_size(), 5);
  EXPECT_EQ(whole.header.object_id(), id_.Binary());
  EXPECT_TRUE(whole.header.data().empty());
  ASSERT_EQ(whole.chunks.size(), 3u);
  EXPECT_EQ(whole.chunks[0].bytes, "ab");
  EXPECT_EQ(whole.chunks[2].offset, 4);
  EXPECT_EQ(whole.chunks[2].bytes, "e");
  // A range: bytes [1, 4).
  RecordingWriter range;
  ASSERT_TRUE(objects_.ServeObject(id_, 1, 3, 2, &range).ok());
  ASSERT_EQ(range.chunks.size(), 2u);
  EXPECT_EQ(range.chunks[0].offset, 1);
  EXPECT_EQ(range.chunks[0].bytes, "bc");
  EXPECT_EQ(range.chunks[1].bytes, "d");
  // A puller that goes away stops the stream.
  RecordingWriter leaves(/*accept=*/1);
  EXPECT_TRUE(objects_.ServeObject(id_, 0, 0, 2, &leaves).ok());
  EXPECT_EQ(leaves.chunks.size(), 1u);
  // An offset past the end is refused.
  RecordingWriter past;
  EXPECT_EQ(objects_.ServeObject(id_, 6, 0, 2, &past).code(), absl::StatusCode::kOutOfRange);
  // A mapping still held by a writer keeps the object pinned: Free waits for its release.
  objects_.Free(id_);
  EXPECT_EQ(store_->Stats().num_objects, 1);
  whole.held.reset();
  range.held.reset();
  leaves.held.reset();
  EXPECT_EQ(store_->Stats().num_objects, 0);
  EXPECT_FALSE(store_->Contains(id_));
}

TEST_F(ObjectManagerTest, ServeObjectOfAMissingObjectIsNotFound) {
  RecordingWriter writer;
  absl::Status status = objects_.ServeObject(id_, 0, 0, 0, &writer);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

TEST_F(ObjectManagerTest, FetchMovesAnObjectInRangesOverSeveralStreams) {
  ObjectManager objects(store_, &puller_, SmallChunks(/*streams=*/3));
  const std::string data = RandomBytes(100 * 1024 + 17);
  SetSource("remote", Remote(RemoteWith(data)));
  {
    absl::MutexLock lock(&puller_.mu);
    puller_.wait_for_concurrent = 3;
  }
  ASSERT_TRUE(objects.Fetch(id_, {"remote"}).ok());
  EXPECT_EQ(Read(store_, id_), data);
  absl::MutexLock lock(&puller_.mu);
  // The first chunk alone, then 4 KiB ranges; each asked once, on three connections.
  EXPECT_EQ(puller_.pulls.size(), 1 + (data.size() - 1024 + 4095) / 4096);
  std::set<int> connections;
  for (const PullRange& pull : puller_.pulls) {
    connections.insert(pull.connection);
    EXPECT_EQ(pull.chunk_size, 1024);
  }
  EXPECT_EQ(connections.size(), 3u);
  EXPECT_EQ(puller_.max_concurrent, 3);  // the per-transfer cap
}

TEST_F(ObjectManagerTest, ASourceThatDiesMidTransferIsReplacedByTheNextCopy) {
  ObjectManager objects(store_, &puller_, SmallChunks(/*streams=*/2));
  const std::string data = RandomBytes(64 * 1024);
  SetSource("dies", Remote(RemoteWith(data), /*fail_after=*/10));
  SetSource("lives", Remote(RemoteWith(data)));
  ASSERT_TRUE(objects.Fetch(id_, {"dies", "lives"}).ok());
  EXPECT_EQ(Read(store_, id_), data);
  absl::MutexLock lock(&puller_.mu);
  // Nothing was pulled twice: the second copy sent only what the first did not.
  EXPECT_GT(puller_.bytes_from["dies"], 0);
  EXPECT_EQ(puller_.bytes_from["dies"] + puller_.bytes_from["lives"],
            static_cast<int64_t>(data.size()));
  for (const PullRange& pull : puller_.pulls) {
    if (pull.address == "lives") EXPECT_GT(pull.offset, 0);
  }
}

TEST_F(ObjectManagerTest, WhenEveryCopyFailsTheHalfWrittenCopyIsAborted) {
  ObjectManager objects(store_, &puller_, SmallChunks());
  const std::string data = RandomBytes(64 * 1024);
  SetSource("first", Remote(RemoteWith(data), /*fail_after=*/5));
  SetSource("second", Remote(RemoteWith(data), /*fail_after=*/3));
  absl::Status status = objects.Fetch(id_, {"first", "second"});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "raylet at second (copy 2 of 2)")) << status;
  EXPECT_FALSE(store_->Contains(id_));
  EXPECT_EQ(store_->Stats().used_bytes, 0);
  EXPECT_EQ(store_->Stats().num_objects, 0);
  // Nothing is left pinned or half-there: a later fetch makes a whole copy.
  SetSource("second", Remote(remotes_.back().get()));
  ASSERT_TRUE(objects.Fetch(id_, {"second"}).ok());
  EXPECT_EQ(Read(store_, id_), data);
}

TEST_F(ObjectManagerTest, ManyFailingCopiesLogASummaryNotALineEach) {
  std::vector<std::string> sources;
  for (int i = 0; i < 50; ++i) {
    sources.push_back(absl::StrCat("10.0.0.", i, ":7000"));
    SetSource(sources.back(), Scripted(-2, {}, absl::UnavailableError("connection refused")));
  }
  ::testing::internal::CaptureStderr();
  absl::Status status = objects_.Fetch(id_, sources);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "(copy 50 of 50)")) << status;
  {
    absl::MutexLock lock(&puller_.mu);
    EXPECT_EQ(puller_.pulls.size(), 50u);  // every copy was tried
  }
  int lines = 0;
  for (size_t at = 0; (at = log.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_LE(lines, 2) << log;  // the first failure and a summary
  EXPECT_TRUE(absl::StrContains(log, "all 50 copies of object")) << log;
}

TEST_F(ObjectManagerTest, AFullStoreIsReportedWithoutTryingOtherCopies) {
  const std::string data = RandomBytes(1024);
  SetSource("a", Scripted(32 << 20, {}));  // twice the store's capacity
  SetSource("b", Remote(RemoteWith(data)));
  absl::Status status = objects_.Fetch(id_, {"a", "b"});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  absl::MutexLock lock(&puller_.mu);
  EXPECT_EQ(puller_.pulls.size(), 1u);
}

TEST_F(ObjectManagerTest, StreamsOfAllTransfersStayUnderTheRayletsCap) {
  ObjectManager objects(store_, &puller_, SmallChunks(/*streams=*/4, /*max_streams=*/2));
  const ObjectId other = ObjectId::FromIndex(TaskId::FromRandom(), 1);
  const std::string data = RandomBytes(64 * 1024);
  SetSource("remote", Remote(RemoteWith(data)));
  {
    absl::MutexLock lock(&puller_.mu);
    puller_.wait_for_concurrent = 4;  // would reach 4 or more without the cap
    puller_.overlap_wait = absl::Milliseconds(100);
  }
  std::thread a([&] { EXPECT_TRUE(objects.Fetch(id_, {"remote"}).ok()); });
  std::thread b([&] { EXPECT_EQ(objects.Fetch(other, {"remote"}).code(),
                                absl::StatusCode::kNotFound); });
  a.join();
  b.join();
  EXPECT_EQ(Read(store_, id_), data);
  absl::MutexLock lock(&puller_.mu);
  EXPECT_EQ(puller_.max_concurrent, 2);
}

TEST_F(ObjectManagerTest, ConcurrentFetchesOfOneObjectShareOneTransfer) {
  ObjectManager objects(store_, &puller_, SmallChunks(/*streams=*/1));
  const std::string data = RandomBytes(16 * 1024);
  SetSource("remote", Remote(RemoteWith(data)));
  std::vector<std::thread> fetches;
  for (int i = 0; i < 4; ++i) {
    fetches.emplace_back([&] { EXPECT_TRUE(objects.Fetch(id_, {"remote"}).ok()); });
  }
  for (auto& fetch : fetches) fetch.join();
  EXPECT_EQ(Read(store_, id_), data);
  absl::MutexLock lock(&puller_.mu);
  EXPECT_LE(puller_.pulls.size(), 1u + 4u);  // one transfer: the first chunk, then 4 ranges
}

}  // namespace
}  // namespace troupe
