#!/usr/bin/env bash
# build.sh DIR: what make gpu-bundle runs. Writes the GPU report bundle
# into DIR (replacing it): the gpu-tagged test binary of compute/cudabackend, the
# kakeya-run, kakeya-bench and kakeya-testmodel binaries (all built with
# GOEXPERIMENT=simd, stripped), the small data the checks read from
# $KAKEYA_SHARED, run.sh, peer.py (the transformers side-by-side) and
# BUILD.txt; then checks that it fits the GPU machine's limit and that
# run.sh is executable and parses. The limit is on what travels: the
# device carries the checkout and the bundle gzipped (tar czf) in 64 MiB
# together, so the gzipped bundle may take 48 MiB, leaving 16 for the
# tracked tree (about 10 MiB).
#
# Environment: GO (default go), KAKEYA_SHARED (the shared data set).
set -euo pipefail

out=${1:?usage: build.sh DIR}
GO=${GO:-go}
shared=${KAKEYA_SHARED:?build.sh needs KAKEYA_SHARED, the shared data set}
root=$(cd "$(dirname "$0")/../.." && pwd)
limit=$((48 << 20)) # gzipped

for f in models/stories260K/config.json models/ref-qwen2-6m/config.json \
	reference/stories260K_runc_logits.txt reference/ref-qwen2-6m_logits.txt reference/tokenizer_cases.json; do
	[[ -e $shared/$f ]] || { echo "build.sh: $shared/$f is missing (KAKEYA_SHARED=$shared)" >&2; exit 1; }
done

case $out in /*) ;; *) out=$PWD/$out ;; esac
if [[ -e $out ]]; then
	chmod -R u+w "$out"
	rm -rf "$out"
fi
mkdir -p "$out/bin" "$out/data/models" "$out/data/reference"

cd "$root"
export GOEXPERIMENT=simd
ldflags='-s -w'
# The test binary and the commands link at once.
"$GO" test -c -tags gpu -ldflags="$ldflags" -o "$out/bin/cuda.test" ./compute/cudabackend/ &
test_pid=$!
"$GO" build -ldflags="$ldflags" -o "$out/bin/" ./cmd/kakeya-run ./cmd/kakeya-bench ./internal/cmd/kakeya-testmodel
wait "$test_pid"

cp -R "$shared/models/stories260K" "$shared/models/ref-qwen2-6m" "$out/data/models/"
cp "$shared/reference/stories260K_runc_logits.txt" "$shared/reference/ref-qwen2-6m_logits.txt" \
	"$shared/reference/tokenizer_cases.json" "$out/data/reference/"
chmod -R u+w,go-w "$out/data" # the shared files are read-only
install -m 755 internal/gpubundle/run.sh "$out/run.sh"
install -m 755 internal/gpubundle/peer.py "$out/peer.py"

{
	commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
		commit+=+dirty
	fi
	echo "kakeya GPU bundle: commit $commit, $("$GO" version | cut -d' ' -f3-), GOEXPERIMENT=simd, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
	(cd "$out" && find . -type f ! -name BUILD.txt | LC_ALL=C sort | xargs du -b | awk '{printf "%10d %s\n", $1, $2}')
} >"$out/BUILD.txt"

size=$(du -sb "$out" | cut -f1)
packed=$(tar czf - -C "$(dirname "$out")" "$(basename "$out")" | wc -c)
if ((packed > limit)); then
	echo "build.sh: $out gzipped holds $packed bytes, more than the GPU machine's $limit (48 MiB beside the checkout)" >&2
	exit 1
fi
[[ -x $out/run.sh ]] || { echo "build.sh: $out/run.sh is not executable" >&2; exit 1; }
bash -n "$out/run.sh"
if command -v python3 >/dev/null 2>&1; then
	python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$out/peer.py"
fi
awk -v o="$out" -v s="$size" -v p="$packed" 'BEGIN { printf "build.sh: %s: %.1f MiB, %.1f MiB gzipped of 48\n", o, s / 1048576, p / 1048576 }'
