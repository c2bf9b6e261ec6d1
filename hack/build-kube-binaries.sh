#!/usr/bin/env bash
# Builds the Kubernetes, etcd, kwok and Cluster API binaries the tests and the
# local stack run, from their Go modules pinned in hack/kube/go.mod and
# hack/e2e-tools/go.mod, because they cannot be downloaded on every machine.
# A binary that is already present at the right version is reused.
#
# Usage: hack/build-kube-binaries.sh OUTPUT_DIR BINARY...
#   BINARY is one of kube-apiserver, kube-controller-manager, kube-scheduler,
#   kube-proxy, kubelet, kubeadm, kubectl, etcd, kwok, capi-manager.
set -euo pipefail

# Absolute, because the builds run in the tool modules' directories.
mkdir -p "$1"
out_dir=$(cd "$1" && pwd)
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kube_module_dir="$root/hack/kube"
tools_module_dir="$root/hack/e2e-tools"

kube_version=$(cd "$kube_module_dir" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
version_pkg=k8s.io/component-base/version
kube_ldflags="-s -w -X $version_pkg.gitVersion=$kube_version -X $version_pkg.gitMajor=1 -X $version_pkg.gitMinor=$kube_minor -X $version_pkg.gitTreeState=clean"

package_of() {
  case $1 in
    kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy | kubelet | kubeadm | kubectl) echo "k8s.io/kubernetes/cmd/$1" ;;
    etcd) echo "go.etcd.io/etcd/server/v3" ;;
    kwok) echo "sigs.k8s.io/kwok/cmd/kwok" ;;
    capi-manager) echo "sigs.k8s.io/cluster-api/core" ;;
    *) echo "unknown binary $1" >&2; return 1 ;;
  esac
}

module_dir_of() {
  case $1 in
    kwok | capi-manager) echo "$tools_module_dir" ;;
    *) echo "$kube_module_dir" ;;
  esac
}

# ldflags_of stamps the version the way each project's release build does, so
# that clients see a real version.
ldflags_of() {
  local module_dir=$1 binary=$2
  case $binary in
    kube*) echo "$kube_ldflags" ;;
    capi-manager)
      local capi_version capi_minor
      capi_version=$(cd "$module_dir" && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
      capi_minor=$(echo "$capi_version" | cut -d. -f2)
      echo "-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$capi_version -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=$capi_minor -X sigs.k8s.io/cluster-api/version.gitTreeState=clean" ;;
    *) echo "-s -w" ;;
  esac
}

mkdir -p "$out_dir"
for binary in "$@"; do
  package=$(package_of "$binary")
  module_dir=$(module_dir_of "$binary")
  module_version=$(cd "$module_dir" && go list -f '{{.Module.Path}}@{{.Module.Version}}' "$package")
  stamp="$out_dir/.$binary.version"
  if [[ -x "$out_dir/$binary" && -f "$stamp" && "$(cat "$stamp")" == "$module_version" ]]; then
    continue
  fi
  echo "Building $binary from $module_version (takes a few minutes the first time)"
  ldflags=$(ldflags_of "$module_dir" "$binary")
  (cd "$module_dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out_dir/$binary" "$package")
  echo "$module_version" >"$stamp"
done
