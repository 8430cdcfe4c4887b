#!/usr/bin/env bash
# libpyxbuf.so (or pyxbuf.dll: tools/check-windows.sh) exports exactly the
# functions pyxbuf.h declares (hidden visibility, or no dllexport, for
# everything else). Arguments: library, header.
set -euo pipefail
lib=$1 header=$2
if [[ $lib == *.dll ]]; then # the PE export table's names
    exported=$(x86_64-w64-mingw32-objdump -p "$lib" |
        awk '/\[Ordinal\/Name Pointer\] Table/ {on=1; next} on && NF==0 {on=0} on {print $NF}' | sort)
else
    exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TD]$/ {print $3}' | sort)
fi
declared=$(grep -oE 'PYXBUF_API [^;(]*\b(pyxbuf_[a-z0-9_]+)\(' "$header" |
    grep -oE 'pyxbuf_[a-z0-9_]+\($' | tr -d '(' | sort)
if [ "$exported" != "$declared" ]; then
    echo "exported but not declared:"; comm -23 <(echo "$exported") <(echo "$declared")
    echo "declared but not exported:"; comm -13 <(echo "$exported") <(echo "$declared")
    exit 1
fi
echo "$(echo "$exported" | wc -l) exported symbols, all declared in pyxbuf.h"
