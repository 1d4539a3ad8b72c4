// Context for README.md's snippets (tests/doc_snippets_test.py): none yet, its one snippet is a
// whole program compiled as shown.
#pragma once
