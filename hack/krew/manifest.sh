#!/usr/bin/env bash
# Writes the krew manifest of a release: hack/krew/capi-autoscaler.yaml with
# the version, the download URL and the sha256 of each plugin archive in
# the release directory filled in.
#
#   hack/krew/manifest.sh <version> <release-url> <release-dir>
set -euo pipefail
version=$1 url=$2 dir=$3
manifest=$(sed -e '/^#/d' -e "s|RELEASE_VERSION|${version}|g" -e "s|RELEASE_URL|${url}|g" "$(dirname "$0")/capi-autoscaler.yaml")
for placeholder in $(grep -o 'SHA256_[a-z0-9]*_[a-z0-9]*' <<<"$manifest"); do
	platform=${placeholder#SHA256_}
	archive=$dir/kubectl-capi_autoscaler-${platform%_*}-${platform#*_}.tar.gz
	[[ -f $archive ]] || { echo "krew manifest: $archive is missing: the manifest names a platform the release does not build" >&2; exit 1; }
	# sha256sum on Linux, shasum on macOS.
	sum=$({ sha256sum "$archive" 2>/dev/null || shasum -a 256 "$archive"; } | cut -d' ' -f1)
	manifest=${manifest//$placeholder/$sum}
done
for archive in "$dir"/kubectl-capi_autoscaler-*.tar.gz; do
	grep -q "/${archive##*/}\$" <<<"$manifest" || { echo "krew manifest: it names no platform for ${archive##*/}, which the release builds: add it to hack/krew/capi-autoscaler.yaml" >&2; exit 1; }
done
printf '%s\n' "$manifest" >"$dir/krew-capi-autoscaler.yaml"
