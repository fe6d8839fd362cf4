#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# net - traffic of a known size over a veth pair between two network
# namespaces made here (deleted on exit), no other network needed.
#   net_bytes:      N UDP datagrams of a known payload; the agent's per-device
#                   rx/tx packets and bytes match the kernel's own counters
#                   (/sys/class/net/DEV/statistics) within 1 %, and the
#                   payload plus UDP, IPv4 and Ethernet headers
#   tcp_retransmit: a connected TCP client whose peer's replies are
#                   blackholed retransmits; the record carries the 4-tuple,
#                   the netns and the connecting pid
source "$(dirname "$0")/lib.sh"
it_preflight net_bytes tcp_retransmit

NS1=itA$$ NS2=itB$$
DEV1=itv0 DEV2=itv1
IP1=10.213.$(($$ % 200)).1 IP2=10.213.$(($$ % 200)).2
N=200 SIZE=1000
FRAME=$((SIZE + 8 + 20 + 14)) # UDP, IPv4, Ethernet

setup() {
	command -v ip >/dev/null || { echo "ip (iproute2) missing"; return 1; }
	netns_add "$NS1" && netns_add "$NS2" || { echo "ip netns add failed"; return 1; }
	local ns
	for ns in "$NS1" "$NS2"; do
		# no IPv6: no router solicitations or DAD in the counters
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
			net.ipv6.conf.default.disable_ipv6=1 || return 1
	done
	ip -n "$NS1" link add "$DEV1" type veth peer name "$DEV2" netns "$NS2" &&
		ip -n "$NS1" addr add "$IP1/24" dev "$DEV1" &&
		ip -n "$NS2" addr add "$IP2/24" dev "$DEV2" &&
		ip -n "$NS1" link set "$DEV1" up && ip -n "$NS2" link set "$DEV2" up &&
		ip -n "$NS1" link set lo up && ip -n "$NS2" link set lo up || { echo "veth setup failed"; return 1; }
	# static neighbours: no ARP, so every packet is ours
	local mac1 mac2
	mac1=$(ip netns exec "$NS1" cat "/sys/class/net/$DEV1/address")
	mac2=$(ip netns exec "$NS2" cat "/sys/class/net/$DEV2/address")
	ip -n "$NS1" neigh replace "$IP2" lladdr "$mac2" dev "$DEV1" nud permanent &&
		ip -n "$NS2" neigh replace "$IP1" lladdr "$mac1" dev "$DEV2" nud permanent || { echo "neigh setup failed"; return 1; }
	INUM1=$(ip netns exec "$NS1" stat -L -c %i /proc/self/ns/net)
	INUM2=$(ip netns exec "$NS2" stat -L -c %i /proc/self/ns/net)
}

# kstat NS DEV: the kernel's counters as JSON
kstat() {
	ip netns exec "$1" sh -c "cd /sys/class/net/$2/statistics && echo \"{\\\"rx_bytes\\\":\$(cat rx_bytes),\\\"rx_packets\\\":\$(cat rx_packets),\\\"tx_bytes\\\":\$(cat tx_bytes),\\\"tx_packets\\\":\$(cat tx_packets)}\""
}

if ! setup >"$T/setup.log" 2>&1; then
	why=$(tail -n 2 "$T/setup.log" | tr '\n' ' ')
	echo "FAIL net_bytes: cannot build the veth pair: $why"
	echo "FAIL tcp_retransmit: cannot build the veth pair: $why"
	exit 0
fi

# --------------------------------------------------------------- net_bytes --
main_bytes() {
	local rpid before1 before2 after1 after2
	bg_start "$T/recv" ip netns exec "$NS2" "$WORKLOAD" udp-recv 9000 20
	rpid=$BG_PID
	# --pid: trace only the receiver (network counting is node-wide anyway)
	agent_start net -i 0.25 --pid "$rpid" || { fail_because "agent did not start: $(agent_tail)"; return; }
	before1=$(kstat "$NS1" "$DEV1") before2=$(kstat "$NS2" "$DEV2")
	ip netns exec "$NS1" "$WORKLOAD" udp-send "$IP2" 9000 "$N" "$SIZE" ||
		{ fail_because "udp-send failed"; return; }
	sleep 0.2 # the last datagrams cross the pair
	after1=$(kstat "$NS1" "$DEV1") after2=$(kstat "$NS2" "$DEV2")
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "agent exit $AGENT_RC: $(agent_tail)" [ "$AGENT_RC" = 0 ]
	kill "$rpid" 2>/dev/null

	local i d inum before after k a got want
	for i in 1 2; do
		if [ "$i" = 1 ]; then
			d=$DEV1 inum=$INUM1 before=$before1 after=$after1
		else
			d=$DEV2 inum=$INUM2 before=$before2 after=$after2
		fi
		a=$(jqo --arg dev "$d" --argjson netns "$inum" '
			[.[] | select(.type == "net" and .dev == $dev and .netns == $netns)]
			| {rx_bytes: (map(.rx_bytes) | add // 0), rx_packets: (map(.rx_packets) | add // 0),
			   tx_bytes: (map(.tx_bytes) | add // 0), tx_packets: (map(.tx_packets) | add // 0)}')
		for k in rx_bytes rx_packets tx_bytes tx_packets; do
			got=$(jq ".$k" <<<"$a")
			want=$(($(jq ".$k" <<<"$after") - $(jq ".$k" <<<"$before")))
			# within 1 % of the kernel's own count
			expect "$d $k: agent $got, kernel $want" \
				between $((got * 100)) $((want * 99)) $((want * 101))
		done
		# the traffic itself: N frames one way, nothing the other way
		if [ "$d" = "$DEV1" ]; then
			expect "$d tx: $(jq -c . <<<"$a"), want $N packets of $FRAME bytes" \
				[ "$(jq -c '[.tx_packets, .tx_bytes, .rx_packets]' <<<"$a")" = "[$N,$((N * FRAME)),0]" ]
		else
			expect "$d rx: $(jq -c . <<<"$a"), want $N packets of $FRAME bytes" \
				[ "$(jq -c '[.rx_packets, .rx_bytes, .tx_packets]' <<<"$a")" = "[$N,$((N * FRAME)),0]" ]
		fi
	done
}
main_bytes
report net_bytes

# ---------------------------------------------------------- tcp_retransmit --
main_retrans() {
	local spid cpid sport rec
	bg_start "$T/serve" ip netns exec "$NS2" "$WORKLOAD" tcp-serve 9100 20
	spid=$BG_PID
	sleep 0.2 # listening
	# the agent learns a socket's owner when it connects: start it first
	agent_start retrans -i 0.25 --pid "$spid" || { fail_because "agent did not start: $(agent_tail)"; return; }
	bg_start "$T/client" ip netns exec "$NS1" "$WORKLOAD" tcp-client -w "$T/retrans.go" "$IP2" 9100 2
	cpid=$BG_PID
	wait_line "$T/client" 10 || { fail_because "client did not connect: $(head -c 200 "$T/client.err")"; return; }
	sport=$(jq -r .sport "$T/client")
	# the server's replies (ACKs) go nowhere: the client's data is retransmitted
	ip -n "$NS2" route add blackhole "$IP1/32" || { fail_because "blackhole route failed"; return; }
	touch "$T/retrans.go"
	local cond=".type==\"tcp_retransmit\" and .saddr==\"$IP1\" and .sport==$sport and .daddr==\"$IP2\" and .dport==9100"
	wait_record "$cond" 15 || fail_because "no tcp_retransmit record for $IP1:$sport -> $IP2:9100"
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "agent exit $AGENT_RC: $(agent_tail)" [ "$AGENT_RC" = 0 ]
	rec=$(jqo "[.[] | select($cond)] | first | del(.schema, .host)")
	[ "$rec" = null ] && return
	expect "record pid, want the connecting pid $cpid: $rec" [ "$(jq .pid <<<"$rec")" = "$cpid" ]
	expect "record netns, want $INUM1: $rec" [ "$(jq .netns <<<"$rec")" = "$INUM1" ]
	expect "record family/state: $rec" [ "$(jq -r '.family + " " + .state' <<<"$rec")" = "ipv4 ESTABLISHED" ]
	kill "$spid" "$cpid" 2>/dev/null
}
main_retrans
report tcp_retransmit
