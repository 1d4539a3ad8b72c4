// RemoveTree: `rm -rf` for directory trees of any depth, reporting what it could not remove.
// std::filesystem::remove_all keeps a directory open per level, so it fails (and, with its errors
// ignored, silently leaves everything) once a tree is deeper than the process may open files (a
// job's 30,000 nested directories); path-based tools fail past PATH_MAX. RemoveTree never works
// more than two levels below `path`: it moves each subdirectory up into a holding directory inside
// `path` before emptying it, so it needs no recursion, at most four open descriptors, and paths no
// longer than `path` plus two names. Symlinks are removed, never followed. Stateless; thread-safe
// (concurrent removals of different trees).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace troupe {

// Removes `path` (a file, a symlink, or a directory with everything below it). OK if it is gone
// afterwards, also when it did not exist. Otherwise an error naming the first entry that could not
// be removed, where it is now, and why (e.g. "cannot remove /x/.troupe-removing-12-0/3/file:
// Operation not permitted"); what could be removed is removed either way, and what is left may
// have been moved into that `.troupe-removing-*` directory of `path` (a later call removes it
// too). Directories found without write permission are given it back (their owner may) first.
absl::Status RemoveTree(const std::string& path);

}  // namespace troupe
