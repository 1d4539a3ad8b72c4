#include "src/http/log_tail.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace troupe::http {
namespace {

// The length of the valid UTF-8 sequence at bytes[i]; 0 if it is not valid UTF-8; -1 if it is
// valid so far but runs past the end (RFC 3629: no overlongs, surrogates or code points past
// U+10FFFF).
int SequenceAt(std::string_view bytes, size_t i) {
  const unsigned char c = bytes[i];
  if (c < 0x80) return 1;
  int length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    if (c == 0xE0) low = 0xA0;
    if (c == 0xED) high = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < length; ++k) {
    if (i + k >= bytes.size()) return -1;
    const unsigned char next = bytes[i + k];
    if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return 0;
  }
  return length;
}

// The reply refusing a tail request (bad offset, unknown job), or nullopt.
std::optional<HttpResponse> CheckTail(jobs::JobService* jobs, const HttpRequest& request) {
  const std::string id = request.PathParam("id");
  if (!request.Param("offset").empty() && request.IntParam("offset", -1) < 0) {
    return HttpResponse::Json(
        400, nlohmann::json{{"error", "offset must be a byte offset >= 0 into the job's log"}});
  }
  if (!jobs->Record(id)) {
    const jobs::Reply reply = jobs::Error(404, "no job with submission_id '" + id + "'");
    return HttpResponse::Json(reply.status, reply.body);
  }
  return std::nullopt;
}

void ServeWebSocketTail(jobs::JobService* jobs, const HttpRequest& request, WebSocketSink& sink) {
  const std::string id = request.PathParam("id");
  int64_t offset = request.IntParam("offset", 0);
  std::string pending;  // read but not yet sent: the start of a split UTF-8 character
  while (!sink.Closed()) {
    const jobs::JobService::TailStep step = jobs->WaitForLogs(id, offset);
    if (!step.text.empty()) {
      pending += step.text;
      offset = step.next_offset;
    }
    const size_t ready = step.done ? pending.size() : CompleteUtf8Prefix(pending);
    if (ready > 0) {
      if (!sink.SendText(ValidUtf8(std::string_view(pending).substr(0, ready)))) return;
      pending.erase(0, ready);
    }
    if (step.done) return;
  }
}

}  // namespace

size_t CompleteUtf8Prefix(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const int length = SequenceAt(bytes, i);
    if (length < 0) return i;
    i += length > 0 ? length : 1;
  }
  return bytes.size();
}

std::string ValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const int length = SequenceAt(bytes, i);
    if (length > 0) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

HttpResponse LogTailStream(jobs::JobService* jobs, const HttpRequest& request) {
  if (auto refusal = CheckTail(jobs, request)) return *std::move(refusal);
  HttpResponse response;
  response.content_type = "text/plain";
  const std::string id = request.PathParam("id");
  auto offset = std::make_shared<int64_t>(request.IntParam("offset", 0));
  response.stream = [jobs, id, offset](std::string* piece) {
    jobs::JobService::TailStep step = jobs->WaitForLogs(id, *offset);
    if (!step.text.empty()) {
      *piece = std::move(step.text);
      *offset = step.next_offset;
    }
    return !step.done;
  };
  return response;
}

WebSocketRoute LogTailWebSocket(jobs::JobService* jobs) {
  WebSocketRoute route;
  route.admit = [jobs](const HttpRequest& request) { return CheckTail(jobs, request); };
  route.serve = [jobs](const HttpRequest& request, WebSocketSink& sink) {
    ServeWebSocketTail(jobs, request, sink);
  };
  return route;
}

}  // namespace troupe::http
