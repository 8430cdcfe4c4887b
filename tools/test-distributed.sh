#!/usr/bin/env bash
# make test-distributed: pyxbuf arrays through the engines users run
# (python-tests/distributed/): multiprocessing (spawn, fork, forkserver,
# ProcessPoolExecutor), Dask distributed (a LocalCluster of worker processes)
# and Ray (a local instance), all on this machine, loopback only.
#
# The engines go into target/distributed/site (pip --target, from pip's cache
# after the first run: about 30 s), on PYTHONPATH: what they need (tornado,
# msgpack, cloudpickle, protobuf, ...) comes from there, and NumPy, ml_dtypes
# and the pyxbuf modules, which they do not install, from the venv. An engine that cannot be installed
# is reported SKIPPED with pip's reason (its suite skips, naming it); the run
# never passes silently without one. Each test is bounded (pytest's timeout
# below, and each test's own waits).
set -uo pipefail
cd "$(dirname "$0")/.."
VPY=${VPY:-.venv/bin/python}
SITE=target/distributed/site
ENGINES=("dask==2026.8.0 distributed==2026.8.0" "ray==2.60.0")
NAMES=("distributed" "ray")
missing=""
mkdir -p "$SITE"
for i in "${!ENGINES[@]}"; do
    name=${NAMES[$i]}
    if PYTHONPATH=$SITE "$VPY" -c "import $name" 2>/dev/null; then continue; fi
    # shellcheck disable=SC2086  # the specs are separate words
    if ! log=$("$VPY" -m pip install --quiet --disable-pip-version-check --target "$SITE" \
            ${ENGINES[$i]} 2>&1); then
        reason=$(printf '%s\n' "$log" | grep -m1 -E "ERROR|error" || printf '%s' "${log##*$'\n'}")
        missing+="$name: ${reason:-pip install failed}"$'\n'
    fi
done
printf '%s' "$missing" | while IFS= read -r line; do
    [ -n "$line" ] && echo "test-distributed: SKIPPED ${line%%:*} (${line#*: })"
done
PYXBUF_DISTRIBUTED=1 PYXBUF_ENGINES_MISSING="$missing" PYTHONPATH="$SITE:${PYTHONPATH:-}" \
    timeout 900 "$VPY" -m pytest -q -p no:cacheprovider --noconftest -rs python-tests/distributed
rc=$?
[ -z "$missing" ] || echo "test-distributed: engines SKIPPED: $(printf '%s' "$missing" | cut -d: -f1 | tr '\n' ' ')"
exit $rc
