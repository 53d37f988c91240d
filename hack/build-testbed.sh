#!/usr/bin/env bash
# Builds the testbed binaries (Kubernetes control plane, kubectl, etcd, kwok,
# kwokctl, CoreDNS) from the Go module proxy into a cache keyed by version.
# A binary that is already in the cache is not built again.
#
# Usage: hack/build-testbed.sh [CACHE_DIR]
# Prints nothing but progress on stderr; the bin directory is printed on stdout.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=testbed-versions.env
source "$root/hack/testbed-versions.env"
cache=${1:-${MCSD_TESTBED_CACHE:-$root/.cache/testbed}}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

log() { printf '[testbed-build] %s\n' "$*" >&2; }

# progress reads `go build -v` output and prints a line every 100 packages.
progress() {
  local name=$1 n=0
  while IFS= read -r line; do
    case "$line" in
      *.go:[0-9]*|"go: "*|"# "*) printf '%s\n' "$line" >&2 ;;
    esac
    n=$((n + 1))
    if (( n % 100 == 0 )); then log "$name: $n packages compiled"; fi
  done
}

# build_in_module DIR OUTDIR LDFLAGS PKG... builds packages of the module in DIR.
build_in_module() {
  local dir=$1 out=$2 ldflags=$3 name=$4
  shift 4
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "building $name (the first build takes several minutes on 2 cores)"
  local start=$SECONDS
  (cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$tmp/" "$@" 2>&1) | progress "$name"
  local rc=${PIPESTATUS[0]}
  if (( rc != 0 )); then log "$name: build failed"; exit "$rc"; fi
  rm -rf "$out" && mv "$tmp" "$out"
  log "$name: built in $((SECONDS - start))s"
}

# The version stamped into every Kubernetes binary.
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

# k8s_module writes, once, a module that requires k8s.io/kubernetes with its
# staging modules replaced by their published versions, and prints its path.
k8s_module() {
  local mod="$cache/src/kubernetes-$KUBERNETES_VERSION"
  if [[ ! -f "$mod/tools.go" ]]; then
    mkdir -p "$mod"
    local staging_version="v0.${KUBERNETES_VERSION#v1.}" gomod_file
    gomod_file=$(cd "$mod" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    {
      echo "module mcsd.local/testbed/kubernetes"
      echo
      echo "go 1.25.0"
      echo
      echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
      echo
      echo "replace ("
      sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"$staging_version"'#p' "$gomod_file"
      echo ")"
    } >"$mod/go.mod"
    # Every program built from it, so that one tidy resolves them all.
    cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
GO
    (cd "$mod" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
    (cd "$mod" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes@$KUBERNETES_VERSION" >&2)
  fi
  echo "$mod"
}

# --- Kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
k8s_out="$cache/kubernetes/$KUBERNETES_VERSION"
if [[ ! -x "$k8s_out/kube-apiserver" || ! -x "$k8s_out/kubectl" ]]; then
  build_in_module "$(k8s_module)" "$k8s_out" "$ld" "kubernetes $KUBERNETES_VERSION" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
fi

# --- The node side: kube-proxy (routes Services in each cluster's node network
# namespace) and agnhost (the test server of Kubernetes' e2e images, run as a
# pod's process). A directory of their own: a cache from before they were
# added builds just these.
node_out="$cache/kubernetes-node/$KUBERNETES_VERSION"
if [[ ! -x "$node_out/kube-proxy" || ! -x "$node_out/agnhost" ]]; then
  build_in_module "$(k8s_module)" "$node_out" "$ld" "kube-proxy and agnhost $KUBERNETES_VERSION" \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/test/images/agnhost
fi

# --- etcd: its server module has replace directives, so a tiny main wraps etcdmain.
etcd_out="$cache/etcd/$ETCD_VERSION"
if [[ ! -x "$etcd_out/etcd" ]]; then
  mod="$cache/src/etcd-$ETCD_VERSION"
  mkdir -p "$mod/etcd"
  cat >"$mod/go.mod" <<GOMOD
module mcsd.local/testbed/etcd

go 1.25.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat >"$mod/etcd/main.go" <<'GO'
// Command etcd is the etcd server, built from its module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$mod" && GOFLAGS=-mod=mod go mod tidy >&2)
  build_in_module "$mod" "$etcd_out" "-s -w" "etcd $ETCD_VERSION" ./etcd
fi

# --- kwok and kwokctl, CoreDNS: plain `go install` from the proxy.
install_tool() {
  local name=$1 version=$2 out=$3
  shift 3
  if [[ -x "$out/$name" ]]; then return; fi
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "building $name $version"
  local start=$SECONDS
  for pkg in "$@"; do
    (GOBIN="$tmp" CGO_ENABLED=0 go install -v -trimpath -ldflags "-s -w" "$pkg@$version" 2>&1) | progress "$name"
    local rc=${PIPESTATUS[0]}
    if (( rc != 0 )); then log "$name: build failed"; exit "$rc"; fi
  done
  rm -rf "$out" && mv "$tmp" "$out"
  log "$name: built in $((SECONDS - start))s"
}
install_tool kwok "$KWOK_VERSION" "$cache/kwok/$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
install_tool coredns "$COREDNS_VERSION" "$cache/coredns/$COREDNS_VERSION" github.com/coredns/coredns

log "all testbed binaries are in $cache"
echo "$cache"
