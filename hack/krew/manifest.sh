#!/usr/bin/env bash
# Writes the krew manifest of a release: hack/krew/capi-autoscaler.yaml with
# the platforms the release built, and the version, the download URL and the
# sha256 of each one's plugin archive in the release directory filled in.
#
#   hack/krew/manifest.sh <version> <release-url> <release-dir> <os/arch>...
set -euo pipefail
version=$1 url=$2 dir=$3
shift 3
platforms=" $(tr / - <<<"$*") "
# The platforms' entries of spec.platforms (each from its "- selector:"
# line, to the next), and all the rest.
manifest=$(sed -e '/^#/d' -e "s|RELEASE_VERSION|${version}|g" -e "s|RELEASE_URL|${url}|g" "$(dirname "$0")/capi-autoscaler.yaml" | awk -v keep="$platforms" '
	function flush() { if (index(keep, " " platform " ")) printf "%s", entry; entry = ""; platform = "" }
	/^  - selector:/ { flush(); in_platforms = 1 }
	!in_platforms { print; next }
	{ entry = entry $0 "\n" }
	match($0, /kubectl-capi_autoscaler-[a-z0-9]+-[a-z0-9]+\.tar\.gz$/) { platform = substr($0, RSTART + 24, RLENGTH - 31) }
	END { flush() }')
for platform in $platforms; do
	grep -q "/kubectl-capi_autoscaler-${platform}.tar.gz\$" <<<"$manifest" || { echo "krew manifest: hack/krew/capi-autoscaler.yaml names no platform ${platform}, which the release builds: add it" >&2; exit 1; }
done
for placeholder in $(grep -o 'SHA256_[a-z0-9]*_[a-z0-9]*' <<<"$manifest"); do
	platform=${placeholder#SHA256_}
	archive=$dir/kubectl-capi_autoscaler-${platform%_*}-${platform#*_}.tar.gz
	[[ -f $archive ]] || { echo "krew manifest: $archive is missing" >&2; exit 1; }
	# sha256sum on Linux, shasum on macOS.
	sum=$({ sha256sum "$archive" 2>/dev/null || shasum -a 256 "$archive"; } | cut -d' ' -f1)
	manifest=${manifest//$placeholder/$sum}
done
printf '%s\n' "$manifest" >"$dir/krew-capi-autoscaler.yaml"
