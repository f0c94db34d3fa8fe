#!/usr/bin/env bash
# run.sh OUTDIR: the GPU report of a kakeya bundle (make gpu-bundle).
#
# One command on a machine with an NVIDIA GPU and its driver (no Go, no
# network, no toolkit needed): every check and measurement of the CUDA
# backend, within KAKEYA_BUDGET seconds (default 470, under 8 minutes).
# Each row is printed as soon as it is measured and appended to
# OUTDIR/log.txt; OUTDIR/results.json gets one JSON object per line (a
# row, a step's outcome, the summary); OUTDIR/raw.txt keeps every step's
# whole output. Each step runs under timeout with a budget of its own,
# never more than what is left of the total; a step that fails or runs out
# of time never stops the later ones, and a step with too little time left
# is skipped, saying so.
#
# Steps (kind, most seconds):
#   env              cpu     10  bundle, host, nvidia-smi, compute-sanitizer
#   device           gpu     45  device, driver, memory (the GPU probe)
#   cpu-golden       cpu     30  CPU logits vs llama2.c and PyTorch golden files
#   cpu-generate     cpu     30  kakeya-run --device cpu, greedy (the reference text)
#   golden           gpu     45  CUDA logits vs the golden files
#   greedy           gpu     45  greedy tokens on CUDA = on the CPU, token for token
#   draw             gpu     20  draw_rows at 151,936 tokens, 1 and 64 rows, top-p / top-k + top-p / min-p:
#                                time per draw and per row, tokens = the host Sampler's
#   gemma            gpu     30  Gemma 2/3 tiny: CUDA logits vs the float64 reference past the window, greedy vs CPU
#   generate         gpu     30  kakeya-run --device cuda = --device cpu, byte for byte
#   kernels          gpu     80  every kernel at Qwen2.5 0.5B/1.5B/7B shapes vs references
#   gemm             gpu     40  16-bit GEMMs at 0.5B/7B shapes, 16-2048 rows: mma kernel vs cuBLAS, vs the model
#   quant            gpu     30  ref-qwen2-6m quantized on load (q8_0, q4_k) vs the CPU and the float64 reference
#   quant-kernels    gpu     30  decode's quantized products (quant_x + matvec_q8, dp4a) at 0.5B/7B FFN shapes,
#                                Q4_K/Q6_K/Q8_0, 1 and 8 rows: time and GB/s vs the peak
#   model-0.5b       cpu     40  writes the seeded Qwen2.5-0.5B-shaped checkpoint
#   throughput-0.5b  gpu     60  prefill/decode tok/s, plain/int8/kakeya-pc/kakeya-block:b=3, ctx 512/2048/8192
#   launches-0.5b    gpu     30  driver calls per decode step: one graph per step, fusions and graphs on and off
#   profile-0.5b     gpu     20  time per kernel of a prefill (512, 2048) and a decode step, each launch waited for
#   quant-0.5b       gpu     40  prefill/decode tok/s quantized on load (q4_k, q8_0), plain cache, ctx 512
#   serve-0.5b       gpu     60  kakeya-bench --concurrency 1,16,64,256, plain/int8/kakeya preset,
#                                each cache an equal share of the step (a row its
#                                --time-limit stops says what it measured so far)
#   sample-0.5b      gpu     30  the same at temperature 1 (the OpenAI API's default), plain, 1 and 64:
#                                each step's tokens drawn on the device (draw_rows)
#   peer-0.5b        gpu     45  the same checkpoint through transformers (peer.py; needs torch)
#   sanitizer        gpu     60  compute-sanitizer memcheck of short kakeya-run runs
#   model-7b         gpu     60  then throughput-7b (gpu, 60), profile-7b (gpu, 30), serve-7b (gpu, 75),
#                                peer-7b (gpu, 60) and last kvbound-7b (gpu, 300: a KV
#                                pool of 16 bf16 sequences of 2,048 tokens, 48 requests
#                                of 2,016 + 256 tokens, admitted sequences and tok/s
#                                per cache, each cache its own budget: kakeya 130,
#                                plain 65, int8 65, cut to what the step has left; a
#                                cache stopped by its --time-limit reports the
#                                sequences admitted and tok/s so far)
#   cpu-bench        cpu     45  kakeya-bench on the CPU, the 0.5B checkpoint
#
# A step gets its most seconds or what is left of the total, whichever is
# less, and none starts with less than 15 left; the measurements inside a
# step stop at about 4/5 of its budget, skipping what is left row by row.
# Without a GPU (no driver or no device) the CPU steps run and each GPU
# step prints one line saying why it did not.
# Exit status: 0 every step and row passed; 1 one failed, timed out or was
# skipped for time; 2 no GPU, the CPU steps passed.
#
# Plans: the steps above take about 820 s on an H200 (predicted, not
# measured: docs/cuda.md, "The bundle's time budget"), so within 470 s a
# run of them all ends in serve-7b, and kvbound-7b and peer-7b never run.
# KAKEYA_PLAN picks the steps of one device session, each predicted to
# fit the 470 s: check (correctness, kernels, GEMMs, the 0.5B rows and
# its serving, the 7B profile; about 390 s) or serve (the 7B rows issue
# 34 asks for: throughput, serving at 1-256, the transformers peer, then
# the KV-bound row on what is left; about 470 s); all (the default) runs
# every step in the order above.
#
# Environment: KAKEYA_BUDGET (seconds in all, default 470), KAKEYA_PLAN
# (all, check or serve; KAKEYA_STEPS wins where both are set),
# KAKEYA_STEPS (an extended regular expression: only the steps whose
# names match run, e.g. 'env|device|golden|.*-7b'), KAKEYA_MINSTEP (no
# step starts with fewer seconds left, default 15), KAKEYA_REPORT_CACHES (the throughput
# rows' caches, e.g. "plain kakeya-pc"), KAKEYA_SERVE_CACHES (the serving
# and KV-bound rows' caches, default "plain int8 kakeya"),
# KAKEYA_SERVE_CONCURRENCY (the serving rows', default 1,16,64,256),
# KAKEYA_SERVE_BUDGETS (each serving cache's seconds, "cache=seconds ...";
# default an equal share of what the step has left when the cache starts),
# KAKEYA_KVBOUND_BUDGETS (each KV-bound cache's seconds, default
# "kakeya=130 plain=65 int8=65"), KAKEYA_KVBOUND_GEN (the KV-bound
# requests' generated tokens, default 256), KAKEYA_MODELS
# (where the seeded checkpoints go, default ${TMPDIR:-/tmp}/kakeya-gpu-models:
# about 16 GB at most, removed as soon as measured and at the end unless
# KAKEYA_KEEP_MODELS=1).

set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/run.sh
BIN=$HERE/bin
export KAKEYA_SHARED=$HERE/data
# The bundle carries the data its tests read: one missing is a bundle bug,
# so it fails the test rather than skipping it.
export KAKEYA_REQUIRE_SHARED=1

# jstr prints s as a JSON string.
jstr() {
	local s
	s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\t'/\\t}
	s=${s//$'\r'/}
	s=${s//$'\n'/\\n}
	printf '"%s"' "$s"
}

# row STEP NAME STATUS TEXT [JSON-FIELDS]: prints a row as the test binary
# does ("ROW|[step] name: text  STATUS") and appends its JSON object.
row() {
	local line="[$1] $2: $4"
	[[ $3 == info ]] || line+="  ${3^^}"
	printf 'ROW|%s\n' "$line"
	printf '{"step":%s,"name":%s,"status":%s,"text":%s%s}\n' "$(jstr "$1")" "$(jstr "$2")" "$(jstr "$3")" "$(jstr "$4")" "${5:+,$5}" >>"$KAKEYA_REPORT_JSON"
}

# sanitizer prints compute-sanitizer's path, if there is one.
sanitizer() {
	local c
	for c in "$(command -v compute-sanitizer)" /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
		[[ -n $c && -x $c ]] && { echo "$c"; return 0; }
	done
	return 1
}

# The steps that are not test functions run as "run.sh __step NAME ..."
# under timeout; they print rows and exit non-zero on a failure.
if [[ ${1:-} == __step ]]; then
	shift
	name=$1
	shift
	fail=0
	case $name in
	env)
		row env bundle info "$(head -1 "$HERE/BUILD.txt" 2>/dev/null || echo 'no BUILD.txt')"
		cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
		mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)
		row env host info "$(hostname 2>/dev/null), $(uname -srm), ${cpu:-unknown CPU}, $(nproc) cores, ${mem:-? GiB}" \
			"\"cores\":$(nproc)"
		if command -v nvidia-smi >/dev/null 2>&1; then
			while IFS= read -r l; do
				row env nvidia-smi info "$l"
			done < <(timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,clocks.max.sm,clocks.max.memory,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>&1)
		else
			row env nvidia-smi info "not found"
		fi
		if cs=$(sanitizer); then
			row env compute-sanitizer info "$cs"
		else
			row env compute-sanitizer info "not found"
		fi
		blas=$( (ldconfig -p 2>/dev/null | grep -o 'libcublas\.so\.[0-9]*' | sort -u | tr '\n' ' ') || true)
		row env cublas info "${blas:-no libcublas in the linker cache}"
		;;
	cpu-generate | generate)
		dev=cpu
		[[ $name == generate ]] && dev=cuda
		for m in stories260K ref-qwen2-6m; do
			out=$WORK/gen-$dev-$m.txt
			if ! "$BIN/kakeya-run" --device "$dev" --matmul f32 --model "$KAKEYA_SHARED/models/$m" --prompt "Once upon a time" \
				--max-tokens 100 --temperature 0 --seed 1 --quiet >"$out" 2>"$WORK/gen.err"; then
				row "$name" "$m" fail "kakeya-run --device $dev: $(tail -3 "$WORK/gen.err")"
				fail=1
				continue
			fi
			bytes=$(wc -c <"$out")
			text=$(head -c 70 "$out" | tr '\n' ' ')
			if [[ $dev == cpu ]]; then
				row "$name" "$m" pass "$bytes bytes: $text..." "\"bytes\":$bytes"
			elif [[ ! -s $WORK/gen-cpu-$m.txt ]]; then
				row "$name" "$m" fail "no CPU text to compare with (cpu-generate failed)"
				fail=1
			elif cmp -s "$out" "$WORK/gen-cpu-$m.txt"; then
				row "$name" "$m" pass "identical to --device cpu: $bytes bytes: $text..." "\"bytes\":$bytes,\"identical\":true"
			else
				at=$(cmp "$out" "$WORK/gen-cpu-$m.txt" 2>&1 | grep -o 'byte [0-9]*' | head -1)
				row "$name" "$m" fail "differs from --device cpu at ${at:-the end}: cuda \"$text...\"" "\"bytes\":$bytes,\"identical\":false"
				fail=1
			fi
		done
		;;
	model-*)
		shape=qwen2.5-${name#model-}
		dir=$MODELS/$shape
		if [[ -e $dir/.complete ]]; then
			row "$name" "$shape" pass "already written in $dir"
		else
			need=$(case $shape in *7b) echo 16 ;; *1.5b) echo 4 ;; *) echo 2 ;; esac)
			avail=$(df -Pk "$MODELS" | awk 'NR == 2 {printf "%d", $4 / 1048576}')
			if ((avail < need)); then
				row "$name" "$shape" fail "only $avail GiB free in $MODELS, $need needed (set KAKEYA_MODELS)"
				exit 1
			fi
			if msg=$("$BIN/kakeya-testmodel" --shape "$shape" "$dir" 2>&1); then
				touch "$dir/.complete"
				row "$name" "$shape" pass "${msg#kakeya-testmodel: }"
			else
				row "$name" "$shape" fail "$msg"
				fail=1
			fi
		fi
		;;
	sanitizer)
		if ! cs=$(sanitizer); then
			row sanitizer memcheck info "not run: compute-sanitizer is not on PATH nor in /usr/local/cuda*/bin"
			exit 0
		fi
		for run in "stories260K plain" "ref-qwen2-6m kakeya"; do
			set -- $run
			args=(--device cuda --model "$KAKEYA_SHARED/models/$1" --prompt "Once upon a time" --max-tokens 40 --temperature 0 --quiet)
			[[ $2 == kakeya ]] && args+=(--kv-codec kakeya --boundary none --block-size 16)
			"$cs" --tool memcheck --error-exitcode 9 --print-limit 20 "$BIN/kakeya-run" "${args[@]}" >"$WORK/san.out" 2>&1
			rc=$?
			cat "$WORK/san.out"
			summary=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$WORK/san.out" | tail -1)
			if ((rc == 0)) && [[ -n $summary ]]; then
				row sanitizer "$1 $2 cache" pass "memcheck: ${summary#ERROR SUMMARY: }"
			else
				row sanitizer "$1 $2 cache" fail "memcheck exit $rc: ${summary:-no summary}; $(grep -m3 -E '^=+ (Invalid|Program hit|Error)' "$WORK/san.out" | tr '\n' ' ')"
				fail=1
			fi
		done
		;;
	serve-* | kvbound-* | sample-*)
		# kakeya-bench's serving mode on CUDA, one run per cache (a timeout
		# loses only the cache it cuts): serve-SIZE at 1, 16, 64 and 256
		# concurrent clients (128-token prompts, 32 generated); kvbound-7b
		# with a KV pool that holds 16 bf16 sequences of 2,048 tokens of the
		# 7B shape (28 layers x 4 KV heads x 128 x keys and values x 2 bytes
		# = 57,344 bytes a token: 1,792 MiB), 48 clients of 2,016 prompt
		# tokens and KAKEYA_KVBOUND_GEN generated (256): the sequences
		# admitted at once and the aggregate tok/s. With 32 generated
		# (the first runs), step tokens bound the row, not memory: about
		# 1 + 32 x (512 - R) / 2,016, some 9 sequences for any cache;
		# with 256 a bf16 pool binds first (14 sequences of 2,272 tokens).
		size=${name#*-}
		dir=$MODELS/qwen2.5-$size
		[[ -e $dir/.complete ]] || { row "$name" "qwen2.5-$size" fail "no checkpoint (model-$size failed)"; exit 1; }
		case $name in
		serve-*) args=(--concurrency "${KAKEYA_SERVE_CONCURRENCY:-1,16,64,256}" --prompt-len 128 --gen 32 --kv-memory 16G) ;;
		# sample-SIZE: requests that sample at temperature 1 (no top-k or
		# top-p), each step's tokens drawn on the device (draw_rows).
		sample-*) args=(--concurrency "${KAKEYA_SAMPLE_CONCURRENCY:-1,64}" --prompt-len 128 --gen 32 --temperature 1 --kv-memory 16G) ;;
		kvbound-*) args=(--concurrency 48 --prompt-len 2016 --gen "${KAKEYA_KVBOUND_GEN:-256}" --kv-memory 1792M) ;;
		esac
		# The kakeya preset first: its row is the one the KV-bound
		# comparison is for, and a step out of time loses the last cache.
		caches=${KAKEYA_SERVE_CACHES:-plain int8 kakeya}
		[[ $name == kvbound-* ]] && caches=${KAKEYA_SERVE_CACHES:-kakeya plain int8}
		[[ $name == sample-* ]] && caches=plain
		temp=0
		[[ $name == sample-* ]] && temp=1
		# serve-* and kvbound-*: each cache runs under a time budget of its
		# own, so a slow cache (the preset's prefill encodes every block)
		# loses its own row's time only, never the others'. kvbound-*:
		# KAKEYA_KVBOUND_BUDGETS ("cache=seconds ...", 40 for a cache not
		# named); serve-*: KAKEYA_SERVE_BUDGETS likewise, by default an equal
		# share of what the step has left when the cache starts (so a cache
		# done early leaves its time to those after it). Either is cut to
		# what the step has left (its timeout, from KAKEYA_REPORT_BUDGET =
		# 4/5 of it less 5, less 10 s) less 20 s for each cache after it.
		# kakeya-bench gets --time-limit a little inside its budget: the
		# level running then reports what it measured so far (requests
		# done, tokens generated, the most admitted at once), marked
		# stopped, rather than nothing.
		declare -A own=()
		if [[ $name == kvbound-* ]]; then
			for cb in ${KAKEYA_KVBOUND_BUDGETS:-kakeya=130 plain=65 int8=65}; do own[${cb%%=*}]=${cb#*=}; done
		else
			for cb in ${KAKEYA_SERVE_BUDGETS:-}; do own[${cb%%=*}]=${cb#*=}; done
		fi
		ncaches=$(wc -w <<<"$caches") i=0 t0=$SECONDS
		stepleft=$(((${KAKEYA_REPORT_BUDGET:-100000} + 5) * 5 / 4 - 10))
		for cache in $caches; do
			i=$((i + 1))
			limit=() mine=""
			if [[ $name != sample-* ]]; then
				left=$((stepleft - (SECONDS - t0) - 20 * (ncaches - i)))
				if [[ $name == kvbound-* ]]; then
					mine=${own[$cache]:-40}
				else
					mine=${own[$cache]:-$(((stepleft - (SECONDS - t0)) / (ncaches - i + 1)))}
				fi
				if ((left < 10)); then
					row "$name" "qwen2.5-$size $cache" skip "not run: ${left}s left of the step for it" \
						"\"shape\":\"qwen2.5-$size\",\"cache\":$(jstr "$cache"),\"budget_s\":$mine,\"kv_memory\":$(jstr "${args[-1]}")"
					fail=1
					continue
				fi
				((mine > left)) && mine=$left
				limit=(timeout -k 5 "$mine")
				tl=$((mine - 5 - mine / 10))
				((tl < 3)) && tl=3
				limit+=("$BIN/kakeya-bench" --time-limit "${tl}s")
			else
				limit=("$BIN/kakeya-bench")
			fi
			c0=$SECONDS
			"${limit[@]}" --device cuda --model "$dir" --cache "$cache" "${args[@]}" --progress=false >"$WORK/serve.out" 2>&1
			rc=$?
			took=$((SECONDS - c0))
			cat "$WORK/serve.out"
			timing=""
			[[ -n $mine ]] && timing=",\"budget_s\":$mine,\"seconds\":$took"
			if ((rc != 0)); then
				if [[ -n $mine ]] && ((rc == 124 || rc == 137)); then
					row "$name" "qwen2.5-$size $cache" fail "timed out after ${mine}s, its own budget, past its --time-limit ${tl}s: no sequences or tok/s measured" \
						"\"shape\":\"qwen2.5-$size\",\"cache\":$(jstr "$cache"),\"timed_out\":true,\"kv_memory\":$(jstr "${args[-1]}")$timing"
				else
					row "$name" "qwen2.5-$size $cache" fail "kakeya-bench exit $rc: $(tail -2 "$WORK/serve.out")" \
						"\"shape\":\"qwen2.5-$size\",\"cache\":$(jstr "$cache"),\"kv_memory\":$(jstr "${args[-1]}")$timing"
				fi
				fail=1
				continue
			fi
			if ! grep -qE '^\| [a-z0-9]+ \| ' <(grep -v '^| cache ' "$WORK/serve.out"); then
				row "$name" "qwen2.5-$size $cache" fail "stopped at its --time-limit ${tl:-}s before any level was measured (${took}s: loading, calibrating)" \
					"\"shape\":\"qwen2.5-$size\",\"cache\":$(jstr "$cache"),\"timed_out\":true,\"stopped\":true,\"kv_memory\":$(jstr "${args[-1]}")$timing"
				fail=1
				continue
			fi
			while IFS='|' read -r _ c _ conc req dec rel out p50 p99 _ peak _ pre kv stop _; do
				c=${c// /} conc=${conc// /} req=${req// /} dec=${dec// /} rel=${rel// /} out=${out// /}
				p50=${p50// /} p99=${p99// /} peak=${peak// /} pre=${pre// /} kv=${kv# } kv=${kv% } stop=${stop# } stop=${stop% }
				[[ $rel == *x ]] || rel=""
				# A level kakeya-bench's --time-limit stopped: "time limit: D
				# of N done", its figures those measured until then.
				partial="" stopped=""
				if [[ $stop == "time limit: "* ]]; then
					done_n=${stop#time limit: } done_n=${done_n%% *}
					partial="stopped at its time limit, $done_n of $req requests done, figures so far: "
					stopped=",\"stopped\":true,\"requests_done\":$done_n"
					fail=1
				fi
				row "$name" "qwen2.5-$size $c x$conc" info "${partial}decode $dec tok/s aggregate${rel:+ ($rel of 1)}, output $out tok/s, TTFT p50 $p50 ms, $peak admitted at once, $pre preemptions, peak KV $kv${mine:+; ${took}s of its ${mine}s}" \
					"\"shape\":\"qwen2.5-$size\",\"cache\":$(jstr "$c"),\"concurrency\":$conc,\"requests\":$req,\"decode_tps\":$dec,\"output_tps\":$out,\"ttft_p50_ms\":$p50,\"ttft_p99_ms\":$p99,\"peak_running\":$peak,\"preemptions\":$pre,\"peak_kv\":$(jstr "$kv"),\"kv_memory\":$(jstr "${args[-1]}"),\"temperature\":$temp$stopped$timing"
			done < <(grep -E '^\| [a-z0-9]+ \| ' "$WORK/serve.out" | grep -v '^| cache ')
		done
		;;
	peer-*)
		# The same checkpoint through Hugging Face transformers (peer.py),
		# where python3 has torch and transformers.
		size=${name#peer-}
		dir=$MODELS/qwen2.5-$size
		[[ -e $dir/.complete ]] || { row "$name" "qwen2.5-$size" fail "no checkpoint (model-$size failed)"; exit 1; }
		py=$(command -v python3) || { row "$name" "qwen2.5-$size transformers" info "not run: no python3 on PATH"; exit 0; }
		"$py" "$HERE/peer.py" "$dir" "qwen2.5-$size" >"$WORK/peer.out" 2>"$WORK/peer.err"
		rc=$?
		cat "$WORK/peer.out" "$WORK/peer.err"
		while IFS=$'\t' read -r n text fields; do
			case $n in
			SKIP) row "$name" "qwen2.5-$size transformers" info "$text" ;;
			FAIL) row "$name" "qwen2.5-$size transformers" fail "$text" ;;
			*) row "$name" "$n transformers" info "$text" "$fields" ;;
			esac
		done <"$WORK/peer.out"
		case $rc in
		0 | 3) ;;
		*)
			grep -q '^FAIL' "$WORK/peer.out" || row "$name" "qwen2.5-$size transformers" fail "peer.py exit $rc: $(tail -2 "$WORK/peer.err")"
			fail=1
			;;
		esac
		;;
	cpu-bench)
		dir=$MODELS/qwen2.5-0.5b
		[[ -e $dir/.complete ]] || { row cpu-bench qwen2.5-0.5b fail "no checkpoint (model-0.5b failed)"; exit 1; }
		"$BIN/kakeya-bench" --model "$dir" --cache plain,int8 --threads "$(nproc)" --ctx 512 --gen 16 --reps 1 --progress=false >"$WORK/bench.out" 2>&1
		rc=$?
		cat "$WORK/bench.out"
		if ((rc != 0)); then
			row cpu-bench qwen2.5-0.5b fail "kakeya-bench exit $rc: $(tail -2 "$WORK/bench.out")"
			exit 1
		fi
		while IFS='|' read -r _ cache mm th ctx pre dec _; do
			cache=${cache// /} th=${th// /} ctx=${ctx// /} pre=${pre// /} dec=${dec// /}
			row cpu-bench "qwen2.5-0.5b $cache ctx $ctx" info "$th threads: prefill $pre tok/s, decode $dec tok/s (CPU)" \
				"\"cache\":$(jstr "$cache"),\"threads\":$th,\"ctx\":$ctx,\"prefill_tps\":$pre,\"decode_tps\":$dec"
		done < <(grep -E '^\| (plain|int8) ' "$WORK/bench.out")
		;;
	*)
		echo "run.sh: unknown step $name" >&2
		exit 1
		;;
	esac
	exit $fail
fi

if [[ $# -ne 1 || $1 == -* ]]; then
	sed -n '2,/^$/s/^# \{0,1\}//p' "$SELF" >&2
	exit 2
fi
OUTDIR=$1
[[ -x $BIN/cuda.test ]] || chmod +x "$BIN"/* 2>/dev/null # a copy that lost its modes
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/log.txt
RAW=$OUTDIR/raw.txt
export KAKEYA_REPORT_JSON=$OUTDIR/results.json
TOTAL=${KAKEYA_BUDGET:-470}
MINSTEP=${KAKEYA_MINSTEP:-15} # no step starts with less time left
if ! [[ $TOTAL =~ ^[0-9]+$ && $MINSTEP =~ ^[0-9]+$ ]]; then
	echo "run.sh: KAKEYA_BUDGET=$TOTAL and KAKEYA_MINSTEP=$MINSTEP: want whole seconds" >&2
	exit 2
fi
PLAN=${KAKEYA_PLAN:-all}
case $PLAN in
all) ;;
check) : "${KAKEYA_STEPS:=env|device|cpu-golden|cpu-generate|golden|greedy|draw|gemma|generate|kernels|gemm|quant|quant-kernels|model-0.5b|throughput-0.5b|launches-0.5b|profile-0.5b|quant-0.5b|serve-0.5b|sample-0.5b|peer-0.5b|sanitizer|model-7b|profile-7b|cpu-bench}" ;;
serve) : "${KAKEYA_STEPS:=env|device|model-7b|throughput-7b|serve-7b|peer-7b|kvbound-7b}" ;;
*)
	echo "run.sh: KAKEYA_PLAN=$PLAN: want all, check or serve" >&2
	exit 2
	;;
esac
export MODELS=${KAKEYA_MODELS:-${TMPDIR:-/tmp}/kakeya-gpu-models}
export WORK
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kakeya-gpu-report.XXXXXX") || exit 1
mkdir -p "$MODELS" || exit 1
cleanup() {
	rm -rf "$WORK"
	if [[ ${KAKEYA_KEEP_MODELS:-} != 1 ]]; then
		rm -rf "$MODELS"/qwen2.5-*
		rmdir "$MODELS" 2>/dev/null
	fi
	return 0
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM

say() { printf '%s\n' "$*" | tee -a "$LOG"; }

START=$SECONDS
NODEV=""                         # why there is no GPU, once the device step says so
declare -a PASSED FAILED NOTRUN SKIPPED
PASSED=() FAILED=() NOTRUN=() SKIPPED=()

# step NAME KIND CAP CMD...: runs CMD for at most CAP seconds (less when
# less of the total is left), its rows to the terminal and log.txt, all of
# its output to raw.txt. KIND gpu steps print one line instead when there
# is no GPU.
step() {
	local name=$1 kind=$2 cap=$3
	shift 3
	if [[ -n ${KAKEYA_STEPS:-} ]] && ! [[ $name =~ ^(${KAKEYA_STEPS})$ ]]; then
		say "[$name] not run: not in KAKEYA_STEPS"
		printf '{"step":%s,"name":"step","kind":%s,"status":"not-run","reason":"not in KAKEYA_STEPS"}\n' "$(jstr "$name")" "$(jstr "$kind")" >>"$KAKEYA_REPORT_JSON"
		NOTRUN+=("$name")
		return
	fi
	if [[ $kind == gpu && -n $NODEV ]]; then
		say "[$name] ${NODEV%%:*}: not run"
		printf '{"step":%s,"name":"step","kind":"gpu","status":"not-run","reason":%s}\n' "$(jstr "$name")" "$(jstr "$NODEV")" >>"$KAKEYA_REPORT_JSON"
		NOTRUN+=("$name")
		return
	fi
	local left=$((TOTAL - (SECONDS - START)))
	local budget=$((cap < left ? cap : left))
	if ((budget < (cap < MINSTEP ? cap : MINSTEP))); then
		say "[$name] skipped: ${left}s left of the ${TOTAL}s budget"
		printf '{"step":%s,"name":"step","kind":%s,"status":"skip","reason":"out of the time budget","left_s":%d}\n' "$(jstr "$name")" "$(jstr "$kind")" "$left" >>"$KAKEYA_REPORT_JSON"
		SKIPPED+=("$name")
		return
	fi
	printf '\n===== %s (%s, at most %ds): %s\n' "$name" "$kind" "$budget" "$*" >>"$RAW"
	local t0=$SECONDS rc
	# The tests stop measuring a little before the hard limit.
	KAKEYA_REPORT_BUDGET=$((budget * 4 / 5 - 5)) timeout -k 5 "$budget" "$@" 2>&1 </dev/null |
		tee "$WORK/step.out" | sed -u -n 's/^ROW|//p' | tee -a "$LOG"
	rc=${PIPESTATUS[0]}
	cat "$WORK/step.out" >>"$RAW"
	local took=$((SECONDS - t0)) st
	case $rc in
	0) st=pass PASSED+=("$name") ;;
	124 | 137) st=timeout FAILED+=("$name") ;;
	*) st=fail FAILED+=("$name") ;;
	esac
	if [[ $name == device ]] && grep -q '^NODEVICE|' "$WORK/step.out"; then
		NODEV=$(grep -m1 '^NODEVICE|' "$WORK/step.out" | cut -d'|' -f2-)
		st=not-run
		unset 'FAILED[-1]'
		NOTRUN+=("$name")
		say "[device] $NODEV"
		printf '{"step":"device","name":"cuda","status":"no-gpu","text":%s}\n' "$(jstr "$NODEV")" >>"$KAKEYA_REPORT_JSON"
	fi
	printf '{"step":%s,"name":"step","kind":%s,"status":%s,"exit":%d,"seconds":%d,"budget_s":%d}\n' \
		"$(jstr "$name")" "$(jstr "$kind")" "$(jstr "$st")" "$rc" "$took" "$budget" >>"$KAKEYA_REPORT_JSON"
	case $st in
	pass) say "-- $name: PASS (${took}s of ${budget}s)" ;;
	not-run) ;;
	*)
		say "-- $name: ${st^^} (exit $rc, ${took}s of ${budget}s); its last lines (all in raw.txt):"
		# Less the rows, shown already, and the failed ones' t.Errorf.
		grep -v -e '^ROW|' -e '^=== ' -e '_test\.go:[0-9]*: \[' "$WORK/step.out" | tail -n 6 | sed 's/^/   | /' | tee -a "$LOG"
		;;
	esac
}

# withmodel SIZE STEP...: step, where the checkpoint of Qwen2.5-SIZE was
# written (or there is no GPU, for the one line).
withmodel() {
	local size=$1
	shift
	if [[ -n $NODEV || -e $MODELS/qwen2.5-$size/.complete ]] || { [[ -n ${KAKEYA_STEPS:-} ]] && ! [[ $1 =~ ^(${KAKEYA_STEPS})$ ]]; }; then
		export KAKEYA_REPORT_MODEL=$MODELS/qwen2.5-$size KAKEYA_REPORT_SHAPE=qwen2.5-$size
		step "$@"
	else
		say "[$1] not run: no qwen2.5-$size checkpoint (model-$size did not finish)"
		printf '{"step":%s,"name":"step","kind":"gpu","status":"not-run","reason":"no checkpoint"}\n' "$(jstr "$1")" >>"$KAKEYA_REPORT_JSON"
		NOTRUN+=("$1")
	fi
}

# gotest NAME: the test binary's TestNAME, with the test's own timeout
# just inside the step's.
gotest() {
	"$BIN/cuda.test" -test.run "^$1\$" -test.count=1 -test.v -test.timeout "$((KAKEYA_REPORT_BUDGET + 20))s"
}
export -f gotest
export BIN SELF

touch "$KAKEYA_REPORT_JSON"
JSON0=$(wc -l <"$KAKEYA_REPORT_JSON")
say "== kakeya GPU report, $(date -u +%Y-%m-%dT%H:%M:%SZ): $(head -1 "$HERE/BUILD.txt" 2>/dev/null); budget ${TOTAL}s; plan $PLAN; rows in $OUTDIR"
printf '{"step":"start","name":"report","status":"info","build":%s,"budget_s":%d,"plan":%s,"time":%s}\n' \
	"$(jstr "$(head -1 "$HERE/BUILD.txt" 2>/dev/null)")" "$TOTAL" "$(jstr "$PLAN")" "$(jstr "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" >>"$KAKEYA_REPORT_JSON"

step env cpu 10 bash "$SELF" __step env
step device probe 45 bash -c 'gotest TestReportDevice'
step cpu-golden cpu 30 bash -c 'gotest TestReportCPUGolden'
step cpu-generate cpu 30 bash "$SELF" __step cpu-generate
step golden gpu 45 bash -c 'gotest TestReportGolden'
step greedy gpu 45 bash -c 'gotest TestReportGreedy'
step draw gpu 20 bash -c 'gotest TestReportDraw'
step gemma gpu 30 bash -c 'gotest TestReportGemma'
step generate gpu 30 bash "$SELF" __step generate
step kernels gpu 80 bash -c 'gotest TestReportKernels'
step gemm gpu 40 bash -c 'gotest TestReportGEMM'
step quant gpu 30 bash -c 'gotest TestReportQuant'
step quant-kernels gpu 30 bash -c 'gotest TestReportQuantKernels'
step model-0.5b cpu 40 bash "$SELF" __step model-0.5b
withmodel 0.5b throughput-0.5b gpu 60 bash -c 'gotest TestReportThroughput'
withmodel 0.5b launches-0.5b gpu 30 bash -c 'gotest TestReportLaunches'
withmodel 0.5b profile-0.5b gpu 20 bash -c 'gotest TestReportProfile'
withmodel 0.5b quant-0.5b gpu 40 bash -c 'gotest TestReportQuantThroughput'
withmodel 0.5b serve-0.5b gpu 60 bash "$SELF" __step serve-0.5b
withmodel 0.5b sample-0.5b gpu 30 bash "$SELF" __step sample-0.5b
withmodel 0.5b peer-0.5b gpu 45 bash "$SELF" __step peer-0.5b
step sanitizer gpu 60 bash "$SELF" __step sanitizer
step model-7b gpu 60 bash "$SELF" __step model-7b
withmodel 7b throughput-7b gpu 60 bash -c 'gotest TestReportThroughput'
withmodel 7b profile-7b gpu 30 bash -c 'gotest TestReportProfile'
withmodel 7b serve-7b gpu 75 bash "$SELF" __step serve-7b
withmodel 7b peer-7b gpu 60 bash "$SELF" __step peer-7b
withmodel 7b kvbound-7b gpu 300 bash "$SELF" __step kvbound-7b
[[ ${KAKEYA_KEEP_MODELS:-} == 1 ]] || rm -rf "$MODELS/qwen2.5-7b"
step cpu-bench cpu 45 bash "$SELF" __step cpu-bench

took=$((SECONDS - START))
list() { local IFS=,; echo "${*:-none}"; }
# The rows of this run (results.json may hold earlier ones).
rows() { tail -n +"$((JSON0 + 1))" "$KAKEYA_REPORT_JSON" | grep -v '"name":"step"' | grep -c "\"status\":\"$1\""; }
rpass=$(rows pass) rfail=$(rows fail) rskip=$(rows skip)
summary="${#PASSED[@]} steps passed, ${#FAILED[@]} failed ($(list "${FAILED[@]}")), ${#SKIPPED[@]} skipped for time ($(list "${SKIPPED[@]}")), ${#NOTRUN[@]} not run; rows: $rpass passed, $rfail failed, $rskip skipped for time; ${took}s"
if ((${#FAILED[@]} > 0 || rfail > 0)); then
	status=1 word=FAIL
elif [[ -n $NODEV ]]; then
	status=2 word="NO GPU"
elif ((${#SKIPPED[@]} > 0 || rskip > 0)); then
	status=1 word="INCOMPLETE"
else
	status=0 word=PASS
fi
say "== $word: $summary"
printf '{"step":"summary","name":"report","status":%s,"exit":%d,"passed":%d,"failed":%d,"skipped":%d,"not_run":%d,"rows_passed":%d,"rows_failed":%d,"rows_skipped":%d,"seconds":%d,"no_gpu":%s}\n' \
	"$(jstr "$word")" "$status" "${#PASSED[@]}" "${#FAILED[@]}" "${#SKIPPED[@]}" "${#NOTRUN[@]}" "$rpass" "$rfail" "$rskip" "$took" "$(jstr "$NODEV")" >>"$KAKEYA_REPORT_JSON"
if [[ -n $NODEV ]]; then
	say "run.sh: $NODEV: the GPU steps did not run (${#NOTRUN[@]} of them)"
fi
exit $status
