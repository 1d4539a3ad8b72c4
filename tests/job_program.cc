// A Troupe program run as a submitted job by tests/jobs_test.cc: tasks and an actor on the
// cluster, reading message.txt from the job's working directory in the driver and in a task
// (workers start in the same working directory). With --hold it keeps an actor and sleeps, to
// be stopped.
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

class Tally {
 public:
  static Tally* Create() { return new Tally(); }
  int Add(int x) { return total_ += x; }

 private:
  int total_ = 0;
};

TROUPE_REMOTE(ReadMessage, Square, Tally::Create, &Tally::Add);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // TROUPE_ADDRESS and TROUPE_TOKEN come from the job supervisor
  const bool hold = argc > 1 && std::strcmp(argv[1], "--hold") == 0;
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
