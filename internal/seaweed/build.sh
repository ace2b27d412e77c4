#!/bin/sh
# Builds SeaweedFS's `weed` (the S3-compatible object store of the archive
# tests, docs/tenants.md "Archive") from the Go module proxy into $1
# (default bin/weed at the module's root). SeaweedFS's go.mod carries
# replace directives, so `go install module@version` refuses it: the
# module is downloaded, copied out of the read-only module cache and built
# inside its own module, where its replace directives apply. The version is
# pinned here. Takes a few minutes on a fresh machine (then Go's caches).
set -eu
VERSION=v0.0.0-20261109003541-7506e5f91cd6
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bin/weed}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
export PATH="$PATH:/usr/local/go/bin" GOWORK=off GOFLAGS=-mod=mod
dir=$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "seaweed: go mod download github.com/seaweedfs/seaweedfs@$VERSION gave no directory" >&2; exit 1; }
src=$(mktemp -d)
trap 'chmod -R u+w "$src"; rm -rf "$src"' EXIT
cp -R "$dir/." "$src/"
chmod -R u+w "$src"
mkdir -p "$(dirname "$out")"
(cd "$src" && go build -o "$out.building" ./weed)
mv "$out.building" "$out"
