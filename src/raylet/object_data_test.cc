// The object data port end to end on real sockets and real stores: ObjectDataServer serving
// ranges to DataObjectPuller, plaintext and TLS, its refusals (token, garbage, missing objects,
// ranges past the end, its connection cap), the fallback to the other puller, and a transfer that
// loses its source mid-range and finishes from the next copy.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "src/raylet/data_object_puller.h"
#include "src/raylet/object_data_protocol.h"
#include "src/raylet/object_data_server.h"
#include "src/raylet/object_manager.h"
#include "src/tls/certificates.h"

namespace troupe {
namespace {

std::string RandomBytes(int64_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(size, '\0');
  for (auto& byte : bytes) byte = static_cast<char>(random());
  return bytes;
}

bool Eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 1000; ++i) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// A raw TCP connection to 127.0.0.1:port, for sending what a real puller never would.
class RawSocket {
 public:
  explicit RawSocket(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~RawSocket() { close(fd_); }
  bool connected() const { return connected_; }
  void Send(const std::string& bytes) { (void)send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  // Everything until the server closes the connection (or 10 s pass).
  std::string ReadToEnd() {
    std::string out;
    char buffer[4096];
    while (true) {
      const ssize_t got = recv(fd_, buffer, sizeof(buffer), 0);
      if (got <= 0) return out;
      out.append(buffer, got);
    }
  }

 private:
  const int fd_;
  bool connected_ = false;
};

// The code of an error reply in `reply` (the whole of what the server sent).
absl::StatusCode ReplyCode(const std::string& reply) {
  if (reply.size() < kDataReplyFixedBytes) return absl::StatusCode::kUnknown;
  auto sizes = DecodeDataReplyFixed(reply.data());
  return sizes.ok() ? sizes->code : absl::StatusCode::kUnknown;
}

// Collects one pull into a buffer, checking chunks arrive in order.
class BufferSink : public ChunkSink {
 public:
  absl::Status OnHeader(const rpc::ObjectChunk& header) override {
    total_size = header.total_size();
    owner_worker_id = header.owner_worker_id();
    if (buffer.size() != static_cast<size_t>(total_size)) buffer.assign(total_size, '\0');
    return absl::OkStatus();
  }
  absl::StatusOr<char*> Place(int64_t offset, int64_t length) override {
    if (next >= 0 && offset != next) return absl::DataLossError("out of order");
    if (offset + length > total_size) return absl::DataLossError("past the end");
    return buffer.data() + offset;
  }
  void Placed(int64_t offset, int64_t length) override {
    next = offset + length;
    placed += length;
  }
  int64_t total_size = -1;
  int64_t next = -1;
  int64_t placed = 0;
  std::string owner_worker_id;
  std::string buffer;
};

// The other puller (gRPC in the raylet): serves from the node's store in one stream and names
// the node's data port in the header, as the PullObject stream does. A node marked dead fails.
class FakeFallback : public ObjectPuller {
 public:
  struct Node {
    ObjectStore* store = nullptr;
    int data_port = 0;
    bool dead = false;
  };
  void SetNode(const std::string& address, Node node) {
    absl::MutexLock lock(&mu_);
    nodes_[address] = node;
  }
  void MarkDead(const std::string& address) {
    absl::MutexLock lock(&mu_);
    nodes_[address].dead = true;
  }
  int pulls() const {
    absl::MutexLock lock(&mu_);
    return pulls_;
  }

  absl::Status Pull(const PullRange& range, ChunkSink* sink) override {
    Node node;
    {
      absl::MutexLock lock(&mu_);
      ++pulls_;
      node = nodes_[range.address];
    }
    if (node.dead || node.store == nullptr) return absl::UnavailableError("the node is gone");
    auto location = node.store->Get(range.id);
    if (!location.ok()) return location.status();
    std::ifstream in(location->path, std::ios::binary);
    std::stringstream contents;
    contents << in.rdbuf();
    node.store->Release(range.id);
    const std::string bytes = contents.str();
    rpc::ObjectChunk header;
    header.set_object_id(range.id.Binary());
    header.set_total_size(static_cast<int64_t>(bytes.size()));
    header.set_data_port(node.data_port);
    if (absl::Status status = sink->OnHeader(header); !status.ok()) return status;
    const int64_t end = range.length == 0 ? static_cast<int64_t>(bytes.size())
                                          : range.offset + range.length;
    const int64_t chunk = range.chunk_size > 0 ? range.chunk_size : 1 << 20;
    for (int64_t offset = range.offset; offset < end; offset += chunk) {
      const int64_t length = std::min(chunk, end - offset);
      auto place = sink->Place(offset, length);
      if (!place.ok()) return place.status();
      std::memcpy(*place, bytes.data() + offset, length);
      sink->Placed(offset, length);
    }
    return absl::OkStatus();
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  int pulls_ ABSL_GUARDED_BY(mu_) = 0;
};

// TLS material of a one-node cluster whose node certificate names 127.0.0.1.
TlsMaterial MakeTlsMaterial(const std::string& ip) {
  auto ca_files = GenerateCa("object-data-test");
  EXPECT_TRUE(ca_files.ok()) << ca_files.status();
  auto ca = CertificateAuthority::Load(*ca_files);
  EXPECT_TRUE(ca.ok()) << ca.status();
  CertificateRequest request;
  request.common_name = "node";
  request.subject_alt_names = {ip};
  auto node = ca->Issue(request);
  EXPECT_TRUE(node.ok()) << node.status();
  return TlsMaterial{ca_files->cert_pem, node->cert_pem, node->key_pem};
}

class ObjectDataTest : public ::testing::TestWithParam<bool> {
 protected:
  struct Node {
    std::unique_ptr<ObjectStore> store;
    std::unique_ptr<ObjectDataServer> server;
    std::string address;  // the (fake) raylet address: 127.0.0.1:<data port>
  };

  ObjectDataTest() {
    if (tls()) {
      const TlsMaterial material = MakeTlsMaterial("127.0.0.1");
      server_tls_ = *DataTls::ForServer(material);
      client_tls_ = *DataTls::ForClient(material);
    }
  }
  ~ObjectDataTest() override {
    for (auto& node : nodes_) {
      node->server.reset();
      node->store->Destroy();
    }
  }
  bool tls() const { return GetParam(); }

  Node* StartNode(ObjectDataServerOptions options = {}) {
    static int counter = 0;
    const std::string base =
        std::string(std::getenv("TEST_TMPDIR")) + "/node" + std::to_string(counter++);
    auto node = std::make_unique<Node>();
    node->store = std::make_unique<ObjectStore>(
        ObjectStoreOptions{base + "/shm", base + "/spill", /*capacity_bytes=*/64 << 20});
    options.token = token_;
    options.tls = server_tls_;
    auto server = ObjectDataServer::Start(node->store.get(), options);
    EXPECT_TRUE(server.ok()) << server.status();
    node->server = std::move(*server);
    node->address = absl::StrCat("127.0.0.1:", node->server->port());
    fallback_.SetNode(node->address, {node->store.get(), node->server->port()});
    nodes_.push_back(std::move(node));
    return nodes_.back().get();
  }

  ObjectId Put(Node* node, const std::string& bytes, ObjectId id = ObjectId::FromRandom()) {
    ObjectOwner owner{owner_, NodeId::FromRandom()};
    auto path = node->store->Create(id, bytes.size(), /*primary=*/true, owner);
    EXPECT_TRUE(path.ok()) << path.status();
    std::ofstream(*path, std::ios::binary) << bytes;
    EXPECT_TRUE(node->store->Seal(id).ok());
    return id;
  }

  std::unique_ptr<DataObjectPuller> MakePuller(const std::string& token) {
    return std::make_unique<DataObjectPuller>(&fallback_,
                                              DataObjectPullerOptions{token, client_tls_});
  }

  // Pulls through `puller` (the first pull of a source teaches it the data port).
  absl::Status PullInto(DataObjectPuller* puller, Node* node, const ObjectId& id, int64_t offset,
                        int64_t length, int64_t chunk, BufferSink* sink, int connection = 0) {
    return puller->Pull({node->address, id, offset, length, chunk, connection}, sink);
  }

  const ClusterToken token_ = ClusterToken::Generate(ClusterId::FromRandom());
  const WorkerId owner_ = WorkerId::FromRandom();
  std::shared_ptr<const DataTls> server_tls_, client_tls_;
  FakeFallback fallback_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_P(ObjectDataTest, RangesOfEverySizeArriveIntactAcrossChunkBoundaries) {
  Node* node = StartNode();
  auto puller = MakePuller(token_.ToString());
  const ObjectId teacher = Put(node, "x");
  BufferSink first;
  ASSERT_TRUE(PullInto(puller.get(), node, teacher, 0, 0, 0, &first).ok());
  ASSERT_EQ(fallback_.pulls(), 1);  // that one taught the puller the data port

  for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{(3 << 20) + 5}}) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    const std::string bytes = RandomBytes(size, static_cast<uint32_t>(size));
    const ObjectId id = Put(node, bytes);
    BufferSink whole;
    ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 1000, &whole).ok());
    EXPECT_EQ(whole.buffer, bytes);
    EXPECT_EQ(whole.owner_worker_id, owner_.Binary());
    if (size < 3) continue;
    // An odd range from the middle, in chunks that do not divide it, on another connection.
    const int64_t offset = size / 3 + 1, length = size / 3 + 7;
    BufferSink part;
    ASSERT_TRUE(PullInto(puller.get(), node, id, offset, length, 999, &part, 2).ok());
    EXPECT_EQ(part.placed, length);
    EXPECT_EQ(part.buffer.substr(offset, length), bytes.substr(offset, length));
  }
  EXPECT_EQ(fallback_.pulls(), 1);
  EXPECT_EQ(puller->data_pulls(), 6);  // 4 whole objects, 2 parts
}

TEST_P(ObjectDataTest, AWrongTokenIsRefusedWithAClearError) {
  Node* node = StartNode();
  const ObjectId id = Put(node, "secret");
  auto puller = MakePuller(ClusterToken::Generate(ClusterId::FromRandom()).ToString());
  BufferSink teach, sink;
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &teach).ok());  // the fallback's way
  absl::Status status = PullInto(puller.get(), node, id, 0, 0, 0, &sink);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_NE(status.message().find("wrong cluster token"), std::string::npos) << status;
  EXPECT_EQ(sink.placed, 0);
}

// A range reaching past the end is cut at the end, as over gRPC: a transfer's first pull asks for
// one whole chunk before it knows the object's size (an object smaller than a chunk must come).
// A range starting past the end is OutOfRange.
TEST_P(ObjectDataTest, AMissingObjectIsNotFoundAndARangePastTheEndIsCutOrOutOfRange) {
  Node* node = StartNode();
  const ObjectId id = Put(node, "0123456789");
  auto puller = MakePuller(token_.ToString());
  BufferSink teach;
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &teach).ok());
  BufferSink missing, past, beyond, first_chunk;
  EXPECT_EQ(PullInto(puller.get(), node, ObjectId::FromRandom(), 0, 0, 0, &missing).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(PullInto(puller.get(), node, id, 8, 5, 0, &past).ok());
  EXPECT_EQ(past.buffer.substr(8, 2), "89");
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 1 << 20, 0, &first_chunk).ok());
  EXPECT_EQ(first_chunk.buffer.substr(0, 10), "0123456789");
  EXPECT_EQ(PullInto(puller.get(), node, id, 11, 0, 0, &beyond).code(),
            absl::StatusCode::kOutOfRange);
  BufferSink fine;  // the server is still there
  EXPECT_TRUE(PullInto(puller.get(), node, id, 2, 3, 0, &fine).ok());
  EXPECT_EQ(fine.buffer.substr(2, 3), "234");
  EXPECT_EQ(fallback_.pulls(), 1);
}

TEST_P(ObjectDataTest, GarbageTruncatedAndOversizedRequestsDoNotStopTheServer) {
  Node* node = StartNode({.request_timeout = absl::Milliseconds(300)});
  const ObjectId id = Put(node, "still here");
  const int port = node->server->port();
  if (!tls()) {
    RawSocket garbage(port);
    garbage.Send(std::string(64, '\x7f'));
    EXPECT_EQ(ReplyCode(garbage.ReadToEnd()), absl::StatusCode::kInvalidArgument);
    DataRequest huge{std::string(kMaxDataTokenBytes + 1, 'a'), id.Binary(), 0, 0};
    RawSocket oversized(port);
    oversized.Send(EncodeDataRequest(huge));
    EXPECT_EQ(ReplyCode(oversized.ReadToEnd()), absl::StatusCode::kInvalidArgument);
  } else {
    // Plaintext on a TLS port: the handshake fails and the connection closes.
    RawSocket plaintext(port);
    plaintext.Send(EncodeDataRequest({token_.ToString(), id.Binary(), 0, 0}));
    EXPECT_EQ(plaintext.ReadToEnd().find("still here"), std::string::npos);
  }
  {
    RawSocket truncated(port);
    truncated.Send(EncodeDataRequest({token_.ToString(), id.Binary(), 0, 0}).substr(0, 20));
    truncated.ReadToEnd();  // closed by the request timeout
  }
  {
    RawSocket silent(port);  // says nothing: closed by the request timeout
    EXPECT_TRUE(silent.connected());
    silent.ReadToEnd();
  }
  EXPECT_TRUE(Eventually([&] { return node->server->connections() == 0; }));
  auto puller = MakePuller(token_.ToString());
  BufferSink teach, sink;
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &teach).ok());
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &sink).ok());
  EXPECT_EQ(sink.buffer, "still here");
  EXPECT_EQ(puller->data_pulls(), 1);
}

TEST_P(ObjectDataTest, AnUnreachableDataPortFallsBackToTheOtherPuller) {
  Node* node = StartNode();
  const ObjectId id = Put(node, "over the fallback");
  node->server->Shutdown();  // the port refuses connections from now on
  auto puller = MakePuller(token_.ToString());
  for (int i = 0; i < 3; ++i) {
    BufferSink sink;
    ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &sink).ok());
    EXPECT_EQ(sink.buffer, "over the fallback");
  }
  EXPECT_EQ(puller->data_pulls(), 0);
  EXPECT_EQ(fallback_.pulls(), 3);
}

TEST_P(ObjectDataTest, PastTheConnectionCapNewConnectionsAreClosedAndPullsFallBack) {
  Node* node = StartNode({.max_connections = 1, .request_timeout = absl::Seconds(30)});
  const ObjectId id = Put(node, "capped");
  auto puller = MakePuller(token_.ToString());
  BufferSink teach;
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &teach).ok());
  {
    RawSocket holder(node->server->port());
    ASSERT_TRUE(Eventually([&] { return node->server->connections() == 1; }));
    RawSocket refused(node->server->port());
    EXPECT_EQ(refused.ReadToEnd(), "");  // closed unanswered
    BufferSink sink;
    ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &sink).ok());
    EXPECT_EQ(sink.buffer, "capped");
    EXPECT_EQ(puller->data_pulls(), 0);
    EXPECT_EQ(fallback_.pulls(), 2);
  }
  ASSERT_TRUE(Eventually([&] { return node->server->connections() == 0; }));
  BufferSink sink;
  ASSERT_TRUE(PullInto(puller.get(), node, id, 0, 0, 0, &sink).ok());
  EXPECT_EQ(sink.buffer, "capped");
  EXPECT_EQ(puller->data_pulls(), 1);
}

TEST_P(ObjectDataTest, ATransferWhoseSourceStopsMidRangeFinishesFromTheNextCopy) {
  Node* slow = StartNode({.testing_send_delay = absl::Milliseconds(100)});
  Node* healthy = StartNode();
  const std::string bytes = RandomBytes(16 << 20, 7);
  const ObjectId id = Put(slow, bytes);
  Put(healthy, bytes, id);
  auto puller = MakePuller(token_.ToString());
  Node* local = StartNode();
  ObjectManagerOptions options;
  options.transfer = {/*chunk_bytes=*/256 << 10, /*range_bytes=*/4 << 20, /*streams=*/2};
  ObjectManager objects(local->store.get(), puller.get(), options);
  absl::Status fetched;
  std::thread fetch([&] { fetched = objects.Fetch(id, {slow->address, healthy->address}); });
  // Stop the first source once a range over its data port is under way.
  ASSERT_TRUE(Eventually([&] { return slow->server->ranges_started() > 0; }));
  fallback_.MarkDead(slow->address);
  slow->server->Shutdown();
  fetch.join();
  ASSERT_TRUE(fetched.ok()) << fetched;
  auto location = local->store->Get(id);
  ASSERT_TRUE(location.ok());
  std::ifstream in(location->path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  local->store->Release(id);
  EXPECT_TRUE(contents.str() == bytes);
  EXPECT_GT(healthy->server->ranges_started(), 0);  // the rest came over its data port
}

// Once a source's data port is known, a transfer's first pull (one whole chunk, before the size
// is known) goes over it too: an object smaller than a chunk must still come (the chaos test
// found every such fetch failing "outside object" before the server cut ranges at the end).
TEST_P(ObjectDataTest, AfterThePortIsKnownObjectsSmallerThanAChunkStillTransfer) {
  Node* source = StartNode();
  const std::string big = RandomBytes(3 << 20, 11);
  const std::string small = RandomBytes(131082, 12);
  const ObjectId big_id = Put(source, big);
  const ObjectId small_id = Put(source, small);
  auto puller = MakePuller(token_.ToString());
  Node* local = StartNode();
  ObjectManagerOptions options;
  options.transfer = {/*chunk_bytes=*/1 << 20, /*range_bytes=*/1 << 20, /*streams=*/2};
  ObjectManager objects(local->store.get(), puller.get(), options);
  absl::Status fetched = objects.Fetch(big_id, {source->address});  // learns the data port
  ASSERT_TRUE(fetched.ok()) << fetched;
  const int64_t ranges_before = source->server->ranges_started();
  fetched = objects.Fetch(small_id, {source->address});
  ASSERT_TRUE(fetched.ok()) << fetched;
  EXPECT_GT(source->server->ranges_started(), ranges_before);  // it came over the data port
  auto location = local->store->Get(small_id);
  ASSERT_TRUE(location.ok());
  std::ifstream in(location->path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  local->store->Release(small_id);
  EXPECT_TRUE(contents.str() == small);
}

INSTANTIATE_TEST_SUITE_P(Transport, ObjectDataTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tls" : "Plaintext"; });

}  // namespace
}  // namespace troupe
