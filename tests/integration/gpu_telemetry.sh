#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# gpu_telemetry - the node's GPUs through NVML (--gpu-telemetry,
# agent/sources/gpu_telemetry.c), against the NVML double
# (tests/fakes/fake_nvml.c, build/tests/fakes/libnvidia-ml.so.1) whose GPUs a
# state file describes:
#
#   gpu_telemetry_records  two GPUs, read every 200 ms: a gpu_telemetry record
#                          per GPU with every field NVML answered (uuid, name,
#                          SM / max SM / memory clock, power and its limit,
#                          temperature, utilisation, throttle bits and their
#                          names, a bit with no name as bit_N), none it did
#                          not (a memory clock "not supported"); the first
#                          GPU's clock then drops with a power cap and a
#                          hardware slowdown: later records, the metrics
#                          (infertrace_gpu_*, promtool) and the stats say so;
#                          a GPU that answers "lost" is counted (gpu_lost);
#                          NVML is initialised once and shut down at exit;
#                          --summary gives each GPU's clock range and reasons
#                          (`agentctl summary --reset` after the drop: both
#                          clocks; at exit, since the reset: 1410 MHz only,
#                          held down in every read)
#   gpu_telemetry_absent   --gpu-telemetry on without NVML: the agent refuses
#                          to start and says why; auto (the default) runs
#                          without it, the stats say "unavailable" and why
#   gpu_telemetry_failed   nvmlInit_v2 fails (driver not loaded): a warning
#                          with NVML's words, stats "failed", the agent runs
#   gpu_telemetry_suspect  a live workload (gpu_live -s: steps through the
#                          CUPTI double, its device 0 named by UUID: one
#                          gpu_device record with NVML's form of it) whose
#                          kernels take 3x as long from round 50 of 140 while
#                          the double puts its GPU at 1410 MHz under a power
#                          cap and a hardware slowdown: the gpu_slow
#                          anomalies name the clock first ("gpu_clock", the
#                          GPU's index and UUID, 1410 against the usual 1755,
#                          the reasons); no anomaly before the slowdown; a
#                          GPU with another UUID is never named; after 64
#                          slow steps the level_shift record names the clock
#   gpu_telemetry_stuck    NVML never returns (a driver holding its lock): the
#                          event loop goes on (stats records keep coming,
#                          state "starting"), and SIGINT still stops the
#                          agent, which leaves the poller behind with a line;
#                          NVML slower than the period: the reads go on, each
#                          one that outlasts the period counted (slow_polls)
source "$(dirname "$0")/lib.sh"
it_preflight gpu_telemetry_records gpu_telemetry_absent gpu_telemetry_failed gpu_telemetry_suspect \
	gpu_telemetry_stuck

NVML=$BUILD/tests/fakes/libnvidia-ml.so.1
if [ ! -f "$NVML" ]; then
	for n in gpu_telemetry_records gpu_telemetry_absent gpu_telemetry_failed gpu_telemetry_suspect \
		gpu_telemetry_stuck; do
		echo "FAIL $n: $NVML not built (make tests-build)"
	done
	exit 0
fi
export FAKE_NVML_STATE=$T/nvml.state FAKE_NVML_LOG=$T/nvml.log
U0=GPU-11111111-2222-3333-4444-555555555555
U1=GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee
state() { # state SM0 REASONS0: GPU 0 at SM0 MHz held by REASONS0 (hex); GPU 1 fixed
	printf '%s\n' "$U0|NVIDIA H100 80GB HBM3|$1|1980|2619|350000|700000|45|90|40|$2" \
		"$U1|NVIDIA H100 80GB HBM3|1755|1980|-|690000|700000|83|99|55|424" >"$FAKE_NVML_STATE.tmp"
	mv "$FAKE_NVML_STATE.tmp" "$FAKE_NVML_STATE"
}
COMMON=(-i 0.25 --control-socket none --shim-socket none --nvml-lib "$NVML")
stats_tel() { jqo '[.[] | select(.type=="stats")] | last | .gpu_telemetry'; }
http_metrics() { curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics"; }

# ------------------------------------------------------------- records ----
state 1980 0
: >"$FAKE_NVML_LOG"
if ! agent_start_metrics tel "${COMMON[@]}" --gpu-telemetry on --gpu-telemetry-period 200 --summary \
	--control-socket "$T/tel.ctl"; then
	fail_because "agent did not start: $(agent_tail)"
else
	wait_record '.type=="gpu_telemetry" and .device==1' 10 || fail_because "no record of GPU 1"
	r0=$(jqo '[.[] | select(.type=="gpu_telemetry" and .device==0)] | first')
	r1=$(jqo '[.[] | select(.type=="gpu_telemetry" and .device==1)] | first')
	expect "GPU 0: $r0" jqe --arg u "$U0" '.host and .instance == .host and (has("pid") | not) and
		.uuid == $u and .name == "NVIDIA H100 80GB HBM3" and .period_ns == 200000000 and
		.sm_clock_mhz == 1980 and .sm_clock_max_mhz == 1980 and .mem_clock_mhz == 2619 and
		.power_mw == 350000 and .power_limit_mw == 700000 and .temperature_c == 45 and
		.util_gpu_pct == 90 and .util_mem_pct == 40 and .throttle_mask == 0 and
		.throttle == [] and .ts_ns > 0' <<<"$r0"
	expect "GPU 1: $r1" jqe --arg u "$U1" '.uuid == $u and .sm_clock_mhz == 1755 and
		(has("mem_clock_mhz") | not) and .power_mw == 690000 and .temperature_c == 83 and
		.throttle_mask == 1060 and .throttle == ["sw_power_cap", "sw_thermal", "bit_10"]' <<<"$r1"
	# the clock drops, held by the power cap and a hardware slowdown
	state 1410 c
	wait_record '.type=="gpu_telemetry" and .device==0 and .sm_clock_mhz==1410' 10 ||
		fail_because "the clock drop never reached a record"
	r0=$(jqo '[.[] | select(.type=="gpu_telemetry" and .device==0 and .sm_clock_mhz==1410)] | first')
	expect "GPU 0 throttled: $r0" jqe '.throttle_mask == 12 and
		.throttle == ["sw_power_cap", "hw_slowdown"]' <<<"$r0"
	m=$(http_metrics)
	for want in 'infertrace_gpu_sm_clock_mhz{device="0"} 1410' \
		'infertrace_gpu_sm_clock_mhz{device="1"} 1755' \
		'infertrace_gpu_sm_clock_max_mhz{device="0"} 1980' \
		'infertrace_gpu_power_watts{device="1"} 690' \
		'infertrace_gpu_power_limit_watts{device="0"} 700' \
		'infertrace_gpu_temperature_celsius{device="1"} 83' \
		'infertrace_gpu_utilization_ratio{device="0"} 0.9' \
		'infertrace_gpu_clock_throttled{device="0",reason="hw_slowdown"} 1' \
		'infertrace_gpu_clock_throttled{device="0",reason="sw_thermal"} 0' \
		'infertrace_gpu_clock_throttled{device="1",reason="sw_thermal"} 1'; do
		expect "metrics lack '$want'" grep -qxF "$want" <<<"$m"
	done
	expect "metrics: samples counter" grep -qE '^infertrace_gpu_telemetry_samples_total [1-9]' <<<"$m"
	# --summary so far, then anew: from here on GPU 0 reads only the held-down 1410 MHz
	"$BUILD/agentctl" --socket "$T/tel.ctl" summary --reset >"$T/tel.reset" 2>&1 ||
		fail_because "agentctl summary --reset: exit $?: $(head -c 300 "$T/tel.reset")"
	reads0() { jqo '[.[] | select(.type=="gpu_telemetry" and .device==0)] | length'; }
	n0=$(reads0)
	for ((i = 0; i < 50; i++)); do
		[ "$(reads0)" -ge $((n0 + 2)) ] && break
		sleep 0.1
	done
	expect "GPU 0 read $(($(reads0) - n0)) times in 5 s after the reset, want 2" ge "$(reads0)" $((n0 + 2))
	if command -v promtool >/dev/null; then
		lint=$(promtool check metrics <<<"$m" 2>&1)
		expect "promtool: $(head -n 2 <<<"$lint" | tr '\n' ' ')" [ $? = 0 ]
	else
		fail_because "promtool missing (make deps)"
	fi
	# a GPU that fell off the bus: its temperature answers "lost", counted, left out
	printf '%s\n' "$U0|NVIDIA H100 80GB HBM3|1410|1980|2619|350000|700000|lost|90|40|c" \
		"$U1|NVIDIA H100 80GB HBM3|1755|1980|-|690000|700000|83|99|55|424" >"$FAKE_NVML_STATE.tmp"
	mv "$FAKE_NVML_STATE.tmp" "$FAKE_NVML_STATE"
	wait_record '.type=="stats" and .gpu_telemetry.gpu_lost > 0' 10 ||
		fail_because "a lost GPU was not counted: $(stats_tel)"
	expect "the lost GPU's temperature was written" \
		jqe '[.[] | select(.type=="gpu_telemetry" and .device==0 and .sm_clock_mhz==1410)] |
			any(has("temperature_c") | not)' <<<"$(jqo '.')"
	s=$(stats_tel)
	expect "stats: $s" jqe '.state == "running" and .devices == 2 and .samples >= 4 and
		.records == .samples and .dropped == 0 and .read_errors == 0' <<<"$s"
	expect "log: the start line" grep -q 'GPU telemetry: 2 GPUs through NVML' "$AGENT_ERR"
	agent_stop INT || fail_because "agent did not stop"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
	sum=$(sed -n "/^The node's GPUs/,/^\$/p" "$T/tel.reset")
	expect "--summary, GPU 0: $sum" grep -qE "GPU 0 $U0: [0-9]+ reads, SM clock 1410-1980 MHz \(highest 1980\), up to 45 C, up to 350 W of 700" <<<"$sum"
	expect "--summary, GPU 0 held: $sum" grep -qE "clocks held down by: sw_power_cap in [0-9]+ of [0-9]+ reads, hw_slowdown in [0-9]+ of [0-9]+ reads$" <<<"$sum"
	expect "--summary, GPU 1: $sum" grep -qE "GPU 1 $U1: .*SM clock 1755-1755 MHz.*up to 83 C" <<<"$sum"
	# at exit, since the reset: every read of GPU 0 held down
	sum=$(sed -n "/^The node's GPUs/,/^\$/p" "$AGENT_ERR")
	expect "--summary at exit, GPU 0 since the reset: $sum" \
		grep -qE "GPU 0 $U0: ([0-9]+) reads, SM clock 1410-1410 MHz \(highest 1980\), up to 45 C, up to 350 W of 700" <<<"$sum"
	nr=$(sed -n "s/^  GPU 0 $U0: \([0-9]*\) reads.*/\1/p" <<<"$sum")
	expect "--summary at exit, GPU 0 held in every one of its $nr reads: $sum" \
		grep -qE "clocks held down by: sw_power_cap in $nr of $nr reads, hw_slowdown in $nr of $nr reads$" <<<"$sum"
	expect "NVML init / shutdown: $(tr '\n' ' ' <"$FAKE_NVML_LOG")" \
		[ "$(tr '\n' ' ' <"$FAKE_NVML_LOG")" = "init shutdown " ]
fi
report gpu_telemetry_records

# -------------------------------------------------------------- absent ----
out=$(timeout 60 "$AGENT" -d 5 -o "$T/absent.jsonl" --control-socket none --shim-socket none \
	--gpu-telemetry on --nvml-lib "$T/no/libnvidia-ml.so.1" 2>&1)
rc=$?
expect "on without NVML: exit $rc" in_exit_range "$rc"
expect "on without NVML: no reason given: $out" grep -q -- '--gpu-telemetry on: cannot load NVML: .*no/libnvidia-ml.so.1' <<<"$out"
if agent_start absent "${COMMON[@]}" --nvml-lib "$T/no/libnvidia-ml.so.1"; then
	wait_record '.type=="stats"' 10 || fail_because "no stats record"
	s=$(stats_tel)
	expect "auto without NVML, stats: $s" jqe '.state == "unavailable" and .devices == 0 and
		(.error | test("no/libnvidia-ml"))' <<<"$s"
	expect "auto without NVML: no log line" grep -q 'GPU telemetry off: NVML not loaded' "$AGENT_ERR"
	agent_stop INT || fail_because "agent did not stop"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "auto without NVML: exit ${AGENT_RC:-?}: $(agent_tail)"
	expect "records without NVML" [ "$(jqo '[.[] | select(.type=="gpu_telemetry")] | length')" = 0 ]
else
	fail_because "auto without NVML did not start: $(agent_tail)"
fi
if agent_start off "${COMMON[@]}" --gpu-telemetry off; then
	wait_record '.type=="stats"' 10 || fail_because "no stats record"
	expect "off: a gpu_telemetry stats member" [ "$(stats_tel)" = null ]
	agent_stop INT || fail_because "agent did not stop"
else
	fail_because "--gpu-telemetry off did not start: $(agent_tail)"
fi
report gpu_telemetry_absent

# -------------------------------------------------------------- failed ----
if FAKE_NVML_INIT_RC=9 agent_start failed "${COMMON[@]}"; then
	wait_record '.type=="stats" and .gpu_telemetry.state=="failed"' 10 ||
		fail_because "state never failed: $(stats_tel)"
	s=$(stats_tel)
	expect "stats: $s" jqe '.error == "nvmlInit_v2: Driver Not Loaded (NVML error 9)" and
		.devices == 0 and .samples == 0' <<<"$s"
	expect "no warning" grep -q 'GPU telemetry off: nvmlInit_v2: Driver Not Loaded' "$AGENT_ERR"
	# the agent goes on: more stats records after the failure
	n=$(jqo '[.[] | select(.type=="stats")] | length')
	for ((i = 0; i < 100; i++)); do
		[ "$(jqo '[.[] | select(.type=="stats")] | length')" -gt "$((n + 1))" ] && break
		sleep 0.1
	done
	expect "no stats record after the failure ($n before)" \
		[ "$(jqo '[.[] | select(.type=="stats")] | length')" -gt "$((n + 1))" ]
	agent_stop INT || fail_because "agent did not stop"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "exit ${AGENT_RC:-?}: $(agent_tail)"
else
	fail_because "agent did not start: $(agent_tail)"
fi
report gpu_telemetry_failed

# ------------------------------------------------------------- suspect ----
GPU_LIVE=$BUILD/tests/integration/gpu_live
SROUNDS=140 SLOW=50
if [ ! -x "$GPU_LIVE" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	fail_because "$GPU_LIVE or $BUILD/libinfertrace_cupti.so not built (make test)"
else
	# the workload's device 0 is NVML's GPU 1 (U1 at 1755 MHz, a power cap and a
	# thermal limit all along: never under its usual, never named); GPU 0 (U0)
	# belongs to no traced process and drops too: not named either
	state 1980 0
	d=$T/sus.d go=$T/sus.go ex=$T/sus.exit slow=$T/sus.slow
	mkdir -p "$d"
	inst=it-telsus-$$
	bg_start "$T/sus.work" env INFERTRACE_INSTANCE="$inst" INFERTRACE_SHIM_SOCKET="$d/shim.sock" \
		"$GPU_LIVE" -t 1 -n "$SROUNDS" -s 1000 -P 40 -G "$SLOW:$slow" -U "$U1" -w "$go" -e "$ex" \
		-m sentinel
	wp=$BG_PID
	if ! wait_line "$T/sus.work" 10; then
		fail_because "gpu_live printed nothing: $(head -c 300 "$T/sus.work.err")"
	else
		wpid=$(head -n 1 "$T/sus.work" | jq -r .pid)
		if ! agent_start sus -i 0.25 --pid "$wpid" --shim-socket "$d/shim.sock" \
			--control-socket none --nvml-lib "$NVML" --gpu-telemetry-period 100; then
			fail_because "agent did not start: $(agent_tail)"
		elif ! wait_record ".type == \"shim_status\" and .pid == $wpid" 10; then
			fail_because "no shim_status for pid $wpid: $(agent_tail)"
		else
			sleep 1 # readings of the usual clock first
			touch "$go"
			for ((i = 0; i < 1000; i++)); do [ -e "$slow" ] && break; sleep 0.01; done
			[ -e "$slow" ] || fail_because "the workload never reached round $SLOW"
			# the workload's GPU (U1) drops with it; GPU 0 too
			printf '%s\n' "$U0|NVIDIA H100 80GB HBM3|990|1980|2619|350000|700000|45|90|40|c" \
				"$U1|NVIDIA H100 80GB HBM3|1410|1980|-|690000|700000|83|99|55|c" >"$FAKE_NVML_STATE.tmp"
			mv "$FAKE_NVML_STATE.tmp" "$FAKE_NVML_STATE"
			wait_record ".type == \"step\" and .pid == $wpid and .seq >= $((SROUNDS - 1))" 20 ||
				fail_because "not every step was cut: $(agent_tail)"
			wait_record ".type == \"anomaly\" and .kind == \"gpu_slow\"" 5
		fi
		touch "$ex"
		wait_exit "$wp" 30 || fail_because "gpu_live did not finish"
		agent_stop INT || fail_because "agent did not stop"
		dv=$(jqo --argjson p "$wpid" '[.[] | select(.type == "gpu_device" and .pid == $p)]')
		expect "gpu_device records: $dv" jqe --arg u "$U1" 'length == 1 and .[0].device == 0 and
			.[0].uuid == $u and .[0].mig == false and .[0].ts_ns > 0' <<<"$dv"
		an=$(jqo --arg i "$inst" '[.[] | select(.type == "anomaly" and .instance == $i)]')
		slow_start=$(jqo --argjson p "$wpid" --argjson s "$SLOW" \
			'[.[] | select(.type == "step" and .pid == $p)] | sort_by(.start_ns) | .[$s].start_ns')
		expect "no gpu_slow anomaly: $(jq -c '[.[] | {kind, chart, step_start_ns}]' <<<"$an")" \
			jqe 'any(.kind == "gpu_slow")' <<<"$an"
		expect "an anomaly before the slowdown ($slow_start): $(jq -c '[.[] | {kind, step_start_ns}]' <<<"$an")" \
			jqe --argjson s "${slow_start:-0}" 'all(.step_start_ns >= $s)' <<<"$an"
		named=$(jq -c '[.[] | select(.suspects[0].what == "gpu_clock")]' <<<"$an")
		expect "no gpu_slow anomaly names the clock first: $(jq -c '[.[] | {kind, s: [.suspects[].what]}]' <<<"$an")" \
			jqe 'length > 0 and all(.kind == "gpu_slow")' <<<"$named"
		expect "gpu_clock suspect: $(jq -c '.[0].suspects[0]' <<<"$named")" \
			jqe --arg u "$U1" '.[0].suspects[0] | .evidence == "GPU 1 (\($u)) ran at 1410 MHz, 20% under its usual 1755 MHz; held by sw_power_cap, hw_slowdown" and
				.value == 1410 and (.ratio * 1000 | round) == 803' <<<"$named"
		# 90 slow steps: after 64 in a row the level shift, which names the clock too
		ls=$(jqo --arg i "$inst" '[.[] | select(.type == "level_shift" and .instance == $i)]')
		expect "level_shift: $ls" jqe --arg u "$U1" 'length == 1 and .[0].kind == "gpu_slow" and
			.[0].gpu_clock == "GPU 1 (\($u)) ran at 1410 MHz, 20% under its usual 1755 MHz; held by sw_power_cap, hw_slowdown"' <<<"$ls"
		expect "stats diag.gpu_clock_suspects: $(jqo '[.[] | select(.type == "stats")] | last | .diag.gpu_clock_suspects')" \
			[ "$(jqo '[.[] | select(.type == "stats")] | last | .diag.gpu_clock_suspects')" = "$(jq length <<<"$named")" ]
		expect "GPU 0 (no process of the instance) named: $(jq -c '[.[].suspects[] | select(.what == "gpu_clock") | .evidence]' <<<"$an")" \
			jqe --arg u "$U0" '[.[].suspects[] | select(.what == "gpu_clock") | .evidence | contains($u)] | any | not' <<<"$an"
	fi
fi
report gpu_telemetry_suspect

# --------------------------------------------------------------- stuck ----
if FAKE_NVML_SLEEP_MS=600000 agent_start stuck "${COMMON[@]}"; then
	# the loop turns while NVML does not return: stats records, each "starting"
	for ((i = 0; i < 200; i++)); do
		[ "$(jqo '[.[] | select(.type=="stats")] | length')" -ge 4 ] && break
		sleep 0.1
	done
	expect "the event loop waited for NVML: $(jqo '[.[] | select(.type=="stats")] | length') stats records" \
		[ "$(jqo '[.[] | select(.type=="stats")] | length')" -ge 4 ]
	expect "state: $(stats_tel)" jqe '.state == "starting" and .samples == 0' <<<"$(stats_tel)"
	agent_stop INT || fail_because "SIGINT did not stop the agent while NVML hung"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "exit ${AGENT_RC:-?}: $(agent_tail)"
	expect "no line about the poller left behind: $(agent_tail)" \
		grep -q 'GPU telemetry: NVML did not return in 2 s; exiting without it' "$AGENT_ERR"
else
	fail_because "agent did not start: $(agent_tail)"
fi
# slow, not stuck: each NVML query takes 50 ms, a read of both GPUs about 0.7 s,
# longer than the 100 ms period: counted, and the reads go on
state 1980 0
if FAKE_NVML_SLEEP_MS=50 agent_start slow "${COMMON[@]}" --gpu-telemetry-period 100; then
	wait_record '.type=="stats" and .gpu_telemetry.slow_polls > 0 and .gpu_telemetry.samples >= 4' 30 ||
		fail_because "slow reads not counted: $(stats_tel)"
	expect "slow: $(stats_tel)" jqe '.state == "running" and .dropped == 0 and .read_errors == 0' <<<"$(stats_tel)"
	agent_stop INT || fail_because "agent did not stop"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "exit ${AGENT_RC:-?}: $(agent_tail)"
else
	fail_because "agent did not start: $(agent_tail)"
fi
report gpu_telemetry_stuck
