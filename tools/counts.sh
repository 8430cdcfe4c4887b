# Sourced by tools/test-matrix.sh and tools/test-tsan-ft.sh: each function
# prints "<passed>/<failed>" from a test log.

# "<passed>/<failed>" from a CTest log.
ctest_counts() {
    local line
    line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$1" | tail -1)
    [ -n "$line" ] || { echo "0/1"; return; }
    local failed total
    failed=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.* tests failed out of ([0-9]+).*/\1/' <<<"$line")
    local skipped
    skipped=$(grep -c '\*\*\*Skipped' "$1" || true)
    echo "$((total - failed - skipped))/$failed"
}

# "<passed>/<failed>" from pytest's summary lines (several runs add up).
pytest_counts() {
    local p=0 f=0 n line
    while read -r line; do
        n=$(grep -oE '[0-9]+ passed' <<<"$line" | cut -d' ' -f1); p=$((p + ${n:-0}))
        n=$(grep -oE '[0-9]+ (failed|error|errors)' <<<"$line" | awk '{s += $1} END {print s + 0}')
        f=$((f + ${n:-0}))
    done < <(grep -E '^=*\s*[0-9]+ (passed|failed|error)|^[0-9]+ (passed|failed|error)' "$1")
    [ "$p$f" = 00 ] && f=1
    echo "$p/$f"
}

# "<passed>/<failed>" from cargo test's "test result:" lines.
cargo_counts() {
    local p f
    p=$(grep -oE 'test result: [A-Za-z]+\. [0-9]+ passed' "$1" | awk '{s += $4} END {print s + 0}')
    f=$(grep -oE '[0-9]+ failed;' "$1" | awk '{s += $1} END {print s + 0}')
    p=${p:-0}; f=${f:-0}
    # A build error fails no test: count it as one failure.
    [ "$f" = 0 ] && grep -q '^error' "$1" && f=1
    echo "$p/$f"
}
