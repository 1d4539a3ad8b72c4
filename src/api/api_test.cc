// The API templates (serialization, registry, Task/Put/Get/Wait) against an in-process fake
// runtime that runs each task at once. The real runtime is tested in tests/.
#include "troupe/api.h"

#include <functional>
#include <map>
#include <tuple>
#include <type_traits>

#include "gtest/gtest.h"

namespace {

struct Point {
  double x = 0;
  double y = 0;
  std::string label;
  MSGPACK_DEFINE(x, y, label);
};

int Plus(int a, int b) { return a + b; }
double Scale(const std::vector<double>& values, double factor) {
  double sum = 0;
  for (double v : values) sum += v * factor;
  return sum;
}
Point Midpoint(Point a, Point b) { return {(a.x + b.x) / 2, (a.y + b.y) / 2, a.label + b.label}; }
int Overloaded(int a) { return a; }
int Overloaded(int a, int b) { return a * b; }
std::vector<float> Ones(int n) { return std::vector<float>(n, 1.0f); }
int Fail(int code) { throw std::invalid_argument("bad code " + std::to_string(code)); }
void Nothing() {}
int SumRefs(std::vector<troupe::ObjectRef<int>> refs) {
  int sum = 0;
  for (const auto& ref : refs) sum += *troupe::Get(ref);
  return sum;
}

// Every parameter form a C++ user writes: T, const T&, T& (the callee modifies its own copy) and
// T&&, in functions, actor factories and actor methods.
int AppendAndSum(std::vector<int>& values, int extra) {
  values.push_back(extra);
  int sum = 0;
  for (int v : values) sum += v;
  return sum;
}
std::string Mixed(int count, const std::string& prefix, std::vector<int>& seen,
                  std::string&& suffix) {
  seen.push_back(count);
  return prefix + std::to_string(seen.size()) + suffix;
}
std::tuple<int, std::string> SplitName(std::string name) {
  const auto space = name.find(' ');
  return {static_cast<int>(space), name.substr(space + 1)};
}

class Bag {
 public:
  static Bag* Create(std::vector<int>& seed) {
    seed.push_back(-1);
    return new Bag{seed};
  }
  size_t Append(std::vector<int>& more, const int& extra) {
    more.push_back(extra);
    items.insert(items.end(), more.begin(), more.end());
    return items.size();
  }
  std::vector<int> items;
};

TROUPE_REMOTE(Plus, Scale, Midpoint, TROUPE_FUNC(Overloaded, int),
              TROUPE_FUNC(Overloaded, int, int), Ones, Fail, Nothing, SumRefs, AppendAndSum, Mixed,
              SplitName, Bag::Create, &Bag::Append);

using troupe::internal::Buffer;
using troupe::internal::RefInfo;

// Runs tasks immediately; objects live in a map; counts references.
class FakeRuntime : public troupe::internal::Runtime {
 public:
  std::vector<RefInfo> SubmitTask(const std::string& function_name,
                                  std::vector<troupe::internal::TaskArgument> args,
                                  const troupe::internal::TaskOptions& options) override {
    last_options = options;
    std::vector<Buffer> buffers;
    for (auto& arg : args) {
      buffers.push_back(arg.by_reference ? objects.at(arg.ref.object_id) : Hold(arg.value));
    }
    const auto* invoker =
        troupe::internal::FunctionRegistry::Instance().FindFunction(function_name);
    EXPECT_NE(invoker, nullptr) << function_name;
    std::vector<RefInfo> refs;
    for (int i = 0; i < options.num_returns; ++i) refs.push_back(NewRef());
    try {
      auto result = (*invoker)(buffers, options.num_returns);
      if (options.num_returns == 1) {
        objects[refs[0].object_id] = Hold(result.value.ToString());
      } else {
        EXPECT_EQ(result.parts.size(), refs.size());
        for (size_t i = 0; i < refs.size(); ++i) {
          objects[refs[i].object_id] = Hold(result.parts.at(i).ToString());
        }
      }
    } catch (const std::exception& e) {
      for (const auto& ref : refs) errors[ref.object_id] = e.what();
    }
    for (const auto& ref : refs) AddLocalRef(ref);
    return refs;
  }
  RefInfo Put(size_t size, const std::function<void(char*)>& write,
              std::vector<RefInfo> contained) override {
    std::string bytes(size, '\0');
    write(bytes.data());
    RefInfo ref = NewRef();
    objects[ref.object_id] = Hold(std::move(bytes));
    contained_count += contained.size();
    AddLocalRef(ref);
    return ref;
  }
  std::vector<Buffer> Get(const std::vector<RefInfo>& refs, int64_t) override {
    std::vector<Buffer> out;
    for (const auto& ref : refs) {
      if (errors.count(ref.object_id)) throw troupe::TroupeError(errors[ref.object_id]);
      out.push_back(objects.at(ref.object_id));
    }
    return out;
  }
  void RecordMetric(const troupe::internal::MetricSpec&, double,
                    const std::map<std::string, std::string>&) override {}
  std::vector<bool> Wait(const std::vector<RefInfo>& refs, int, int64_t, bool) override {
    return std::vector<bool>(refs.size(), true);
  }
  void Cancel(const RefInfo&, bool, bool) override {}
  bool IsCancelled() override { return false; }
  std::string CreateActor(const std::string&, std::vector<troupe::internal::TaskArgument>,
                          const troupe::internal::ActorOptions&) override {
    throw troupe::TroupeError("actors need a real cluster (tests/actors_test.cc)");
  }
  std::vector<RefInfo> SubmitActorTask(const std::string&, const std::string&,
                                       std::vector<troupe::internal::TaskArgument>,
                                       const troupe::internal::ActorCallOptions& options) override {
    last_call_options = options;
    throw troupe::TroupeError("actors need a real cluster");
  }
  void ReportStreamItem(size_t, const std::function<void(char*)>&, std::vector<RefInfo>) override {
    throw troupe::TroupeError("streams need a real cluster (tests/returns_test.cc)");
  }
  std::optional<RefInfo> NextStreamItem(const RefInfo&, int64_t) override {
    throw troupe::TroupeError("streams need a real cluster");
  }
  int64_t NumUnreadStreamItems(const RefInfo&) override { return 0; }
  void KillActor(const std::string&, bool) override {}
  std::string GetNamedActor(const std::string&, const std::string&) override { return ""; }
  void ExitActor() override {}
  bool WasCurrentActorRestarted() override { return false; }
  std::string CreatePlacementGroup(const troupe::internal::PlacementGroupSpec&) override {
    throw troupe::TroupeError("placement groups need a real cluster");
  }
  void RemovePlacementGroup(const std::string&) override {}
  bool WaitPlacementGroup(const std::string&, int64_t) override { return false; }
  std::string GetPlacementGroup(const std::string&) override { return ""; }
  std::vector<troupe::PlacementGroupInfo> ListPlacementGroups() override { return {}; }
  std::optional<troupe::PlacementGroupInfo> GetPlacementGroupInfo(const std::string&) override {
    return std::nullopt;
  }
  // The KV: a map of (namespace, key), as the GCS keeps it.
  std::optional<std::string> KvGet(const std::string& ns, const std::string& key) override {
    auto it = kv.find({ns, key});
    if (it == kv.end()) return std::nullopt;
    return it->second;
  }
  bool KvPut(const std::string& ns, const std::string& key, const std::string& value,
             bool overwrite) override {
    auto [it, added] = kv.try_emplace({ns, key}, value);
    if (!added && overwrite) it->second = value;
    return added;
  }
  int64_t KvDelete(const std::string& ns, const std::string& key, bool) override {
    return static_cast<int64_t>(kv.erase({ns, key}));
  }
  bool KvExists(const std::string& ns, const std::string& key) override {
    return kv.count({ns, key}) > 0;
  }
  std::vector<std::string> KvKeys(const std::string& ns, const std::string& prefix) override {
    std::vector<std::string> keys;
    for (const auto& [where, value] : kv) {
      if (where.first == ns && where.second.compare(0, prefix.size(), prefix) == 0) {
        keys.push_back(where.second);
      }
    }
    return keys;
  }
  std::string JobNamespace() override { return "job-test"; }
  std::string CurrentActorId() override { return ""; }
  std::string NodeIp() override { return "127.0.0.1"; }
  troupe::RuntimeContext GetRuntimeContext() override {
    troupe::RuntimeContext context;
    context.job_id = "01000000";
    context.namespace_name = "default";
    return context;
  }
  std::vector<troupe::NodeInfo> Nodes() override { return nodes; }
  void AddLocalRef(const RefInfo& ref) override { ++refcounts[ref.object_id]; }
  void RemoveLocalRef(const std::string& id) override {
    if (--refcounts[id] == 0) refcounts.erase(id);
  }

  RefInfo NewRef() { return {std::to_string(next_id++), "fake:0"}; }
  static Buffer Hold(std::string bytes) {
    auto holder = std::make_shared<std::string>(std::move(bytes));
    return Buffer{holder->data(), holder->size(), holder};
  }

  int next_id = 1;
  std::map<std::string, Buffer> objects;
  std::map<std::string, std::string> errors;
  std::map<std::string, int> refcounts;
  size_t contained_count = 0;
  troupe::internal::TaskOptions last_options;
  troupe::internal::ActorCallOptions last_call_options;
  std::vector<troupe::NodeInfo> nodes;
  std::map<std::pair<std::string, std::string>, std::string> kv;
};

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override { troupe::internal::SetCurrentRuntime(&runtime_); }
  void TearDown() override { troupe::internal::SetCurrentRuntime(nullptr); }
  FakeRuntime runtime_;
};

TEST_F(ApiTest, TasksAndArgumentConversion) {
  EXPECT_EQ(*troupe::Get(troupe::Task(Plus).Remote(1, 2)), 3);
  // A char converts to the int parameter; a vector<int> can't be passed for vector<double>
  // (compile error), but an initializer of the right type can.
  EXPECT_EQ(*troupe::Get(troupe::Task(Plus).Remote('\x01', 2)), 3);
  EXPECT_DOUBLE_EQ(*troupe::Get(troupe::Task(Scale).Remote(std::vector<double>{1, 2, 3}, 2.0)), 12);
  EXPECT_EQ(*troupe::Get(troupe::Task(TROUPE_FUNC(Overloaded, int, int)).Remote(6, 7)), 42);
  EXPECT_EQ(*troupe::Get(troupe::Task(TROUPE_FUNC(Overloaded, int)).Remote(5)), 5);
}

TEST_F(ApiTest, OptionsReachTheRuntime) {
  troupe::Task(Plus)
      .SetName("adder")
      .SetResources({{"CPU", 0.5}, {"GPU", 1}})
      .SetMaxRetries(7)
      .SetRetryExceptions(true)
      .SetSchedulingStrategy(troupe::NodeAffinity{"abcd", true})
      .Remote(1, 1);
  EXPECT_EQ(runtime_.last_options.name, "adder");
  EXPECT_EQ(runtime_.last_options.resources.at("GPU"), 1);
  EXPECT_EQ(runtime_.last_options.max_retries, 7);
  EXPECT_TRUE(runtime_.last_options.retry_exceptions);
  EXPECT_EQ(runtime_.last_options.strategy.kind,
            troupe::internal::SchedulingStrategy::Kind::kNodeAffinity);
  EXPECT_TRUE(runtime_.last_options.strategy.soft);
}

TEST_F(ApiTest, LabelSelectorsReachTheRuntime) {
  troupe::Task(Plus)
      .SetLabelSelector(troupe::LabelSelector()
                            .Equals("zone", "a")
                            .In("gpu", {"h100", "h200"})
                            .NotIn("troupe.io/pool", {"spot"})
                            .Exists("ssd")
                            .DoesNotExist("draining"),
                        troupe::LabelMatch::kPreferred)
      .Remote(1, 1);
  const auto& options = runtime_.last_options;
  ASSERT_EQ(options.label_selector.size(), 5u);
  EXPECT_TRUE(options.label_selector_soft);
  using Op = troupe::internal::LabelConstraint::Op;
  EXPECT_EQ(options.label_selector[1].op, Op::kIn);
  EXPECT_EQ(options.label_selector[1].values, (std::vector<std::string>{"h100", "h200"}));
  EXPECT_EQ(options.label_selector[2].key, "troupe.io/pool");
  EXPECT_EQ(options.label_selector[4].op, Op::kDoesNotExist);
  // A later scheduling strategy keeps the selector (they combine).
  troupe::Task(Plus)
      .SetLabelSelector(troupe::LabelSelector().Equals("zone", "a"))
      .SetSchedulingStrategy(troupe::Spread{})
      .Remote(1, 1);
  EXPECT_EQ(runtime_.last_options.label_selector.size(), 1u);
  EXPECT_FALSE(runtime_.last_options.label_selector_soft);
  EXPECT_EQ(troupe::LabelSelector().Equals("zone", "a").In("gpu", {"h100", "h200"}).ToString(),
            "{zone=a, gpu in (h100,h200)}");
}

// Bad selectors are refused where they are written, saying what is wrong.
TEST_F(ApiTest, LabelSelectorChecksKeysValuesAndLists) {
  auto message_of = [](const std::function<void()>& build) -> std::string {
    try {
      build();
    } catch (const troupe::InvalidArgumentError& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_NE(message_of([] {
              troupe::LabelSelector().In("gpu", {});
            }).find("LabelSelector::In: the list of values for 'gpu' is empty"),
            std::string::npos);
  EXPECT_NE(message_of([] { troupe::LabelSelector().NotIn("gpu", {}); }).find("is empty"),
            std::string::npos);
  EXPECT_NE(message_of([] { troupe::LabelSelector().Equals("", "a"); }).find("the key '' is empty"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              troupe::LabelSelector().Exists("my zone");
            }).find("the key 'my zone' has the character ' '"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              troupe::LabelSelector().Exists("-zone");
            }).find("must begin and end with a letter or digit"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              troupe::LabelSelector().Exists(std::string(64, 'k'));
            }).find("longer than 63"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              troupe::LabelSelector().Exists("Bad_Prefix/zone");
            }).find("not a DNS subdomain"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              troupe::LabelSelector().Equals("zone", "a b");
            }).find("the value 'a b' for 'zone' has the character ' '"),
            std::string::npos);
  EXPECT_EQ(message_of([] { troupe::LabelSelector().Exists("example.com/zone-1.a_b"); }),
            "<no error>");
}

TEST_F(ApiTest, KvUsesItsOwnNamespacesAndChecksSizes) {
  EXPECT_TRUE(troupe::kv::Put("model/best", "a"));
  EXPECT_FALSE(troupe::kv::Put("model/best", "b"));  // existed: replaced
  EXPECT_EQ(*troupe::kv::Get("model/best"), "b");
  troupe::kv::PutOptions keep;
  keep.overwrite = false;
  EXPECT_FALSE(troupe::kv::Put("model/best", "c", keep));
  EXPECT_EQ(*troupe::kv::Get("model/best"), "b");
  troupe::kv::PutOptions other;
  other.ns = "other";
  troupe::kv::Put("model/x", "1", other);
  EXPECT_EQ(troupe::kv::List("model/"), (std::vector<std::string>{"model/best"}));
  EXPECT_EQ(troupe::kv::List("", "other"), (std::vector<std::string>{"model/x"}));
  EXPECT_TRUE(troupe::kv::Exists("model/x", "other"));
  EXPECT_FALSE(troupe::kv::Exists("model/x"));
  // Stored under "user/<namespace>": never one of Troupe's own namespaces.
  EXPECT_EQ(runtime_.kv.count({"user/default", "model/best"}), 1u);
  EXPECT_EQ(runtime_.kv.count({"user/other", "model/x"}), 1u);
  EXPECT_TRUE(troupe::kv::Delete("model/best"));
  EXPECT_FALSE(troupe::kv::Delete("model/best"));
  EXPECT_FALSE(troupe::kv::Get("model/best").has_value());
  EXPECT_THROW(troupe::kv::Put("", "v"), troupe::InvalidArgumentError);
  EXPECT_THROW(troupe::kv::Get(std::string(troupe::kv::kMaxKeyBytes + 1, 'k')),
               troupe::InvalidArgumentError);
  EXPECT_THROW(troupe::kv::Put("big", std::string(troupe::kv::kMaxValueBytes + 1, 'v')),
               troupe::InvalidArgumentError);
  EXPECT_THROW(troupe::kv::Get("k", std::string("bad\nns")), troupe::InvalidArgumentError);
  EXPECT_THROW(troupe::kv::Get("k", std::string(300, 'n')), troupe::InvalidArgumentError);
  EXPECT_EQ(runtime_.kv.size(), 1u);  // nothing written by the refused calls
}

// Regression (issue 34 item 8): a function taking `T&` did not compile as a remote function.
// The callee gets its own decoded copy: what it changes never reaches the caller's value.
// Issue 34 item 3: a function returning std::tuple<A, B> called with SetNumReturns<2>() gives
// two typed refs, each its own object holding one element; the plain call gives one ref to the
// whole tuple.
TEST_F(ApiTest, SetNumReturnsSplitsATupleIntoTypedRefs) {
  auto [position, rest] =
      troupe::Task(SplitName).SetNumReturns<2>().Remote(std::string("Ada Lovelace"));
  static_assert(std::is_same_v<decltype(position), troupe::ObjectRef<int>>);
  static_assert(std::is_same_v<decltype(rest), troupe::ObjectRef<std::string>>);
  EXPECT_NE(position.ID(), rest.ID());
  EXPECT_EQ(runtime_.last_options.num_returns, 2);
  EXPECT_EQ(*troupe::Get(position), 3);
  EXPECT_EQ(*troupe::Get(rest), "Lovelace");
  auto whole = troupe::Task(SplitName).Remote(std::string("Ada Lovelace"));
  EXPECT_EQ(runtime_.last_options.num_returns, 1);
  EXPECT_EQ(*troupe::Get(whole), std::make_tuple(3, std::string("Lovelace")));
  // Every ref holds one reference of its own.
  EXPECT_EQ(runtime_.refcounts.at(position.info().object_id), 1);
  EXPECT_EQ(runtime_.refcounts.at(rest.info().object_id), 1);
}

// A worker asked for a split that the function's result does not have (a caller built from
// other code): the call fails with a SerializationError saying so, instead of a wrong value.
TEST_F(ApiTest, AMismatchedNumReturnsFailsTheCallSayingWhy) {
  const auto* invoker = troupe::internal::FunctionRegistry::Instance().FindFunction("SplitName");
  ASSERT_NE(invoker, nullptr);
  auto name = FakeRuntime::Hold(troupe::internal::Serialize(std::string("a b")).ToString());
  try {
    (*invoker)({name}, 3);
    FAIL() << "expected SerializationError";
  } catch (const troupe::SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find("asked for 3 return objects"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("std::tuple of 2 values"), std::string::npos) << e.what();
  }
  const auto* plus = troupe::internal::FunctionRegistry::Instance().FindFunction("Plus");
  auto one = FakeRuntime::Hold(troupe::internal::Serialize(1).ToString());
  EXPECT_THROW((*plus)({one, one}, 2), troupe::SerializationError);
  EXPECT_EQ((*invoker)({name}, 2).parts.size(), 2u);
}

TEST_F(ApiTest, NonConstReferenceParametersGetTheirOwnCopy) {
  std::vector<int> values = {1, 2, 3};
  EXPECT_EQ(*troupe::Get(troupe::Task(AppendAndSum).Remote(values, 4)), 10);
  EXPECT_EQ(values, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(*troupe::Get(troupe::Task(AppendAndSum).Remote(troupe::Put(values), 5)), 11);
  std::vector<int> seen = {7};
  EXPECT_EQ(*troupe::Get(troupe::Task(Mixed).Remote(3, "n=", seen, std::string("!"))), "n=2!");
  EXPECT_EQ(seen, (std::vector<int>{7}));
}

// The same for an actor's factory and methods, run the way a worker runs them.
TEST_F(ApiTest, ActorFactoriesAndMethodsTakeNonConstReferences) {
  auto& registry = troupe::internal::FunctionRegistry::Instance();
  const auto* create = registry.FindCreator("Bag::Create");
  const auto* append = registry.FindMethod("&Bag::Append");
  ASSERT_NE(create, nullptr);
  ASSERT_NE(append, nullptr);
  auto encode = [](const auto& value) {
    return FakeRuntime::Hold(troupe::internal::Serialize(value).ToString());
  };
  std::shared_ptr<void> bag = (*create)({encode(std::vector<int>{1})});
  EXPECT_EQ(static_cast<Bag*>(bag.get())->items, (std::vector<int>{1, -1}));
  auto result = (*append)(bag.get(), {encode(std::vector<int>{5, 6}), encode(7)}, 1);
  auto size = troupe::internal::DecodeObject<size_t>(FakeRuntime::Hold(result.value.ToString()));
  EXPECT_EQ(*size, 5u);
  EXPECT_EQ(static_cast<Bag*>(bag.get())->items, (std::vector<int>{1, -1, 5, 6, 7}));
}

// Actor calls take the task options that apply to them (issue 34 item 8): a name.
TEST_F(ApiTest, ActorCallOptionsReachTheRuntime) {
  troupe::ActorHandle<Bag> bag("fake-actor");
  std::vector<int> more = {1};
  EXPECT_THROW(bag.Task(&Bag::Append).SetName("append-one").Remote(more, 2), troupe::TroupeError);
  EXPECT_EQ(runtime_.last_call_options.name, "append-one");
  EXPECT_THROW(bag.Task(&Bag::Append).Remote(more, 2), troupe::TroupeError);
  EXPECT_EQ(runtime_.last_call_options.name, "");
}

// ClusterResources and AvailableResources sum the alive nodes only; a resource in full use is
// listed as 0 available rather than left out.
TEST_F(ApiTest, ClusterResourcesSumTheAliveNodes) {
  troupe::NodeInfo head;
  head.alive = true;
  head.total_resources = {{"CPU", 4}, {"GPU", 1}};
  head.available_resources = {{"CPU", 1.5}};  // the GPU is in use
  troupe::NodeInfo worker;
  worker.alive = true;
  worker.total_resources = {{"CPU", 2}, {"accelerator", 3}};
  worker.available_resources = {{"CPU", 2}, {"accelerator", 1}};
  troupe::NodeInfo dead;
  dead.total_resources = {{"CPU", 64}};
  runtime_.nodes = {head, worker, dead};
  EXPECT_EQ(troupe::ClusterResources(),
            (std::map<std::string, double>{{"CPU", 6}, {"GPU", 1}, {"accelerator", 3}}));
  EXPECT_EQ(troupe::AvailableResources(),
            (std::map<std::string, double>{{"CPU", 3.5}, {"GPU", 0}, {"accelerator", 1}}));
  EXPECT_EQ(troupe::Nodes().size(), 3u);
  EXPECT_EQ(troupe::GetRuntimeContext().job_id, "01000000");
}

TEST_F(ApiTest, UserTypesAndRefArguments) {
  auto a = troupe::Put(Point{0, 0, "a"});
  auto mid = troupe::Task(Midpoint).Remote(a, Point{2, 4, "b"});
  auto point = troupe::Get(mid);
  EXPECT_EQ(point->x, 1);
  EXPECT_EQ(point->y, 2);
  EXPECT_EQ(point->label, "ab");
}

TEST_F(ApiTest, NumericVectorsTravelRawAndCanBeViewedWithoutCopy) {
  std::vector<float> big(1 << 20, 2.5f);
  auto serialized = troupe::internal::Serialize(big);
  EXPECT_EQ(serialized.size(), troupe::internal::kRawHeaderSize + big.size() * sizeof(float));
  EXPECT_EQ(serialized.raw, big.data());  // no per-element encoding, not even a copy yet

  auto ref = troupe::Put(big);
  EXPECT_EQ(*troupe::Get(ref), big);
  auto view = troupe::GetView(ref);
  ASSERT_EQ(view->size(), big.size());
  EXPECT_EQ((*view)[12345], 2.5f);
  const Buffer& stored = runtime_.objects.at(ref.info().object_id);
  EXPECT_EQ(reinterpret_cast<const char*>(view->data()),
            stored.data + troupe::internal::kRawHeaderSize);

  auto ones = troupe::Task(Ones).Remote(10);
  EXPECT_EQ(troupe::Get(ones)->size(), 10u);
}

TEST_F(ApiTest, WrongTypeIsADecodeError) {
  auto text = troupe::Put(std::string("hello"));
  troupe::ObjectRef<int> as_int(text.info());
  EXPECT_THROW(troupe::Get(as_int), troupe::SerializationError);
  auto floats = troupe::Put(std::vector<float>{1, 2});
  troupe::ObjectRef<std::vector<double>> as_doubles(floats.info());
  EXPECT_THROW(troupe::Get(as_doubles), troupe::SerializationError);
}

TEST_F(ApiTest, ExceptionsAndVoid) {
  try {
    troupe::Get(troupe::Task(Fail).Remote(3));
    FAIL() << "expected an error";
  } catch (const troupe::TroupeError& e) {
    EXPECT_NE(std::string(e.what()).find("bad code 3"), std::string::npos);
  }
  auto done = troupe::Task(Nothing).Remote();
  EXPECT_EQ(troupe::Get(done), nullptr);
}

TEST_F(ApiTest, RefsInsideValuesAreCollectedAndCounted) {
  {
    std::vector<troupe::ObjectRef<int>> refs;
    for (int i = 0; i < 5; ++i) refs.push_back(troupe::Put(i));
    auto outer = troupe::Put(refs);
    EXPECT_EQ(runtime_.contained_count, 5u);
    EXPECT_EQ(*troupe::Get(troupe::Task(SumRefs).Remote(outer)), 10);
    auto decoded = troupe::Get(outer);
    ASSERT_EQ(decoded->size(), 5u);
    EXPECT_EQ(*troupe::Get((*decoded)[4]), 4);
  }
  EXPECT_TRUE(runtime_.refcounts.empty()) << runtime_.refcounts.size() << " references leaked";
}

TEST_F(ApiTest, UnregisteredFunctionsAreRefusedWithTheFix) {
  auto unregistered = +[](int x) { return x; };
  try {
    troupe::Task(unregistered).Remote(1);
    FAIL();
  } catch (const troupe::TroupeError& e) {
    EXPECT_NE(std::string(e.what()).find("TROUPE_REMOTE"), std::string::npos);
  }
}

TEST(ApiNoRuntimeTest, CallsBeforeInitSaySo) {
  EXPECT_THROW(troupe::Task(Plus).Remote(1, 2), troupe::RuntimeError);
  EXPECT_THROW(troupe::Put(1), troupe::RuntimeError);
  EXPECT_THROW(troupe::GetRuntimeContext(), troupe::RuntimeError);
  EXPECT_THROW(troupe::ClusterResources(), troupe::RuntimeError);
}

TEST(FunctionNamesTest, SplitsAtTopLevelCommas) {
  EXPECT_EQ(troupe::internal::SplitFunctionNames("Plus, ns::F ,TROUPE_FUNC(G, int, int), &C::M"),
            (std::vector<std::string>{"Plus", "ns::F", "TROUPE_FUNC(G, int, int)", "&C::M"}));
}

}  // namespace

// Large raw arrays are copied by two threads (CopyBytes): every byte, both halves and an odd
// tail that is not a whole page, lands where it belongs.
TEST(CopyBytesTest, LargeCopiesSplitOverTwoThreadsAreByteIdentical) {
  for (size_t size : {size_t{100}, size_t{(16 << 20) + 4097}}) {
    std::vector<uint8_t> from(size);
    for (size_t i = 0; i < size; ++i) from[i] = static_cast<uint8_t>(i * 131 + i / 4096);
    std::vector<uint8_t> to(size, 0);
    troupe::internal::CopyBytes(reinterpret_cast<char*>(to.data()), from.data(), size);
    EXPECT_EQ(to, from) << size << " bytes";
  }
}
