#!/usr/bin/env bash
# The long legs CI leaves out to stay within an hour on a cold machine
# (.ci/run runs the matrix's 3.5 one-member leg and the apiserver v0.33
# coexistence case). docs/RELEASING.md runs this before every release;
# run it after changing lease, the guards or the module requirements.
#
#   scripts/long-checks.sh           # everything below, about 37 minutes warm on 2 cores
#   LEGS="matrix" scripts/long-checks.sh
#
# Legs (LEGS, space-separated; default all of them):
#   matrix  the server matrix's other cells: 3.5 on three members, 3.6
#           and 3.7 on one and three (scripts/matrix.sh, one package at a
#           time); about 29 minutes
#   compat  coexistence with every k8s.io/apiserver minor from v0.33 and
#           with the newest controller-runtime + client-go
#           (scripts/compat/run.sh, every case); minutes cold
#   safety  the safety suite's process profile 10 times on etcd 3.5
#           (scripts/safety-loop.sh; 30 runs on 3.7 were measured for
#           each release note)
# The databases of the SQL legs are those of the environment
# (FENCEKIT_PG_DSN, FENCEKIT_MYSQL_DSN), as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a legs <<<"${LEGS:-matrix compat safety}"
for leg in "${legs[@]}"; do
  start=$SECONDS
  case $leg in
  matrix)
    FENCEKIT_MATRIX_VERSIONS=3.5 FENCEKIT_MATRIX_MEMBERS=3 scripts/matrix.sh -p 1
    FENCEKIT_MATRIX_VERSIONS="3.6 3.7" FENCEKIT_MATRIX_MEMBERS="1 3" scripts/matrix.sh -p 1
    ;;
  compat) scripts/compat/run.sh ;;
  safety) FENCEKIT_ETCD_VERSION=3.5 scripts/safety-loop.sh 10 ;;
  *)
    echo "long-checks: unknown leg $leg (matrix, compat, safety)" >&2
    exit 2
    ;;
  esac
  printf '== %s: %d s\n' "$leg" $((SECONDS - start))
done
