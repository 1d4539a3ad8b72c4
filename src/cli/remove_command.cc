// `troupe remove placement-group ID|NAME`: removes a placement group through the head's HTTP API
// (DELETE /api/v0/placement_groups/{id}, src/http/state_views.h), as RemovePlacementGroup does in
// a program: its reservations go back to their nodes, and its tasks and actors are killed. For
// detached groups (they outlive their job) and for groups of a job that is still running.
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cli/commands.h"
#include "src/cli/http_api.h"
#include "src/common/flag_parser.h"

namespace troupe {
namespace {

constexpr char kKinds[] = "placement-group";

// Percent-encodes everything but unreserved characters, for one path segment.
std::string EncodeSegment(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

int RemovePlacementGroup(const std::vector<std::string>& args) {
  ApiFlags api_flags;
  FlagParser flags("troupe remove placement-group",
                   "Removes a placement group: its reserved resources go back to their nodes and "
                   "its tasks and actors are killed.\n"
                   "  troupe remove placement-group ID|NAME\n"
                   "ID may be a prefix that only one group has (`troupe list placement-groups`). "
                   "Groups are removed with the job that created them unless they are detached.");
  api_flags.Register(&flags);
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("remove", std::string(parsed.message()), 2);
  if (flags.positional().size() != 1 || flags.positional()[0].empty()) {
    return FailCommand("remove", "give one placement group: troupe remove placement-group ID|NAME",
                       2);
  }
  const std::string key = flags.positional()[0];
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("remove", error);
  Response r = Call(*api, "DELETE", "/api/v0/placement_groups/" + EncodeSegment(key));
  if (r.status != 200) return FailCommand("remove", Problem(r));
  const std::string id = r.body.value("placement_group_id", "");
  const std::string name = r.body.value("name", "");
  const std::string what = name.empty() ? id : absl::StrCat(id, " (", name, ")");
  if (r.body.value("already_removed", false)) {
    std::printf("Placement group %s was already removed.\n", what.c_str());
  } else {
    std::printf("Removed placement group %s.\n", what.c_str());
  }
  return 0;
}

}  // namespace

int RemoveCommand(const std::vector<std::string>& args) {
  const std::string usage =
      absl::StrCat("Usage: troupe remove <", kKinds, "> ID|NAME [flags]\n",
                   "  Removes a placement group (its tasks and actors are killed).\n",
                   "`troupe remove placement-group --help` shows the flags.\n");
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::printf("%s", usage.c_str());
    return 0;
  }
  if (args.empty()) {
    std::fprintf(stderr, "troupe remove: say what to remove\n%s", usage.c_str());
    return 2;
  }
  if (args[0] == "placement-group" || args[0] == "placement-groups") {
    return RemovePlacementGroup(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::fprintf(stderr, "troupe remove: unknown kind '%s'\n%s", args[0].c_str(), usage.c_str());
  return 2;
}

}  // namespace troupe
