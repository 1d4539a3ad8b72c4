#!/usr/bin/env bash
# `bazel test //tests:image_test` (manual): runs scripts/image_test.sh in the source tree, where it
# finds dist/troupe_*_amd64.deb (or $TROUPE_DEB, passed with --test_env=TROUPE_DEB=...) and
# writes dist/troupe-image.tar.
script="$(readlink -f "$TEST_SRCDIR/$TEST_WORKSPACE/scripts/image_test.sh")"
exec bash "$script" ${TROUPE_DEB:+"$TROUPE_DEB"}
