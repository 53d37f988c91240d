#!/usr/bin/env bash
# Brings up a local clusterset: two testbed clusters, an embedded registry and
# one mcsd per cluster; exports a sample app from c1, shows its import in c2,
# and resolves web.demo.svc.clusterset.local through a stock CoreDNS for c2.
# Everything keeps running until `hack/demo.sh down` (make demo-down).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state="$root/.cache/demo"
name=demo

log() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

stop_pids() {
  for f in "$state"/*.pid; do
    [[ -e "$f" ]] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
    rm -f "$f"
  done
}

if [[ "${1:-up}" == "down" ]]; then
  stop_pids
  go run ./test/testbed/cmd/testbed down -name "$name"
  rm -rf "$state"
  echo "demo removed"
  exit 0
fi

log "Building the testbed binaries (the first time takes about 15 minutes)"
bin_root=$(hack/build-testbed.sh)
# shellcheck source=testbed-versions.env
source hack/testbed-versions.env
kubectl="$bin_root/kubernetes/$KUBERNETES_VERSION/kubectl"

log "Building mcsd"
go build -o bin/mcsd ./cmd/mcsd

log "Starting clusters c1 and c2"
kubeconfig=$(go run ./test/testbed/cmd/testbed up -n 2 -name "$name")
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

mkdir -p "$state/logs"
stop_pids
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
reg_port=$(free_port)
peer_port=$(free_port)

log "Starting the registry (embedded etcd on 127.0.0.1:$reg_port)"
bin/mcsd registry --data-dir "$state/registry" --listen-client-url "http://127.0.0.1:$reg_port" \
  --listen-peer-url "http://127.0.0.1:$peer_port" >"$state/logs/registry.log" 2>&1 &
echo $! >"$state/registry.pid"
for _ in $(seq 50); do grep -q "registry ready" "$state/logs/registry.log" && break; sleep 0.2; done

for c in c1 c2; do
  log "Starting mcsd for $c (log: $state/logs/mcsd-$c.log)"
  bin/mcsd --kubeconfig "$kubeconfig" --context "$c" --registry "etcd://127.0.0.1:$reg_port" \
    --metrics-bind-address 0 --health-probe-bind-address 0 --log-development >"$state/logs/mcsd-$c.log" 2>&1 &
  echo $! >"$state/mcsd-$c.pid"
done

log "Deploying the sample app in c1 and exporting it (config/samples)"
k --context c1 apply -f config/samples/app.yaml
k --context c2 create namespace demo --dry-run=client -o yaml | k --context c2 apply -f -
k --context c1 apply -f config/samples/serviceexport.yaml

log "Waiting for the ServiceImport in c2"
for _ in $(seq 150); do
  if k --context c2 -n demo get serviceimport web -o jsonpath='{.spec.ips[0]}' 2>/dev/null | grep -q .; then
    if k --context c2 -n demo get endpointslices -l multicluster.kubernetes.io/source-cluster=c1 -o jsonpath='{.items[*].endpoints[*].addresses[0]}' 2>/dev/null | grep -q .; then
      break
    fi
  fi
  sleep 0.2
done

log "c1: the ServiceExport"
k --context c1 -n demo get serviceexport web
log "c2: the ServiceImport"
k --context c2 -n demo get serviceimport web -o wide
log "c2: its EndpointSlices (one set per source cluster)"
k --context c2 -n demo get endpointslices -l multicluster.kubernetes.io/service-name=web -L multicluster.kubernetes.io/source-cluster
log "c1: the pods behind them"
k --context c1 -n demo get pods -o wide

log "c2: DNS from stock CoreDNS (kubernetes plugin, multicluster clusterset.local; see config/coredns)"
go build -o bin/dnsq ./test/testbed/cmd/dnsq
dns_addr=$(go run ./test/testbed/cmd/testbed coredns -name "$name" -cluster c2 -pid-file "$state/coredns-c2.pid")
dnsq="bin/dnsq -server $dns_addr"
for q in "web.demo.svc.clusterset.local" "-type SRV _http._tcp.web.demo.svc.clusterset.local"; do
  echo "\$ $dnsq $q"
  # shellcheck disable=SC2086
  $dnsq $q
done
echo "c2's ServiceImport IPs: $(k --context c2 -n demo get serviceimport web -o jsonpath='{.spec.ips}')"

cat <<MSG

The clusterset keeps running. Try:
  export KUBECONFIG=$kubeconfig
  $kubectl --context c2 -n demo get serviceimport web -o yaml
  $kubectl --context c1 -n demo scale deployment web --replicas 4    # then look at c2's EndpointSlices
  $kubectl --context c1 -n demo get serviceexport web -o yaml         # Valid / Ready / Conflict conditions
  bin/mcsd status --registry etcd://127.0.0.1:$reg_port --kubeconfig $kubeconfig --context c2   # the clusterset as the registry and c2 see it
  $root/$dnsq web.demo.svc.clusterset.local                           # c2's CoreDNS (log and Corefile under .cache/testbed-runs/$name/coredns-c2-*)
Logs: $state/logs/
Stop everything with: make demo-down
MSG
