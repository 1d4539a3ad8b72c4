#include "src/train/elastic_protocol.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace troupe::train::internal {

std::string ElasticPrefix(const std::string& group) { return "train/" + group + "/"; }
std::string FailureKey(const std::string& group, int64_t generation) {
  return absl::StrCat(ElasticPrefix(group), "failure/", generation);
}
std::string GenerationKey(const std::string& group, int64_t generation) {
  return absl::StrCat(ElasticPrefix(group), "generation/", generation);
}
std::string RecoveredKey(const std::string& group, int64_t generation) {
  return absl::StrCat(ElasticPrefix(group), "recovered/", generation);
}

std::string ReadyKey(const std::string& group, int worker) {
  return absl::StrCat(ElasticPrefix(group), "ready/", worker);
}
std::string JoinKey(const std::string& group, int64_t generation) {
  return absl::StrCat(ElasticPrefix(group), "join/", generation);
}
std::string BoundaryKey(const std::string& group, int64_t generation) {
  return absl::StrCat(ElasticPrefix(group), "boundary/", generation);
}
std::string JoinedKey(const std::string& group, int worker) {
  return absl::StrCat(ElasticPrefix(group), "joined/", worker);
}

std::string EncodeFailureReport(const FailureReport& report) {
  return absl::StrCat(report.reporter, "\n", report.failed_rank, "\n", report.step, "\n",
                      report.time_ms, "\n", report.reason);
}

std::optional<FailureReport> DecodeFailureReport(const std::string& text) {
  std::vector<std::string> fields = absl::StrSplit(text, absl::MaxSplits('\n', 4));
  FailureReport report;
  if (fields.size() != 5 || !absl::SimpleAtoi(fields[0], &report.reporter) ||
      !absl::SimpleAtoi(fields[1], &report.failed_rank) ||
      !absl::SimpleAtoi(fields[2], &report.step) || !absl::SimpleAtoi(fields[3], &report.time_ms)) {
    return std::nullopt;
  }
  report.reason = fields[4];
  return report;
}

std::string EncodeRanks(const std::vector<int>& ranks) { return absl::StrJoin(ranks, ","); }

std::optional<std::vector<int>> DecodeRanks(const std::string& text) {
  std::vector<int> ranks;
  for (absl::string_view field : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int rank;
    if (!absl::SimpleAtoi(field, &rank) || rank < 0) return std::nullopt;
    ranks.push_back(rank);
  }
  return ranks;
}

std::vector<NodePlace> PlacesByRank(const std::vector<std::string>& node_of_rank) {
  std::map<std::string, int> node_number, members_on;
  for (const std::string& node : node_of_rank) {
    node_number.emplace(node, static_cast<int>(node_number.size()));
    ++members_on[node];
  }
  std::map<std::string, int> next_local;
  std::vector<NodePlace> places;
  for (const std::string& node : node_of_rank) {
    places.push_back({node_number[node], next_local[node]++, members_on[node]});
  }
  return places;
}

// "<left ranks>\n<node_rank>:<local_rank>:<local_world_size>,..." (places by rank).
std::string EncodeGenerationRecord(const GenerationRecord& record) {
  std::vector<std::string> places;
  for (const NodePlace& p : record.places) {
    places.push_back(absl::StrCat(p.node_rank, ":", p.local_rank, ":", p.local_world_size));
  }
  return absl::StrCat(EncodeRanks(record.left), "\n", absl::StrJoin(places, ","));
}

std::optional<GenerationRecord> DecodeGenerationRecord(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() != 2) return std::nullopt;
  GenerationRecord record;
  auto left = DecodeRanks(lines[0]);
  if (!left) return std::nullopt;
  record.left = std::move(*left);
  for (absl::string_view field : absl::StrSplit(lines[1], ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(field, ':');
    NodePlace place;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &place.node_rank) ||
        !absl::SimpleAtoi(parts[1], &place.local_rank) ||
        !absl::SimpleAtoi(parts[2], &place.local_world_size) || place.node_rank < 0 ||
        place.local_rank < 0 || place.local_rank >= place.local_world_size) {
      return std::nullopt;
    }
    record.places.push_back(place);
  }
  return record;
}

std::string EncodeRecovered(const Recovered& recovered) {
  return absl::StrCat(recovered.step, "\n", recovered.time_ms);
}

std::optional<Recovered> DecodeRecovered(const std::string& text) {
  std::vector<std::string> fields = absl::StrSplit(text, '\n');
  Recovered recovered;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &recovered.step) ||
      !absl::SimpleAtoi(fields[1], &recovered.time_ms)) {
    return std::nullopt;
  }
  return recovered;
}

std::vector<int> WithoutRanks(const std::vector<int>& members, const std::vector<int>& left) {
  const std::set<int> gone(left.begin(), left.end());
  std::vector<int> out;
  for (size_t rank = 0; rank < members.size(); ++rank) {
    if (!gone.count(static_cast<int>(rank))) out.push_back(members[rank]);
  }
  return out;
}

std::string ClassifyFailure(const std::string& reason) {
  for (const char* died : {"is gone", "connection closed", "exited", "died"}) {
    if (absl::StrContains(reason, died)) return "died";
  }
  for (const char* hung : {"timed out", "hang", "hung", "heartbeat", "no progress", "stopped"}) {
    if (absl::StrContains(reason, hung)) return "hung";
  }
  return "failed";
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace troupe::train::internal
