#!/usr/bin/env bash
# Installs, from Debian's packages, the system tools that the testbed's data
# plane uses when any is missing:
#
#   ip (iproute2)        network namespaces, veth links, addresses and routes
#   unshare (util-linux) a UTS namespace per pod, for its own host name
#   nft (nftables)       what kube-proxy programs its rules with (nftables mode)
#   socat, nc (netcat-openbsd), dig and nslookup (dnsutils), busybox, curl,
#   zsh                  programs that pods run and that tests exec in pods,
#                        and those that the images the testbed knows start
#                        (test/testbed/agent/resolve.go: netshoot's is zsh)
#   runc (runc)          the OCI runtime that runs the images loaded into the
#                        testbed (testbed load-image), mcsd's own among them
#
# Creating network namespaces needs root; so does installing. Run as root, or
# install the packages above yourself.
set -euo pipefail

declare -A pkg_of=(
  [ip]=iproute2 [unshare]=util-linux [nft]=nftables [socat]=socat
  [nc]=netcat-openbsd [dig]=dnsutils [nslookup]=dnsutils [busybox]=busybox
  [curl]=curl [zsh]=zsh [bash]=bash [runc]=runc
)
missing=()
for cmd in "${!pkg_of[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg_of[$cmd]}")
done
# nc may come from another netcat; the tests use the OpenBSD one's options.
if command -v nc >/dev/null 2>&1 && ! nc -h 2>&1 | grep -qi openbsd; then
  missing+=(netcat-openbsd)
fi
if ((${#missing[@]} == 0)); then
  exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $(id -u) -ne 0 ]]; then
  echo "the testbed's data plane needs these Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "the testbed's data plane needs these packages (Debian names): ${missing[*]}; no apt-get here to install them" >&2
  exit 1
fi
echo "[testbed] installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
