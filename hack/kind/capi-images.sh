# The Cluster API manager images, sourced by build-images.sh: core, kubeadm
# bootstrap, kubeadm control plane and the Docker infrastructure provider
# (CAPD), each a static binary in an image of its own (upstream uses
# distroless/static, which cannot be pulled here), plus capi-autoscaler's own
# image from `make docker-build`.

# Each image gets the name its provider's config/default kustomization
# uses and the name of the released components, so that the suite needs no
# image override either way.
readonly capi_module=sigs.k8s.io/cluster-api@v1.14.0
readonly capi_test_module=sigs.k8s.io/cluster-api/test@v1.14.0
readonly capi_staging_registry=gcr.io/k8s-staging-cluster-api
readonly capi_release_registry=registry.k8s.io/cluster-api

build_capi_images() {
  local src=$work/cluster-api-src
  local version=${capi_module#*@}
  local managers=(
    "cluster-api-controller ./core"
    "kubeadm-bootstrap-controller ./bootstrap/kubeadm"
    "kubeadm-control-plane-controller ./controlplane/kubeadm"
    "capd-manager ./test/infrastructure/docker"
  )
  local manager
  for manager in "${managers[@]}"; do
    local name=${manager%% *} package=${manager#* }
    local binary=$work/capi/bin/$name
    if [[ ! -x $binary || ! -f $binary.version || $(cat "$binary.version") != "$capi_module" ]]; then
      checkout_cluster_api "$src"
      log "building $name from $capi_module"
      mkdir -p "$work/capi/bin"
      local module_dir=$src
      [[ $package == ./test/* ]] && module_dir=$src/test package=./${package#./test/}
      (cd "$module_dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod low go build -trimpath -ldflags "$(capi_ldflags "$version")" -o "$binary" "$package")
      echo "$capi_module" >"$binary.version"
    fi
    local image=$capi_staging_registry/$name:main hash
    hash=$(inputs_hash "build_capi_images scratch_image" "$binary")
    if up_to_date "$image" "$hash"; then
      log "$image is up to date"
    else
      scratch_image "$image" "$hash" "$binary" /manager /manager
      log "built $image"
    fi
    docker tag "$image" "$capi_release_registry/$name:$version"
  done
  rm -rf "$src"

  log "building the capi-autoscaler image"
  low make -C "$root" docker-build
}

# checkout_cluster_api lays the cluster-api, cluster-api/api and
# cluster-api/test modules out as in their repository, because each go.mod
# replaces the others with relative paths.
checkout_cluster_api() {
  local src=$1
  [[ -d $src ]] && return 0
  cp -r "$(module_dir "$capi_module")" "$src"
  cp -r "$(module_dir "sigs.k8s.io/cluster-api/api@${capi_module#*@}")" "$src/api"
  cp -r "$(module_dir "$capi_test_module")" "$src/test"
  chmod -R u+w "$src"
}

# capi_ldflags stamps the version the way Cluster API's release build does
# (hack/scripts/release/version.sh).
capi_ldflags() {
  local version=$1 minor
  minor=$(echo "$version" | cut -d. -f2)
  echo "-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$version -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=$minor -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
}
