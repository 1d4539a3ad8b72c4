#!/usr/bin/env bash
# Runs tests/doc_snippets_test.py (see there).
exec python3 "$TEST_SRCDIR/$TEST_WORKSPACE/tests/doc_snippets_test.py"
