#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Libraries that lack some or all of the probed entry points (old CUDA
# releases, vendor builds): the agent names what it cannot trace in one
# warning line per file, traces the rest exactly, and keeps running.
#   partial_library: a libcudart with only cudaLaunchKernel and
#                    cudaStreamSynchronize: one warning naming the missing
#                    entry points, and exact counts for the two it has
#                    (--sentinel-launches all: cudaLaunchKernel is per-launch)
#   empty_library:   a libcudart with none: one error line saying it is not
#                    traced; the agent stays up
# The libraries and their caller are compiled by the test (cc, -shared).
source "$(dirname "$0")/lib.sh"
it_preflight partial_library empty_library

mkdir -p "$T/partial" "$T/empty"
cat >"$T/partial.c" <<'SRC'
int cudaLaunchKernel(const void *f, unsigned long g, unsigned g3, unsigned long b, unsigned b3,
		     void **args) { (void)f; (void)g; (void)g3; (void)b; (void)b3; (void)args; return 35; }
int cudaStreamSynchronize(void *s) { (void)s; return 35; }
SRC
cat >"$T/empty.c" <<'SRC'
int cudaSomethingElse(void) { return 0; }
SRC
cat >"$T/caller.c" <<'SRC'
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	void *h = dlopen(argv[1], RTLD_NOW);
	int (*launch)(const void *, unsigned long, unsigned, unsigned long, unsigned, void **);
	int (*sync)(void *);

	if (!h)
		return 1;
	printf("{\"pid\":%d}\n", getpid());
	fflush(stdout);
	while (access(argv[2], F_OK))
		usleep(10000);
	launch = (int (*)(const void *, unsigned long, unsigned, unsigned long, unsigned, void **))
		dlsym(h, "cudaLaunchKernel");
	sync = (int (*)(void *))dlsym(h, "cudaStreamSynchronize");
	for (int i = 0; i < 7 && launch; i++)
		launch(0, 0, 0, 0, 0, 0);
	for (int i = 0; i < 3 && sync; i++)
		sync(0);
	return 0;
}
SRC
if ! cc -shared -fPIC -O1 -o "$T/partial/libcudart.so.99" "$T/partial.c" ||
	! cc -shared -fPIC -O1 -o "$T/empty/libcudart.so.98" "$T/empty.c" ||
	! cc -O1 -o "$T/caller" "$T/caller.c" -ldl; then
	echo "FAIL partial_library: cannot compile the test libraries"
	echo "FAIL empty_library: cannot compile the test libraries"
	exit 0
fi

# run_lib NAME LIB: the caller maps LIB, the agent traces it by --pid
run_lib() {
	local name=$1 lib=$2
	WPID=
	bg_start "$T/$name.work" "$T/caller" "$lib" "$T/$name.go"
	wait_line "$T/$name.work" 10 || { fail_because "caller printed nothing"; return 1; }
	WPID=$(head -n 1 "$T/$name.work" | jq -r .pid)
	agent_start "$name" -i 0.25 --pid "$WPID" --sentinel-launches all ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	wait_record ".type==\"process\" and .pid==$WPID" 10 || fail_because "no process record"
	touch "$T/$name.go"
	wait_exit "$BG_PID" 20 || fail_because "caller did not finish"
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$WPID" 10 ||
		fail_because "no exit record"
	kill -0 "$AGENT_PID" 2>/dev/null || fail_because "agent died: $(agent_tail)"
	agent_stop INT || fail_because "agent did not stop"
	[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
}

sum_launch() { # sum_launch API
	jqo --argjson pid "$WPID" --arg api "$1" \
		"[.[] | select(.type == \"thread\" and .pid == \$pid) | .launches[\$api] // 0] | add // 0"
}

run_lib partial_library "$T/partial/libcudart.so.99" && {
	warn=$(grep -c "libcudart.so.99: symbols not found, those entry points are not traced here:" "$AGENT_ERR")
	expect "one warning line for the file, got $warn: $(agent_tail)" eq "$warn" 1
	for missing in cudaLaunchKernelExC cudaGraphLaunch cudaMemcpyAsync cudaDeviceSynchronize; do
		expect "warning does not name $missing" grep -q "not traced here:.* $missing\b" "$AGENT_ERR"
	done
	expect "warning names cudaLaunchKernel, which the file has" \
		bash -c "! grep 'not traced here:' '$AGENT_ERR' | grep -qE ' cudaLaunchKernel( |\$)'"
	n=$(sum_launch cudaLaunchKernel)
	expect "cudaLaunchKernel counted $n, want 7" eq "$n" 7
	n=$(sum_launch cudaStreamSynchronize)
	expect "cudaStreamSynchronize counted $n, want 3" eq "$n" 3
	n=$(jqo --argjson pid "$WPID" '[.[] | select(.type == "thread" and .pid == $pid) | .sync_count] | add // 0')
	expect "sync_count $n, want 3 (the uretprobe on the file)" eq "$n" 3
}
report partial_library

run_lib empty_library "$T/empty/libcudart.so.98" && {
	n=$(grep -c "libcudart.so.98: none of the CUDA runtime entry points is defined in this file; it is not traced" "$AGENT_ERR")
	expect "one error line for the file, got $n: $(agent_tail)" eq "$n" 1
	n=$(jqo '[.[] | select(.type == "stats" and .final)] | .[0].attached_files')
	expect "attached_files at exit $n, want 0" eq "$n" 0
}
report empty_library
