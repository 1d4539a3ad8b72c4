// Jobs for tests/dashboard_test.cc:
//   dashboard_program          starts an actor named "doomed", makes one call, kills it
//                              (ActorHandle::Kill) so the dashboard has a death cause to show
//   dashboard_program --tasks  runs rounds of tasks for ~15 s, one failing per round, so the
//                              Tasks page has counters and rates to chart
#include <chrono>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "troupe/api.h"

class Doomed {
 public:
  static Doomed* Create() { return new Doomed(); }
  int Ping() { return 1; }
};

int Square(int x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return x * x;
}

int Fail(int x) { throw std::runtime_error("task " + std::to_string(x) + " fails on purpose"); }

TROUPE_REMOTE(Doomed::Create, &Doomed::Ping, Square, Fail);

void KillAnActor() {
  auto doomed = troupe::Actor(Doomed::Create).SetName("doomed").Remote();
  std::cout << "doomed answers " << *troupe::Get(doomed.Task(&Doomed::Ping).Remote()) << std::endl;
  doomed.Kill();
  // Kill does not wait; stay until calls fail, so the job's end is not what kills it.
  for (int i = 0; i < 300; ++i) {
    try {
      troupe::Get(doomed.Task(&Doomed::Ping).Remote());
    } catch (const troupe::TroupeError& e) {
      std::cout << "killed actor doomed: " << e.what() << std::endl;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cout << "doomed is still answering after Kill" << std::endl;
}

void RunTasks() {
  for (int round = 0; round < 30; ++round) {
    std::vector<troupe::ObjectRef<int>> squares;
    for (int i = 0; i < 8 + round % 5; ++i) squares.push_back(troupe::Task(Square).Remote(i));
    for (auto& ref : squares) troupe::Get(ref);
    try {
      troupe::Get(troupe::Task(Fail).Remote(round));
    } catch (const troupe::TroupeError&) {
      // expected: one failed task per round
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::cout << "ran 30 rounds of tasks" << std::endl;
}

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // TROUPE_ADDRESS and TROUPE_TOKEN come from the job supervisor
  if (argc > 1 && std::strcmp(argv[1], "--tasks") == 0) {
    RunTasks();
  } else {
    KillAnActor();
  }
  troupe::Shutdown();
  return 0;
}
