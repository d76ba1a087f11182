#!/usr/bin/env bash
# Longer runs of the rollout and re-campaign tests than CI's (which run
# 3 rollout cycles = 36 replica replacements, 50 lost terms per etcd size
# and 10 lost terms of one controller-runtime manager). Counts by
# environment, for example:
#
#   FENCEKIT_K8S_ROLLOUT_CYCLES=10 FENCEKIT_K8S_TERMS=500 k8s/scripts/soak.sh
#
# Needs the kube-apiserver and etcd binaries (go run ./cmd/kubetest-assets
# in k8s/); fails rather than skips without them.
set -euo pipefail
cd "$(dirname "$0")/.."
export FENCEKIT_REQUIRE_KUBE=1
export FENCEKIT_K8S_ROLLOUT_CYCLES=${FENCEKIT_K8S_ROLLOUT_CYCLES:-10}
export FENCEKIT_K8S_TERMS=${FENCEKIT_K8S_TERMS:-500}
export FENCEKIT_K8S_MANAGER_TERMS=${FENCEKIT_K8S_MANAGER_TERMS:-100}
go test -count=1 -timeout 2h -v -run 'TestRolloutLeaseLockToFencekit|TestRunTermsRecampaign' ./fencelock "$@"
go test -count=1 -timeout 1h -v -run 'TestTermRunnerRealAPIServer' ./ctrlfence "$@"
