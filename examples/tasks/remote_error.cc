// An exception from a remote task, as the caller sees it: TaskError with the exception's type
// and message, where it ran, and where it was thrown (remote_stack(); docs/api.md, "Where a
// remote exception was thrown"). The worker's log shows the same stack.
//   bazel run -c dbg //examples/tasks:remote_error   (-c dbg: file:line in the frames)
#include <iostream>
#include <stdexcept>
#include <string>

#include "troupe/api.h"

int ParsePort(const std::string& text) {
  const int port = std::stoi(text);  // throws std::invalid_argument for "http"
  if (port <= 0 || port > 65535) throw std::out_of_range("port " + text + " is out of range");
  return port;
}

int ConnectTo(std::string host, std::string port) {
  return ParsePort(port) + static_cast<int>(host.size()) * 0;
}

TROUPE_REMOTE(ConnectTo);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  for (const std::string port : {"8080", "70000", "http"}) {
    try {
      const int connected = *troupe::Get(troupe::Task(ConnectTo).Remote("db", port));
      std::cout << "ConnectTo(" << port << ") = " << connected << "\n";
    } catch (const troupe::TaskError& e) {
      std::cout << "ConnectTo(" << port << ") threw " << e.exception_type() << ": "
                << e.exception_message() << "\n"
                << e.remote_stack();
    }
  }
  troupe::Shutdown();
}
