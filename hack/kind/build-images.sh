#!/usr/bin/env bash
# Builds the images the kind end-to-end suite runs, offline: no image can be
# pulled on the build machines, so every image is made from Go modules (served
# by the module proxy) and Debian packages (from the machine's apt mirror).
# An image whose inputs did not change is kept: each image carries the hash of
# its inputs in the label io.capi-autoscaler.e2e.inputs.
#
# Usage: hack/kind/build-images.sh IMAGE...
#   IMAGE is one of node, haproxy, capi, all (docs/kind-e2e.md says what each
#   one is made of).
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/hack/kind
# Built binaries and build contexts, kept between runs as a cache.
work=${KIND_IMAGES_WORK:-$root/bin/kind-images}
readonly inputs_label=io.capi-autoscaler.e2e.inputs
readonly owner_label=io.capi-autoscaler.e2e=images

readonly debian_suite=bookworm
# CAPD v1.14 starts this image for each workload cluster's load balancer
# (test/infrastructure/docker/internal/loadbalancer/const.go).
readonly haproxy_image=kindest/haproxy:v20230606-42a2262b

# Everything runs at the lowest priority: the machines are shared with
# test suites whose timings matter more than these builds.
low() { nice -n 19 ionice -c3 "$@"; }
log() { echo "build-images: $*"; }

module_dir() { go mod download -json "$1" | jq -r '.Dir // error(.Error)'; }

# inputs_hash hashes everything an image is made of: the functions that build
# it (their source, so editing one rebuilds only its image), and the files and
# words given.
inputs_hash() {
  local fns=$1
  shift
  {
    for fn in $fns; do declare -f "$fn"; done
    for input in "$@"; do
      if [[ -f $input ]]; then sha256sum <"$input"; else echo "$input"; fi
    done
  } | sha256sum | cut -c1-16
}

# up_to_date IMAGE HASH succeeds when IMAGE exists and was built from HASH.
up_to_date() {
  [[ $(docker image inspect -f "{{index .Config.Labels \"$inputs_label\"}}" "$1" 2>/dev/null) == "$2" ]]
}

# go_build_module MODULE@VERSION OUT_DIR TAGS PACKAGE... builds packages of a
# module as its own main module, so with exactly the dependencies its go.mod
# pins, statically. A binary built before from the same module and tags is kept.
go_build_module() {
  local module=$1 out=$2 tags=$3
  shift 3
  local stamp="$out/.$(echo "$module $tags $*" | sha256sum | cut -c1-16)"
  [[ -f $stamp ]] && return 0
  log "building $* from $module"
  mkdir -p "$out"
  local dir
  dir=$(module_dir "$module")
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod low go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$out/" "$@")
  touch "$stamp"
}

# debian_image NAME PACKAGES makes an image from a minimal Debian root file
# system with PACKAGES, from the mirror the machine's apt uses.
debian_image() {
  local name=$1 packages=$2
  local mirror hash
  mirror=$(apt_mirror) || return 1
  hash=$(inputs_hash "debian_image trim_rootfs" "$debian_suite" "$mirror" "$packages")
  if up_to_date "$name" "$hash"; then return 0; fi
  ensure_debootstrap
  log "debootstrap $debian_suite with $packages from $mirror"
  local rootfs
  rootfs=$(mktemp -d "$work/rootfs.XXXX")
  low debootstrap --variant=minbase --include="$packages" "$debian_suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
    { tail -20 "$rootfs.log"; return 1; }
  unmount_below "$rootfs"
  trim_rootfs "$rootfs"
  tar --one-file-system -C "$rootfs" -c . | low docker import --change "LABEL $inputs_label=$hash" --change "LABEL $owner_label" - "$name" >/dev/null
  rm -rf "$rootfs" "$rootfs.log"
}

# ensure_debootstrap installs debootstrap from the machine's Debian packages
# when it is missing, so that a fresh machine needs nothing by hand.
ensure_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    log "debootstrap is missing: install it (apt-get install debootstrap) or run as root on Debian"
    return 1
  fi
  log "installing debootstrap from the machine's Debian packages"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; } >"$work/apt.log" 2>&1 ||
    { tail -20 "$work/apt.log"; return 1; }
}

# apt_mirror prints the Debian mirror the machine's apt is configured with:
# the images are built from the packages this machine may reach, never from
# a public mirror it may not.
apt_mirror() {
  local mirror
  mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)
  [[ -n $mirror ]] || mirror=$(grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1)
  if [[ -z $mirror ]]; then
    echo "build-images: no Debian mirror in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; configure the one this machine reaches (docs/kind-e2e.md)" >&2
    return 1
  fi
  echo "$mirror"
}

# unmount_below unmounts what is mounted under a root file system:
# debootstrap mounts /proc in it and, now and then, leaves it mounted after
# a successful run, and a live /proc must never go into an image (tar fails
# on its vanishing files).
unmount_below() {
  awk -v root="$1/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r mountpoint; do umount -l "$mountpoint"; done
}

# trim_rootfs drops what a container never reads: documentation, locales,
# package lists and caches.
trim_rootfs() {
  rm -rf "$1"/usr/share/{doc,man,info,locale,lintian} "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*
}

# scratch_image NAME HASH BINARY PATH_IN_IMAGE [ENTRYPOINT] wraps a static
# binary in an image of its own, optionally on a base image (BASE).
scratch_image() {
  local name=$1 hash=$2 binary=$3 path=$4 entrypoint=${5:-} base=${BASE:-scratch}
  local ctx
  ctx=$(mktemp -d "$work/ctx.XXXX")
  cp "$binary" "$ctx/binary"
  {
    echo "FROM $base"
    echo "COPY binary $path"
    [[ -z $entrypoint ]] || echo "ENTRYPOINT [\"$entrypoint\"]"
    echo "LABEL $inputs_label=$hash $owner_label"
  } >"$ctx/Dockerfile"
  docker_build -t "$name" "$ctx"
  rm -rf "$ctx"
}

# docker_build runs the classic builder, which is what was measured to build
# FROM a local image on Docker 20.10, quietly unless it fails.
docker_build() {
  local output
  output=$(DOCKER_BUILDKIT=0 low docker build -q "$@" 2>&1) || { echo "$output"; return 1; }
}

main() {
  mkdir -p "$work"
  [[ $# -gt 0 ]] || set -- all
  for image in "$@"; do
    case $image in
      node) source "$here/node-image.sh"; build_node_image ;;
      haproxy) build_haproxy_image ;;
      capi) source "$here/capi-images.sh"; build_capi_images ;;
      all)
        source "$here/node-image.sh"
        source "$here/capi-images.sh"
        build_node_image
        build_haproxy_image
        build_capi_images
        ;;
      *) log "unknown image $image"; return 1 ;;
    esac
  done
  # Rebuilds leave the images they replaced dangling.
  docker image prune -f --filter "label=$owner_label" >/dev/null
}

# build_haproxy_image makes the load balancer image CAPD starts: haproxy from
# Debian, started the way CAPD expects (it writes the configuration with
# docker exec and reloads it with SIGHUP).
build_haproxy_image() {
  local base=capi-autoscaler-e2e/debian-haproxy:$debian_suite
  debian_image "$base" haproxy
  local hash
  hash=$(inputs_hash build_haproxy_image "$(docker image inspect -f '{{.Id}}' "$base")")
  if up_to_date "$haproxy_image" "$hash"; then log "$haproxy_image is up to date"; return 0; fi
  local ctx
  ctx=$(mktemp -d "$work/ctx.XXXX")
  # Serves nothing until CAPD writes the real configuration.
  cat >"$ctx/haproxy.cfg" <<EOF
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend placeholder
  bind 127.0.0.1:8404
  default_backend none
backend none
EOF
  # CAPD's configuration sets maxconn 100000, for which haproxy needs about
  # 200000 file descriptors; where Docker's hard limit is lower (20000 on the
  # build machines) every reload fails. CAPD starts `haproxy -W -db -f
  # haproxy.cfg` itself, so `haproxy` on the PATH is a wrapper that has
  # haproxy read, before CAPD's configuration, a global section with the
  # maxconn the limit allows (haproxy keeps the first maxconn it reads, and
  # its master re-executes with the same arguments on every reload); on a
  # normal host it is 100000, as CAPD sets it.
  cat >"$ctx/haproxy" <<'EOF'
#!/bin/sh
set -e
hard=$(ulimit -Hn)
maxconn=100000
if [ "$hard" != unlimited ] && [ $(((hard - 200) / 2)) -lt "$maxconn" ]; then
  maxconn=$(((hard - 200) / 2))
fi
printf 'global\n  maxconn %s\n' "$maxconn" >/usr/local/etc/haproxy/host-limits.cfg
exec /usr/sbin/haproxy -f /usr/local/etc/haproxy/host-limits.cfg "$@"
EOF
  chmod +x "$ctx/haproxy"
  cat >"$ctx/Dockerfile" <<EOF
FROM $base
COPY haproxy.cfg /usr/local/etc/haproxy/haproxy.cfg
COPY haproxy /usr/local/sbin/haproxy
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
LABEL $inputs_label=$hash $owner_label
EOF
  docker_build -t "$haproxy_image" "$ctx"
  rm -rf "$ctx"
  log "built $haproxy_image"
}

main "$@"
