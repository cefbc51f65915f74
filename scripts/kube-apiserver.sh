#!/usr/bin/env bash
# kube-apiserver.sh builds the Kubernetes API server the discovery tests run
# against (internal/kubetest) into the ignored .cache/bin, once per pinned
# version, and installs Debian's etcd-server when etcd is missing.
#
# The API server is built from the k8s.io/kubernetes Go module at
# KUBE_VERSION: a throwaway module under .cache/ requires it and maps each
# ./staging module its go.mod names to the published k8s.io/* v0.X.Y, as the
# module proxy serves them. KUBE_VERSION 1.34.2 is the version this was
# proven with against Debian's etcd 3.4.23; the client-go in go.mod is the
# matching v0.34.2.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBE_VERSION=v1.34.2
STAGING_VERSION=v0.${KUBE_VERSION#v1.}
OUT=.cache/bin/kube-apiserver-$KUBE_VERSION

if [ ! -x "$OUT" ]; then
	echo "kube-apiserver: building $KUBE_VERSION into $OUT (a few minutes, once)" >&2
	mod=.cache/kube-apiserver-build
	rm -rf "$mod"
	mkdir -p "$mod" .cache/bin
	gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	if [ -z "$gomod" ] || [ ! -f "$gomod" ]; then
		echo "kube-apiserver: cannot download k8s.io/kubernetes@$KUBE_VERSION's go.mod" >&2
		exit 1
	fi
	{
		echo "module kvroute.local/kubeapiserver"
		echo
		echo "go 1.24"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" |
			sed -E "s#^[[:space:]]*(k8s\.io/[a-z0-9-]+) => .*#replace \1 => \1 $STAGING_VERSION#"
	} >"$mod/go.mod"
	n=$(grep -c '^replace' "$mod/go.mod")
	if [ "$n" -lt 20 ]; then
		echo "kube-apiserver: only $n staging modules found in $gomod" >&2
		exit 1
	fi
	(cd "$mod" && GOFLAGS=-mod=mod go build -trimpath -o "../bin/kube-apiserver-$KUBE_VERSION.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
	mv ".cache/bin/kube-apiserver-$KUBE_VERSION.tmp" "$OUT"
	rm -rf "$mod"
fi
ln -sf "kube-apiserver-$KUBE_VERSION" .cache/bin/kube-apiserver

if ! command -v etcd >/dev/null 2>&1; then
	echo "kube-apiserver: installing Debian's etcd-server" >&2
	SUDO=
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	$SUDO apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server >/dev/null
	# Debian starts the packaged service; the tests run their own etcd.
	$SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
echo "kube-apiserver: $OUT ready; etcd $(etcd --version 2>/dev/null | head -1)" >&2
