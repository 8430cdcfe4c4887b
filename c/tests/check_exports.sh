#!/usr/bin/env bash
# libpyxbuf.so exports exactly the functions pyxbuf.h declares (hidden
# visibility for everything else). Arguments: library, header.
set -euo pipefail
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TD]$/ {print $3}' | sort)
declared=$(grep -oE 'PYXBUF_API [^;(]*\b(pyxbuf_[a-z0-9_]+)\(' "$header" |
    grep -oE 'pyxbuf_[a-z0-9_]+\($' | tr -d '(' | sort)
if [ "$exported" != "$declared" ]; then
    echo "exported but not declared:"; comm -23 <(echo "$exported") <(echo "$declared")
    echo "declared but not exported:"; comm -13 <(echo "$exported") <(echo "$declared")
    exit 1
fi
echo "$(echo "$exported" | wc -l) exported symbols, all declared in pyxbuf.h"
