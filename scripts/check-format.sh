#!/bin/sh
# Fails (and lists the files) when a tracked C, C++, CUDA or header file is not formatted as
# .clang-format says. Fix with: clang-format -i FILE...
set -eu
cd "$(dirname "$0")/.."
files=$(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp')
bad=""
for f in $files; do
  [ -f "$f" ] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
  echo "unformatted (run clang-format -i on them):$bad"
  exit 1
fi
echo "all $(echo "$files" | wc -w) files formatted"
