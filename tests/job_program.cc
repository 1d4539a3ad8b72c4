// A Troupe program run as a submitted job by tests/jobs_test.cc: tasks and an actor on the
// cluster, reading message.txt from the job's working directory in the driver and in a task
// (workers start in the same working directory). With --hold it keeps an actor and sleeps, to
// be stopped. With --metrics it records user metrics in a task on every node (and checks that a
// bad tag is refused at the caller) instead.
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "troupe/api.h"

std::string ReadMessage() {
  std::ifstream in("message.txt");
  std::string line;
  std::getline(in, line);
  return line.empty() ? "<no message.txt>" : line;
}

int Square(int x) { return x * x; }

// Counts one call per node it runs on (user metrics, troupe/metrics.h).
std::string CountOnThisNode() {
  static const troupe::metrics::Counter calls("job_program_calls_total", "Calls of CountOnThisNode",
                                              "calls", {"function"});
  static const troupe::metrics::Histogram sizes("job_program_sizes", "Sizes seen", "bytes",
                                                {10, 100}, {"function"});
  calls.Inc(1, {{"function", "CountOnThisNode"}});
  sizes.Observe(42, {{"function", "CountOnThisNode"}});
  return troupe::GetRuntimeContext().node_id;
}

int RecordMetricsOnEveryNode() {
  try {
    troupe::metrics::Counter("job_program_calls_total", "", "", {"function"})
        .Inc(1, {{"functoin", "typo"}});
    std::cout << "a bad tag was accepted" << std::endl;
    return 1;
  } catch (const troupe::InvalidArgumentError& e) {
    std::cout << "bad tag refused: " << e.what() << std::endl;
  }
  troupe::metrics::Gauge("job_program_nodes", "Alive nodes", "nodes")
      .Set(static_cast<double>(troupe::Nodes().size()));
  for (const troupe::NodeInfo& node : troupe::Nodes()) {
    if (!node.alive) continue;
    std::string ran_on = *troupe::Get(troupe::Task(CountOnThisNode)
                                          .SetSchedulingStrategy(troupe::NodeAffinity{node.node_id})
                                          .Remote());
    std::cout << "counted on " << ran_on << std::endl;
  }
  return 0;
}

class Tally {
 public:
  static Tally* Create() { return new Tally(); }
  int Add(int x) { return total_ += x; }

 private:
  int total_ = 0;
};

TROUPE_REMOTE(ReadMessage, Square, CountOnThisNode, Tally::Create, &Tally::Add);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // TROUPE_ADDRESS and TROUPE_TOKEN come from the job supervisor
  const bool hold = argc > 1 && std::strcmp(argv[1], "--hold") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--metrics") == 0) {
    const int code = RecordMetricsOnEveryNode();
    troupe::Shutdown();
    return code;
  }
  std::cout << "driver reads: " << ReadMessage() << std::endl;
  std::cout << "task reads: " << *troupe::Get(troupe::Task(ReadMessage).Remote()) << std::endl;
  auto tally = troupe::Actor(Tally::Create).SetResources({{"CPU", 1}}).Remote();
  int sum = 0;
  for (int i = 1; i <= 4; ++i)
    sum =
        *troupe::Get(tally.Task(&Tally::Add).Remote(*troupe::Get(troupe::Task(Square).Remote(i))));
  std::cout << "sum of squares: " << sum << std::endl;
  if (hold) {
    std::cout << "holding an actor" << std::endl;
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  troupe::Shutdown();
  return 0;
}
