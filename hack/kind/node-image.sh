# The kind node image, sourced by build-images.sh: a Debian root file system
# with systemd, containerd, runc, CNI plugins and crictl, kind's node files
# (entrypoint, containerd and kubelet configuration) from the kind module, the
# Kubernetes node binaries, and the control-plane images preloaded into
# containerd, so that kubeadm never pulls.

readonly node_image=kindest/node:v1.36.3
# kind v0.33.0's node files and its pins for containerd and crictl; the CoreDNS
# version kubeadm v1.36 asks for.
readonly kind_module=sigs.k8s.io/kind@v0.33.0
readonly containerd_module=github.com/containerd/containerd/v2@v2.3.4
readonly cri_tools_module=sigs.k8s.io/cri-tools@v1.36.0
readonly coredns_module=github.com/coredns/coredns@v1.14.2
readonly kube_bin=${KUBE_BIN:-$root/bin/k8s}
readonly node_packages=systemd,systemd-sysv,dbus,iptables,nftables,iproute2,ca-certificates,runc,containernetworking-plugins,conntrack,ethtool,socat,mount,util-linux,kmod,procps,libseccomp2,pigz,ebtables,jq,bash
readonly flannel_module=github.com/flannel-io/flannel@v0.28.10
# The image default-cni.yaml runs.
readonly flannel_image=ghcr.io/flannel-io/flannel:v0.28.10
# Cluster API's AutoscalerSpec runs its scale-up pods from this pause image
# (test/framework's AddScaleUpDeploymentAndWait), which is not kubeadm's.
readonly framework_pause_image=registry.k8s.io/pause:3.10.1
# kube-proxy programs the host's packet filter with these commands.
readonly kube_proxy_packages=iptables,nftables,conntrack,ipset,kmod

build_node_image() {
  local rootfs=capi-autoscaler-e2e/debian-node:$debian_suite
  local proxy_base=capi-autoscaler-e2e/debian-kube-proxy:$debian_suite
  debian_image "$rootfs" "$node_packages"
  debian_image "$proxy_base" "$kube_proxy_packages"

  local bin=$work/node/bin
  go_build_module "$containerd_module" "$bin" "no_aufs no_zfs no_btrfs no_devmapper urfave_cli_no_docs osusergo netgo" \
    ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2
  go_build_module "$cri_tools_module" "$bin" "" ./cmd/crictl
  low "$root/hack/build-kube-binaries.sh" "$kube_bin" kubelet kubeadm kubectl kube-proxy \
    kube-apiserver kube-controller-manager kube-scheduler etcd
  build_coredns "$bin"
  build_flanneld "$bin"
  build_pause "$bin"

  local images
  images=$(build_control_plane_images "$proxy_base" "$bin")

  local kind_dir hash
  kind_dir=$(module_dir "$kind_module")
  hash=$(inputs_hash "build_node_image assemble_node_image preload_images" \
    "$(docker image inspect -f '{{.Id}}' "$rootfs" $images)" \
    "$kind_module" "$here/node/Dockerfile" "$here/node/cni-conf-template.json" "$here/node/default-cni.yaml" \
    "$bin/containerd" "$bin/ctr" "$bin/containerd-shim-runc-v2" "$bin/crictl" \
    "$kube_bin/kubelet" "$kube_bin/kubeadm" "$kube_bin/kubectl")
  if up_to_date "$node_image" "$hash"; then log "$node_image is up to date"; return 0; fi
  assemble_node_image "$rootfs" "$kind_dir" "$bin" "$images" "$hash"
  log "built $node_image"
}

# build_patched_module BINARY MODULE OUT PATCH [LDFLAGS] builds BINARY from
# the main package of a copy of MODULE that PATCH (a function run in the copy)
# changed. A stamp of the module version skips the build next time.
build_patched_module() {
  local binary=$1 module=$2 out=$3 patch=$4 ldflags=${5:-}
  local stamp="$out/.$binary-$(echo "$module" | sha256sum | cut -c1-16)"
  [[ -f $stamp ]] && return 0
  log "building $binary from $module"
  local src=$work/$binary-src
  rm -rf "$src"
  cp -r "$(module_dir "$module")" "$src"
  chmod -R u+w "$src"
  (cd "$src" && "$patch") || { log "patching $module for $binary failed"; return 1; }
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod low go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$binary" .)
  rm -rf "$src"
  touch "$stamp"
}

# build_coredns builds CoreDNS with only the plugins the Corefile kubeadm
# writes uses.
build_coredns() { build_patched_module coredns "$coredns_module" "$1" coredns_kubeadm_plugins; }

# coredns_kubeadm_plugins rewrites the generated file that lists every plugin.
coredns_kubeadm_plugins() {
  {
    echo "package plugin"
    echo "import ("
    for plugin in errors health ready kubernetes metrics forward cache loop reload loadbalance log; do
      echo "  _ \"github.com/coredns/coredns/plugin/$plugin\""
    done
    echo ")"
  } >core/plugin/zplugin.go
}

# build_flanneld builds flannel's daemon without the backends whose
# dependencies cannot be had here: tencentvpc (its SDK is not served) and udp
# (needs cgo; upstream leaves it out on every architecture but amd64). The
# node image's CNI uses host-gw.
build_flanneld() {
  build_patched_module flanneld "$flannel_module" "$1" flannel_without_unbuildable_backends \
    "-X github.com/flannel-io/flannel/pkg/version.Version=${flannel_module#*@}"
}

flannel_without_unbuildable_backends() {
  grep -q 'pkg/backend/tencentvpc"' main.go || return 1
  sed -i -e '/pkg\/backend\/tencentvpc"/d' -e '/pkg\/backend\/udp"/d' main.go
}

# build_pause compiles the pause container's program from the Kubernetes
# module the way its Makefile does.
build_pause() {
  local out=$1
  local kube_version dir
  kube_version=$(cd "$root/hack/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  dir=$(cd "$root/hack/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  local stamp="$out/.pause-$kube_version"
  [[ -f $stamp ]] && return 0
  gcc -Os -Wall -Werror -static -DVERSION="$kube_version" -o "$out/pause" "$dir/build/pause/linux/pause.c"
  touch "$stamp"
}

# build_control_plane_images tags an image for each one kubeadm asks for, with
# the names and tags kubeadm itself lists, flannel's for the CNI manifest and
# the pause image of Cluster API's test framework, and prints their names.
build_control_plane_images() {
  local proxy_base=$1 bin=$2
  local kube_version
  kube_version=$("$kube_bin/kubeadm" version -o short)
  local image
  for image in $("$kube_bin/kubeadm" config images list --kubernetes-version "$kube_version") "$flannel_image" "$framework_pause_image"; do
    local component=${image##*/}
    component=${component%%:*}
    local binary path entrypoint="" base=scratch
    case $component in
      kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
        binary=$kube_bin/$component path=/usr/local/bin/$component ;;
      kube-proxy) binary=$kube_bin/kube-proxy path=/usr/local/bin/kube-proxy base=$proxy_base ;;
      coredns) binary=$bin/coredns path=/coredns entrypoint=/coredns ;;
      pause) binary=$bin/pause path=/pause entrypoint=/pause ;;
      # Like kube-proxy, flanneld runs iptables.
      flannel) binary=$bin/flanneld path=/opt/bin/flanneld base=$proxy_base ;;
      *) log "kubeadm asks for $image, which this script does not know how to build"; return 1 ;;
    esac
    local base_id=scratch hash
    [[ $base == scratch ]] || base_id=$(docker image inspect -f '{{.Id}}' "$base")
    hash=$(inputs_hash "build_control_plane_images scratch_image" "$binary" "$path" "$entrypoint" "$base_id")
    if ! up_to_date "$image" "$hash"; then
      BASE=$base scratch_image "$image" "$hash" "$binary" "$path" "$entrypoint"
      log "built $image" >&2
    fi
    echo "$image"
  done
}

# assemble_node_image builds the node image from the root file system, kind's
# node files and the binaries, then preloads the control-plane images.
assemble_node_image() {
  local rootfs=$1 kind_dir=$2 bin=$3 images=$4 hash=$5
  local ctx=$work/node/context
  rm -rf "$ctx"
  mkdir -p "$ctx/bin"
  cp -r "$kind_dir/images/base/files" "$ctx/files"
  chmod -R u+w "$ctx/files"
  cp "$here/node/Dockerfile" "$here/node/cni-conf-template.json" "$here/node/default-cni.yaml" "$ctx/"
  cp "$bin/containerd" "$bin/ctr" "$bin/containerd-shim-runc-v2" "$bin/crictl" \
    "$kube_bin/kubelet" "$kube_bin/kubeadm" "$kube_bin/kubectl" "$ctx/bin/"
  local kube_version pause_image
  kube_version=$("$kube_bin/kubeadm" version -o short)
  # The kubelet's sandbox image: kubeadm's pause, not the framework's.
  pause_image=$("$kube_bin/kubeadm" config images list --kubernetes-version "$kube_version" | grep /pause:)
  local unpreloaded=capi-autoscaler-e2e/node-unpreloaded:build
  docker_build -t "$unpreloaded" \
    --build-arg BASE="$rootfs" --build-arg KUBE_VERSION="$kube_version" --build-arg PAUSE_IMAGE="$pause_image" \
    --label "$owner_label" "$ctx"
  rm -rf "$ctx"
  preload_images "$unpreloaded" "$images" "$hash"
  docker image rm "$unpreloaded" >/dev/null
}

# preload_images imports the images into the node's containerd, pinned so
# that the kubelet never removes them, as kind's own node image build does:
# containerd runs in a container of the image, which is then committed.
preload_images() {
  local unpreloaded=$1 images=$2 hash=$3
  local archive=$work/node/images.tar
  # shellcheck disable=SC2086 # one word per image
  low docker save -o "$archive" $images
  local container=capi-autoscaler-e2e-node-preload
  docker rm -f "$container" >/dev/null 2>&1 || true
  local output
  output=$(docker run --name "$container" --label "$owner_label" --privileged --entrypoint /bin/bash \
    -v "$archive:/images.tar:ro" "$unpreloaded" -ec '
      containerd >/tmp/containerd.log 2>&1 &
      containerd=$!
      for _ in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done
      ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests /images.tar
      kill "$containerd"
      wait "$containerd" || true
      rm -rf /tmp/* /run/containerd' 2>&1) || { echo "$output"; docker rm -f "$container" >/dev/null; return 1; }
  local preloaded=capi-autoscaler-e2e/node-preloaded:build
  docker commit "$container" "$preloaded" >/dev/null
  docker rm "$container" >/dev/null
  rm -f "$archive"
  # The commit took the build command as the image's; give it the node's back.
  local ctx
  ctx=$(mktemp -d "$work/ctx.XXXX")
  cat >"$ctx/Dockerfile" <<EOF
FROM $preloaded
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
LABEL $inputs_label=$hash
EOF
  docker_build -t "$node_image" "$ctx"
  rm -rf "$ctx"
  docker image rm "$preloaded" >/dev/null
}
