#!/bin/sh
echo "bazel coverage is not supported offline: Bazel's coverage tools cannot be fetched." >&2
exit 1
