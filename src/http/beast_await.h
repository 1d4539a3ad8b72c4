// Await: blocking I/O with Beast's timeouts. Beast's tcp_stream timeouts apply only to
// asynchronous operations, so a thread that wants to block starts one and runs its own
// io_context until that operation completes (other handlers queued on the context, such as a
// WebSocket's background read, may run meanwhile). Used by the head's server (web_server.cc)
// and the CLI's WebSocket client (src/cli/log_stream.cc). Stateless; call it only from the thread
// that owns `context`.
#pragma once

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/error.hpp>

namespace troupe::http {

template <typename Initiate>
boost::beast::error_code Await(boost::asio::io_context& context, Initiate initiate) {
  boost::beast::error_code result = boost::asio::error::operation_aborted;
  bool done = false;
  initiate([&](boost::beast::error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  context.restart();
  while (!done && context.run_one() > 0) {
  }
  return result;
}

}  // namespace troupe::http
