#!/bin/bash
# Runs bench/summarize_test.py (the summary tables and the docs rewrite on fake results) with the
# system python3.
set -euo pipefail
exec python3 "$(dirname "$0")/summarize_test.py" -v
