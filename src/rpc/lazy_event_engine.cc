#include "src/rpc/lazy_event_engine.h"

#include <grpc/event_engine/event_engine.h>

#include <atomic>
#include <memory>

#include "absl/base/call_once.h"

namespace troupe {
namespace {

using grpc_event_engine::experimental::EventEngine;

std::atomic<bool> g_built_in_created{false};

void SetLazyFactory();

// Forwards every call to the built-in engine, made on the first call that needs one. Calls
// that can be answered without one (is this one of its threads? cancel a task it never ran)
// are answered here.
class LazyEventEngine : public EventEngine {
 public:
  bool IsWorkerThread() override {
    EventEngine* real = made_.load(std::memory_order_acquire);
    return real != nullptr && real->IsWorkerThread();
  }
  bool Cancel(TaskHandle handle) override {
    EventEngine* real = made_.load(std::memory_order_acquire);
    return real != nullptr && real->Cancel(handle);
  }
  bool CancelConnect(ConnectionHandle handle) override {
    EventEngine* real = made_.load(std::memory_order_acquire);
    return real != nullptr && real->CancelConnect(handle);
  }
  absl::StatusOr<std::unique_ptr<Listener>> CreateListener(
      Listener::AcceptCallback on_accept, absl::AnyInvocable<void(absl::Status)> on_shutdown,
      const grpc_event_engine::experimental::EndpointConfig& config,
      std::unique_ptr<grpc_event_engine::experimental::MemoryAllocatorFactory> factory) override {
    return Real()->CreateListener(std::move(on_accept), std::move(on_shutdown), config,
                                  std::move(factory));
  }
  ConnectionHandle Connect(OnConnectCallback on_connect, const ResolvedAddress& addr,
                           const grpc_event_engine::experimental::EndpointConfig& args,
                           grpc_event_engine::experimental::MemoryAllocator memory_allocator,
                           Duration timeout) override {
    return Real()->Connect(std::move(on_connect), addr, args, std::move(memory_allocator),
                           timeout);
  }
  std::unique_ptr<DNSResolver> GetDNSResolver(
      const DNSResolver::ResolverOptions& options) override {
    return Real()->GetDNSResolver(options);
  }
  void Run(Closure* closure) override { Real()->Run(closure); }
  void Run(absl::AnyInvocable<void()> closure) override { Real()->Run(std::move(closure)); }
  TaskHandle RunAfter(Duration when, Closure* closure) override {
    return Real()->RunAfter(when, closure);
  }
  TaskHandle RunAfter(Duration when, absl::AnyInvocable<void()> closure) override {
    return Real()->RunAfter(when, std::move(closure));
  }

 private:
  EventEngine* Real() {
    absl::call_once(once_, [this] {
      // The built-in factory makes the engine; ours goes back for an engine made later (after
      // a full gRPC shutdown).
      grpc_event_engine::experimental::EventEngineFactoryReset();
      real_ = grpc_event_engine::experimental::CreateEventEngine();
      SetLazyFactory();
      g_built_in_created.store(true, std::memory_order_release);
      made_.store(real_.get(), std::memory_order_release);
    });
    return real_.get();
  }

  absl::once_flag once_;
  std::unique_ptr<EventEngine> real_;
  std::atomic<EventEngine*> made_{nullptr};
};

void SetLazyFactory() {
  grpc_event_engine::experimental::SetEventEngineFactory(
      [] { return std::make_unique<LazyEventEngine>(); });
}

}  // namespace

void InstallLazyEventEngine() {
  static absl::once_flag once;
  absl::call_once(once, SetLazyFactory);
}

bool BuiltInEventEngineCreated() { return g_built_in_created.load(std::memory_order_acquire); }

}  // namespace troupe
