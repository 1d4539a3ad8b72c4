// The state of one asynchronous (callback API) client call: context, request and reply, kept
// alive by a shared_ptr captured in the completion callback. Used by the clients in src/rpc.
#pragma once

#include <grpcpp/grpcpp.h>

namespace troupe {

template <typename Request, typename Reply>
struct AsyncCall {
  grpc::ClientContext context;
  Request request;
  Reply reply;
};

}  // namespace troupe
