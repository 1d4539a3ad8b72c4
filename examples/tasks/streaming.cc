// Streaming generators: a task that yields values one by one (troupe::StreamWriter), read by the
// driver as they are produced, with a bound on unread items; then an actor method that streams.
// While it runs, `troupe list tasks` shows the generator RUNNING.
//   bazel run //examples/tasks:streaming    (an embedded cluster, or TROUPE_ADDRESS)
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "troupe/api.h"

// Yields the squares of 0..n-1, one every `pause_ms`.
void Squares(troupe::StreamWriter<long>& out, int n, int pause_ms) {
  for (long i = 0; i < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    out.Yield(i * i);
  }
}

class Greeter {
 public:
  static Greeter* Create(std::string greeting) { return new Greeter(std::move(greeting)); }
  void Greet(troupe::StreamWriter<std::string>& out, std::vector<std::string> names) {
    for (const auto& name : names) out.Yield(greeting_ + ", " + name);
  }

 private:
  explicit Greeter(std::string greeting) : greeting_(std::move(greeting)) {}
  std::string greeting_;
};

TROUPE_REMOTE(Squares, Greeter::Create, &Greeter::Greet);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  auto squares = troupe::Task(Squares).SetStreamBackpressure(2).Remote(6, 500);
  for (troupe::ObjectRef<long> ref : squares) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::cout << "at " << ms << " ms: " << *troupe::Get(ref) << "\n";
  }
  auto greeter = troupe::Actor(Greeter::Create).Remote(std::string("hello"));
  for (auto ref : greeter.Task(&Greeter::Greet).Remote(std::vector<std::string>{"Ada", "Alan"})) {
    std::cout << *troupe::Get(ref) << "\n";
  }
  troupe::Shutdown();
}
