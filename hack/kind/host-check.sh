#!/usr/bin/env bash
# Makes sure this host's Docker engine can run the privileged containers that
# kind and the Docker infrastructure provider (CAPD) create, and says what it
# did. On a host where they already work it changes nothing.
#
# Where the process's capability bounding set lacks CAP_SYS_RESOURCE (some
# sandboxed build machines), a privileged container asks for a capability the
# engine cannot grant and runc fails with "unable to apply caps: operation not
# permitted"; --cap-drop does not help with --privileged. The fix is an OCI
# runtime shim that removes CAP_SYS_RESOURCE from the container's and every
# exec's capability lists before calling runc, registered as Docker's default
# runtime. The daemon re-reads its configuration on SIGHUP; it is never
# stopped or restarted. Running the script again finds the shim in place.
set -euo pipefail

readonly runtime_name=runc-without-sys-resource
readonly shim=/usr/local/libexec/capi-autoscaler/$runtime_name
readonly daemon_json=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
readonly probe_image=capi-autoscaler-host-check:probe
readonly owner_label=io.capi-autoscaler.e2e=host-check
readonly cap_sys_resource_bit=24

log() { echo "host-check: $*"; }

# probe runs a privileged container from an image with no files at all. runc
# applies the capabilities before it looks for the entrypoint, so reaching
# "no such file" proves that privileged containers start; the capability
# error proves they do not. Prints "ok", "caps" or the unexpected error.
probe() {
  if ! docker image inspect "$probe_image" >/dev/null 2>&1; then
    tar -cf - -T /dev/null | docker import --change "LABEL $owner_label" - "$probe_image" >/dev/null
  fi
  local out
  out=$(docker run --rm --privileged --label "$owner_label" --entrypoint /probe "$probe_image" 2>&1) || true
  case $out in
    *"unable to apply caps"*) echo caps ;;
    *"no such file or directory"*) echo ok ;;
    *) echo "$out" ;;
  esac
}

bounding_set_lacks_sys_resource() {
  local bounding
  bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  (((0x$bounding >> cap_sys_resource_bit & 1) == 0))
}

install_shim() {
  local runc
  runc=$(command -v runc) || { log "runc not found on PATH"; return 1; }
  command -v jq >/dev/null || { log "the runtime shim needs jq"; return 1; }
  mkdir -p "$(dirname "$shim")"
  cat >"$shim.tmp" <<SHIM
#!/usr/bin/env bash
# Installed by capi-autoscaler's hack/kind/host-check.sh: this host's capability
# bounding set lacks CAP_SYS_RESOURCE, so privileged containers must not ask
# for it. Removes it from the bundle's config.json (create, run) and from the
# --process file (exec), then runs $runc.
set -euo pipefail
drop() {
  local file=\$1 path=\$2
  [[ -f \$file ]] || return 0
  jq "(\$path // {}) |= map_values(if type == \"array\" then map(select(. != \"CAP_SYS_RESOURCE\")) else . end)" "\$file" >"\$file.shim" && mv "\$file.shim" "\$file"
}
command= bundle=. process=
args=("\$@")
for ((i = 0; i < \${#args[@]}; i++)); do
  case \${args[i]} in
    --bundle | -b) bundle=\${args[i + 1]:-.} ;;
    --bundle=*) bundle=\${args[i]#--bundle=} ;;
    --process | -p) process=\${args[i + 1]:-} ;;
    --process=*) process=\${args[i]#--process=} ;;
    create | run | exec) [[ -n \$command ]] || command=\${args[i]} ;;
  esac
done
case \$command in
  create | run) drop "\$bundle/config.json" .process.capabilities ;;
  exec) [[ -z \$process ]] || drop "\$process" .capabilities ;;
esac
exec $runc "\$@"
SHIM
  chmod 0755 "$shim.tmp"
  mv "$shim.tmp" "$shim"
  log "installed the runtime shim $shim (calls $runc)"
}

# register_shim makes the shim Docker's default runtime, keeping every other
# setting in daemon.json, and asks the daemon to re-read it.
register_shim() {
  local current='{}'
  [[ -s $daemon_json ]] && current=$(cat "$daemon_json")
  mkdir -p "$(dirname "$daemon_json")"
  [[ -f $daemon_json && ! -f $daemon_json.before-capi-autoscaler ]] && cp "$daemon_json" "$daemon_json.before-capi-autoscaler"
  jq --arg name "$runtime_name" --arg path "$shim" \
    '.runtimes[$name] = {path: $path} | .["default-runtime"] = $name' <<<"$current" >"$daemon_json.tmp"
  mv "$daemon_json.tmp" "$daemon_json"
  log "registered $runtime_name as the default runtime in $daemon_json (previous file kept as $daemon_json.before-capi-autoscaler)"
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd)
  kill -HUP "$pid"
  log "sent SIGHUP to dockerd (pid $pid) to reload its configuration"
  for _ in $(seq 50); do
    [[ $(docker info --format '{{.DefaultRuntime}}') == "$runtime_name" ]] && return 0
    sleep 0.2
  done
  log "dockerd did not take $runtime_name as its default runtime"
  return 1
}

main() {
  docker info >/dev/null || { log "cannot reach the Docker daemon"; return 1; }
  local result
  result=$(probe)
  if [[ $result == ok ]]; then
    if [[ $(docker info --format '{{.DefaultRuntime}}') == "$runtime_name" ]]; then
      log "privileged containers work through the runtime shim $shim installed earlier; nothing changed"
    else
      log "privileged containers work; nothing changed"
    fi
    return 0
  fi
  if [[ $result != caps ]] || ! bounding_set_lacks_sys_resource; then
    log "privileged containers fail for a reason this script does not know how to fix: $result"
    return 1
  fi
  log "privileged containers fail: the capability bounding set lacks CAP_SYS_RESOURCE"
  install_shim
  register_shim
  result=$(probe)
  if [[ $result != ok ]]; then
    log "privileged containers still fail with the shim: $result"
    return 1
  fi
  log "privileged containers work now"
}

main "$@"
