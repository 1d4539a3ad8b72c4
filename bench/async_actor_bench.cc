// Async actors: N concurrent calls (default 1,000) that each wait 10 ms finish in about 10 ms
// plus overhead on one actor thread, where a plain actor takes N x 10 ms. Prints JSON lines
// (bench_util.h):
//   async_actor_calls_sleep_s        N calls of an async method awaiting troupe::SleepFor(10ms),
//                                    submitted at once; seconds from the first submit to the
//                                    last result (median of --rounds)
//   async_actor_calls_await_call_s   N calls that each co_await a call to a second async actor
//                                    that waits 10 ms (ObjectRef readiness as a callback)
//   async_actor_calls_no_wait_s      the same N calls waiting 0 ms: the overhead alone
//                                    (submitting, running and answering N calls)
//   async_actor_max_in_flight        the most calls inside the first actor at once (counted)
//   sync_actor_one_call_s            one call of a plain actor that sleeps the same time, for
//                                    scale (N of them run one after another: N x this)
// Usage: async_actor_bench [--calls=1000] [--wait_ms=10] [--rounds=5]; starts an embedded
// local cluster (or attaches to TROUPE_ADDRESS).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "troupe/api.h"
#include "troupe/async.h"

namespace {

class Sleeper {
 public:
  static Sleeper* Create() { return new Sleeper(); }
  troupe::Async<int> Nap(int ms) {
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    co_await troupe::SleepFor(std::chrono::milliseconds(ms));
    --in_flight_;
    co_return 1;
  }
  // Waits for `other`'s Nap: an ObjectRef this actor owns, ready in `ms`.
  troupe::Async<int> NapThrough(troupe::ActorHandle<Sleeper> other, int ms) {
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    int value = co_await other.Task(&Sleeper::Nap).Remote(ms);
    --in_flight_;
    co_return value;
  }
  int MaxInFlight() { return std::exchange(max_in_flight_, 0); }

 private:
  int in_flight_ = 0;
  int max_in_flight_ = 0;
};

class Blocking {
 public:
  static Blocking* Create() { return new Blocking(); }
  int Nap(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return 1;
  }
};

TROUPE_REMOTE(Sleeper::Create, &Sleeper::Nap, &Sleeper::NapThrough, &Sleeper::MaxInFlight,
              Blocking::Create, &Blocking::Nap);

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using troupe::bench::FlagValue;
  const int calls = std::atoi(FlagValue(argc, argv, "calls", "1000").c_str());
  const int wait_ms = std::atoi(FlagValue(argc, argv, "wait_ms", "10").c_str());
  const int rounds = std::max(1, std::atoi(FlagValue(argc, argv, "rounds", "5").c_str()));
  troupe::Config config;
  config.num_cpus = 4;
  config.log_to_driver = false;
  troupe::Init(config);

  auto sleeper = troupe::Actor(Sleeper::Create).Remote();
  auto other = troupe::Actor(Sleeper::Create).Remote();
  auto blocking = troupe::Actor(Blocking::Create).Remote();
  // Both actors up, and a warm-up round each way.
  troupe::Get(sleeper.Task(&Sleeper::Nap).Remote(0));
  troupe::Get(other.Task(&Sleeper::Nap).Remote(0));
  troupe::Get(blocking.Task(&Blocking::Nap).Remote(0));

  auto round = [&](auto submit) {
    std::vector<troupe::ObjectRef<int>> refs;
    refs.reserve(calls);
    const auto start = troupe::bench::Clock::now();
    for (int i = 0; i < calls; ++i) refs.push_back(submit());
    int sum = 0;
    for (const auto& value : troupe::Get(refs)) sum += *value;
    const double seconds = troupe::bench::Seconds(start);
    if (sum != calls) {
      std::fprintf(stderr, "async_actor_bench: %d of %d calls returned 1\n", sum, calls);
      std::exit(1);
    }
    return seconds;
  };
  auto sleep_call = [&] { return sleeper.Task(&Sleeper::Nap).Remote(wait_ms); };
  auto await_call = [&] { return sleeper.Task(&Sleeper::NapThrough).Remote(other, wait_ms); };
  round(sleep_call);  // warm-up
  round(await_call);
  troupe::Get(sleeper.Task(&Sleeper::MaxInFlight).Remote());

  auto no_wait_call = [&] { return sleeper.Task(&Sleeper::Nap).Remote(0); };
  std::vector<double> sleep_times, await_times, no_wait_times;
  int max_in_flight = 0;
  for (int r = 0; r < rounds; ++r) {
    no_wait_times.push_back(round(no_wait_call));
    troupe::Get(sleeper.Task(&Sleeper::MaxInFlight).Remote());
    sleep_times.push_back(round(sleep_call));
    max_in_flight =
        std::max(max_in_flight, *troupe::Get(sleeper.Task(&Sleeper::MaxInFlight).Remote()));
    await_times.push_back(round(await_call));
  }
  std::vector<double> sync_times;
  for (int r = 0; r < 10; ++r) {
    const auto start = troupe::bench::Clock::now();
    troupe::Get(blocking.Task(&Blocking::Nap).Remote(wait_ms));
    sync_times.push_back(troupe::bench::Seconds(start));
  }
  std::fprintf(stderr, "async_actor_bench: %d calls of %d ms each, %d rounds\n", calls, wait_ms,
               rounds);
  troupe::bench::Report("async_actor_calls_sleep_s", Median(sleep_times), "seconds");
  troupe::bench::Report("async_actor_calls_await_call_s", Median(await_times), "seconds");
  troupe::bench::Report("async_actor_calls_no_wait_s", Median(no_wait_times), "seconds");
  troupe::bench::Report("async_actor_max_in_flight", max_in_flight, "calls");
  troupe::bench::Report("sync_actor_one_call_s", Median(sync_times), "seconds");
  troupe::Shutdown();
  return 0;
}
