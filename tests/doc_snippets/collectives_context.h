// Context for docs/collectives.md's snippets (tests/doc_snippets_test.py). Declarations only:
// the snippets are compiled, not linked.
#pragma once

#include <vector>

#include "troupe/api.h"
#include "troupe/collective.h"

std::vector<float> ComputeGradients();
