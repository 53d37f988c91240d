#!/usr/bin/env bash
# Brings up a local clusterset: two testbed clusters (pods run, kube-proxy
# routes), an embedded registry, and mcsd installed in each cluster as a user
# installs it: its image (make image) loaded into the testbed and run by runc,
# from the kustomize manifests; deploys a sample app in both clusters and
# exports it, then a client pod in c2 curls web.demo.svc.clusterset.local and
# gets replies from pods of both clusters. Everything keeps running until
# `hack/demo.sh down` (make demo-down).
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
  go run ./test/testbed/cmd/testbed down -name "$name" 2>/dev/null
  # The logs stay until the next make demo.
  if [[ -d "$state" ]]; then find "$state" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +; fi
  echo "demo removed; its logs stay in $state/logs/ until the next make demo"
  exit 0
fi

log "Building the testbed binaries (the first time takes 15 to 20 minutes)"
rm -rf "$state/logs"
mkdir -p "$state/logs"
bin_root=$(hack/build-testbed.sh 2>"$state/logs/build.log") || { tail -20 "$state/logs/build.log"; exit 1; }
# shellcheck source=testbed-versions.env
source hack/testbed-versions.env
kubectl="$bin_root/kubernetes/$KUBERNETES_VERSION/kubectl"

log "Building mcsd, and its image (make image; log: $state/logs/image.log)"
go build -o bin/mcsd ./cmd/mcsd
go build -o bin/testbed ./test/testbed/cmd/testbed
go run ./hack/image build -out "$state/image" -tag mcsd:dev >"$state/logs/image.log" 2>&1 || { tail -20 "$state/logs/image.log"; exit 1; }

log "Starting clusters c1 and c2, with pods that run and kube-proxy in each (log: $state/logs/testbed.log)"
if ! kubeconfig=$(go run ./test/testbed/cmd/testbed up -n 2 -name "$name" 2>>"$state/logs/testbed.log"); then
  tail -20 "$state/logs/testbed.log"
  exit 1
fi
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
# Labels each line of a command's output with the cluster it ran against.
in_cluster() { local c=$1; shift; k --context "$c" "$@" 2>&1 | sed "s/^/[$c] /"; }
ln -sf "$kubeconfig" "$state/kubeconfig"
echo "kubeconfig: $state/kubeconfig (contexts c1, c2)"

stop_pids
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
reg_port=$(free_port)
peer_port=$(free_port)

log "Starting the registry (embedded etcd on 127.0.0.1:$reg_port)"
bin/mcsd registry --data-dir "$state/registry" --listen-client-url "http://127.0.0.1:$reg_port" \
  --listen-peer-url "http://127.0.0.1:$peer_port" >"$state/logs/registry.log" 2>&1 &
echo $! >"$state/registry.pid"
for _ in $(seq 50); do grep -q "registry ready" "$state/logs/registry.log" && break; sleep 0.2; done
echo "etcd://127.0.0.1:$reg_port" >"$state/registry-url"
echo "registry: etcd://127.0.0.1:$reg_port (also in $state/registry-url)"

log "Installing mcsd in c1 and c2 from its image, with kubectl apply -k"
bin/testbed load-image -name "$name" "$state/image/mcsd-image-$(go env GOARCH).docker.tar"
for c in c1 c2; do
  # The pods reach the registry on the host's loopback through a relay in
  # the cluster's node namespace; it runs until make demo-down.
  bin/testbed expose -name "$name" -cluster "$c" "127.0.0.1:$reg_port" >"$state/expose-$c.addr" 2>>"$state/logs/expose-$c.log" &
  echo $! >"$state/expose-$c.pid"
  for _ in $(seq 50); do [[ -s "$state/expose-$c.addr" ]] && break; sleep 0.2; done
  addr=$(cat "$state/expose-$c.addr")
  [[ -n "$addr" ]] || { echo "no relay to the registry for $c; see $state/logs/expose-$c.log"; exit 1; }
  # A user's own overlay: ours, with the registry's address.
  mkdir -p "$state/overlay-$c"
  cat >"$state/overlay-$c/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../../config/default
configMapGenerator:
- name: mcsd-registry
  namespace: mcsd-system
  behavior: replace
  literals:
  - MCSD_REGISTRY=etcd://$addr
YAML
  echo "\$ kubectl --context $c apply --server-side -k $state/overlay-$c   # config/default, registry etcd://$addr"
  k --context "$c" apply --server-side --force-conflicts -k "$state/overlay-$c" >"$state/logs/apply-$c.log" 2>&1 || { cat "$state/logs/apply-$c.log"; exit 1; }
done
for c in c1 c2; do
  in_cluster "$c" -n mcsd-system rollout status deployment/mcsd --timeout=180s
done

log "Deploying the sample app (config/samples) in c1 and c2, and exporting it from both"
for c in c1 c2; do
  in_cluster "$c" apply -f config/samples/app.yaml -f config/samples/serviceexport.yaml
done
in_cluster c2 -n demo run client --image=registry.k8s.io/pause:3.10 --restart=Never
for c in c1 c2; do
  in_cluster "$c" -n demo rollout status deployment/web --timeout=120s
done
in_cluster c2 -n demo wait --for=condition=Ready pod/client --timeout=120s

log "Waiting for c2 to import web from both clusters, each with a ready endpoint (EndpointsReady)"
for _ in $(seq 150); do
  clusters=$(k --context c2 -n demo get serviceimport web -o jsonpath='{.status.clusters[*].cluster}' 2>/dev/null || true)
  ready=$(k --context c2 -n demo get serviceimport web -o jsonpath='{.status.conditions[?(@.type=="EndpointsReady")].status}' 2>/dev/null || true)
  [[ "$clusters" == *c1* && "$clusters" == *c2* && "$ready" == True ]] && break
  sleep 0.2
done

log "c1 and c2: the ServiceExports; c2: the ServiceImport, and its EndpointSlices (one set per source cluster)"
for c in c1 c2; do in_cluster "$c" -n demo get serviceexport web; done
k --context c2 -n demo get serviceimport web -o wide
k --context c2 -n demo get endpointslices -l multicluster.kubernetes.io/service-name=web -L multicluster.kubernetes.io/source-cluster
log "The pods behind it"
for c in c1 c2; do echo "# $c"; k --context "$c" -n demo get pods -l app=web -o wide; done
c1_pods=" $(k --context c1 -n demo get pods -l app=web -o jsonpath='{.items[*].metadata.name}') "

log "c2: the client pod resolves and curls web.demo.svc.clusterset.local"
# The first requests can fail for a moment after the import is ready:
# kube-proxy syncs its rules from the EndpointSlices mcsd wrote within
# about a second, and the sample's pods, which have no readiness probe,
# count as ready before their server listens. The first reply is waited
# for (up to 50 tries, 0.2 s apart) before the replies are shown.
for _ in $(seq 50); do
  [[ -n "$(k --context c2 -n demo exec client -- curl -s -m 1 web.demo.svc.clusterset.local/hostname 2>/dev/null || true)" ]] && break
  sleep 0.2
done
echo "\$ kubectl --context c2 -n demo exec client -- dig +short web.demo.svc.clusterset.local"
k --context c2 -n demo exec client -- dig +short web.demo.svc.clusterset.local
echo "\$ kubectl --context c2 -n demo exec client -- curl -s -m 2 web.demo.svc.clusterset.local/hostname   # a few times"
seen=""
for i in $(seq 20); do
  reply=$(k --context c2 -n demo exec client -- curl -s -m 2 web.demo.svc.clusterset.local/hostname || true)
  from=c2; [[ "$c1_pods" == *" $reply "* ]] && from=c1
  if [[ -n "$reply" ]]; then
    printf '%-40s (a pod in %s)\n' "$reply" "$from"
  else
    printf '%-40s (no reply)\n' ""
  fi
  [[ -n "$reply" && "$seen" != *"$from"* ]] && seen+="$from "
  if (( i >= 6 )) && [[ "$seen" == *c1* && "$seen" == *c2* ]]; then break; fi
done
if [[ "$seen" == *c1* && "$seen" == *c2* ]]; then
  echo "Replies came from pods of both clusters."
else
  for c in c1 c2; do k --context "$c" -n mcsd-system logs deployment/mcsd >"$state/logs/mcsd-$c.log" 2>&1 || true; done
  echo "Replies came only from: ${seen:-nowhere}; see $state/logs/ (mcsd-c1.log and mcsd-c2.log: the mcsd pods' logs)"
  exit 1
fi

cat <<MSG

The clusterset keeps running. Try, in this shell:
  export KUBECONFIG=$state/kubeconfig
  kubectl() { $kubectl "\$@"; }
  kubectl --context c2 -n demo exec client -- curl -s -m 2 web.demo.svc.clusterset.local/hostname; echo
  kubectl --context c2 -n demo get serviceimport web        # TYPE, IPS, CLUSTERS, READY, ENDPOINTSREADY
  kubectl --context c1 -n demo get serviceexport web        # VALID, READY, CONFLICT
  kubectl --context c1 -n demo scale deployment web --replicas 0
      # then curl again: only c2's pods answer. For about a second after the scale, a request can
      # fail: kube-proxy still sends to c1's pods that are already gone, until the change reaches it.
      # c2's ServiceImport then says ENDPOINTSREADY False: c1 has no ready endpoint.
  kubectl --context c2 -n mcsd-system logs deployment/mcsd  # mcsd, running from its image
  bin/mcsd status --registry \$(cat $state/registry-url) --context c2
Logs: $state/logs/ (the testbed's, the registry's, the image build's); they stay after make demo-down.
Stop everything with: make demo-down
MSG
