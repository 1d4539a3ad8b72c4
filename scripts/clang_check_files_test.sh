#!/bin/bash
# Runs scripts/clang_check_files_test.py (which sources the clang thread-safety check compiles).
set -euo pipefail
exec python3 "$(dirname "$0")/clang_check_files_test.py" -v
