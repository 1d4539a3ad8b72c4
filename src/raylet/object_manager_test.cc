// ObjectManager without gRPC: fetches go through a FakeObjectPuller that answers on the test
// thread, from scripted chunks or from another node's ObjectManager::ServeObject.
#include "src/raylet/object_manager.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

// Records each pull; answers it with `chunks` (then `end`), or, with `source` set, with what
// that node's ObjectManager serves.
class FakeObjectPuller : public ObjectPuller {
 public:
  struct Pull {
    std::string address;
    ObjectId id;
    int64_t chunk_size;
  };

  absl::Status Pull(const std::string& address, const ObjectId& id, int64_t chunk_size,
                    const ChunkHandler& on_chunk) override {
    pulls.push_back({address, id, chunk_size});
    if (source != nullptr) {
      absl::Status handled;
      absl::Status served = source->ServeObject(id, chunk_size, [&](const rpc::ObjectChunk& chunk) {
        handled = on_chunk(chunk);
        return handled.ok();
      });
      return handled.ok() ? served : handled;
    }
    for (const rpc::ObjectChunk& chunk : chunks) {
      if (absl::Status status = on_chunk(chunk); !status.ok()) return status;
    }
    return end;
  }

  std::vector<rpc::ObjectChunk> chunks;
  absl::Status end;
  ObjectManager* source = nullptr;
  std::vector<struct Pull> pulls;
};

rpc::ObjectChunk Chunk(int64_t total_size, int64_t offset, const std::string& data) {
  rpc::ObjectChunk chunk;
  chunk.set_total_size(total_size);
  chunk.set_offset(offset);
  chunk.set_data(data);
  return chunk;
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
  ~ObjectManagerTest() override { store_->Destroy(); }

  std::string Read(ObjectStore* store, const ObjectId& id) {
    auto location = store->Get(id);
    if (!location.ok()) return "<" + location.status().ToString() + ">";
    std::ifstream in(location->path, std::ios::binary);
    std::stringstream contents;
    contents << in.rdbuf();
    store->Release(id);
    return contents.str();
  }

  const ObjectId id_ = ObjectId::FromIndex(TaskId::FromRandom(), 1);
  std::unique_ptr<ObjectStore> store_ = MakeStore();
  FakeObjectPuller puller_;
  ObjectManager objects_{store_.get(), &puller_};
};

TEST_F(ObjectManagerTest, FetchWritesTheChunksIntoASealedCopy) {
  puller_.chunks = {Chunk(10, 0, "hello"), Chunk(10, 5, "world")};
  ASSERT_TRUE(objects_.Fetch(id_, "10.0.0.2:7000").ok());
  ASSERT_EQ(puller_.pulls.size(), 1u);
  EXPECT_EQ(puller_.pulls[0].address, "10.0.0.2:7000");
  EXPECT_EQ(puller_.pulls[0].id, id_);
  EXPECT_EQ(puller_.pulls[0].chunk_size, kObjectChunkBytes);
  EXPECT_EQ(Read(store_.get(), id_), "helloworld");
}

TEST_F(ObjectManagerTest, FetchOfAnObjectAlreadyHereDoesNotPull) {
  puller_.chunks = {Chunk(2, 0, "ab")};
  ASSERT_TRUE(objects_.Fetch(id_, "a").ok());
  ASSERT_TRUE(objects_.Fetch(id_, "a").ok());
  EXPECT_EQ(puller_.pulls.size(), 1u);
}

TEST_F(ObjectManagerTest, AChunkPastTheSizeIsDataLossAndLeavesNoCopy) {
  puller_.chunks = {Chunk(4, 0, "abc"), Chunk(4, 3, "de")};
  absl::Status status = objects_.Fetch(id_, "a");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_FALSE(store_->Contains(id_));
  // The failed copy is gone: a later fetch starts over.
  puller_.chunks = {Chunk(4, 0, "abcd")};
  EXPECT_TRUE(objects_.Fetch(id_, "a").ok());
  EXPECT_EQ(Read(store_.get(), id_), "abcd");
}

// A buggy or hostile peer must not make us write outside the copy's mapping.
TEST_F(ObjectManagerTest, ChunksOutsideTheObjectAreRefused) {
  for (const auto& chunks : std::vector<std::vector<rpc::ObjectChunk>>{
           {Chunk(4, -2, "ab")},                     // before the start
           {Chunk(4, 5, "")},                        // past the end
           {Chunk(4, 2, "abc")},                     // runs past the end
           {Chunk(-1, 0, "")},                       // a negative size
           {Chunk(4, int64_t{1} << 62, "abcd")}}) {  // offset + size overflows
    puller_.chunks = chunks;
    absl::Status status = objects_.Fetch(id_, "a");
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_FALSE(store_->Contains(id_));
  }
}

TEST_F(ObjectManagerTest, AShortStreamIsDataLoss) {
  puller_.chunks = {Chunk(8, 0, "abcd")};
  absl::Status status = objects_.Fetch(id_, "a");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "received 4 of 8 bytes")) << status;
  EXPECT_FALSE(store_->Contains(id_));
}

TEST_F(ObjectManagerTest, StreamErrorsAndEmptyStreamsFail) {
  puller_.end = absl::UnavailableError("raylet at a: down");
  EXPECT_EQ(objects_.Fetch(id_, "a").code(), absl::StatusCode::kUnavailable);
  puller_.end = absl::OkStatus();
  EXPECT_EQ(objects_.Fetch(id_, "a").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store_->Contains(id_));
}

TEST_F(ObjectManagerTest, ServeObjectSendsChunksOfTheAskedSize) {
  auto path = store_->Create(id_, 5, /*primary=*/true);
  ASSERT_TRUE(path.ok());
  std::ofstream(*path, std::ios::binary) << "abcde";
  ASSERT_TRUE(store_->Seal(id_).ok());
  std::vector<rpc::ObjectChunk> sent;
  ASSERT_TRUE(objects_
                  .ServeObject(id_, 2,
                               [&](const rpc::ObjectChunk& chunk) {
                                 sent.push_back(chunk);
                                 return true;
                               })
                  .ok());
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].data(), "ab");
  EXPECT_EQ(sent[2].offset(), 4);
  EXPECT_EQ(sent[2].data(), "e");
  EXPECT_EQ(sent[1].total_size(), 5);
  EXPECT_EQ(sent[1].object_id(), id_.Binary());
  // A puller that goes away stops the stream.
  sent.clear();
  EXPECT_TRUE(objects_
                  .ServeObject(id_, 2,
                               [&](const rpc::ObjectChunk& chunk) {
                                 sent.push_back(chunk);
                                 return false;
                               })
                  .ok());
  EXPECT_EQ(sent.size(), 1u);
  // Served copies are released: Free removes the object.
  objects_.Free(id_);
  EXPECT_FALSE(store_->Contains(id_));
}

TEST_F(ObjectManagerTest, ServeObjectOfAMissingObjectIsNotFound) {
  absl::Status status = objects_.ServeObject(id_, 0, [](const rpc::ObjectChunk&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

TEST_F(ObjectManagerTest, FetchFromAnotherNodesServe) {
  std::unique_ptr<ObjectStore> remote_store = MakeStore();
  FakeObjectPuller unused;
  ObjectManager remote(remote_store.get(), &unused);
  const std::string data(3 * kObjectChunkBytes / 2, 'x');
  auto path = remote_store->Create(id_, data.size(), /*primary=*/true);
  ASSERT_TRUE(path.ok());
  std::ofstream(*path, std::ios::binary) << data;
  ASSERT_TRUE(remote_store->Seal(id_).ok());

  puller_.source = &remote;
  ASSERT_TRUE(objects_.Fetch(id_, "remote").ok());
  EXPECT_EQ(Read(store_.get(), id_), data);
  remote_store->Destroy();
}

}  // namespace
}  // namespace troupe
