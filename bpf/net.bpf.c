// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * net.bpf.c - node-wide traffic per network device and TCP retransmissions.
 *
 * net:net_dev_xmit fires once per packet handed to a driver (with the
 * driver's verdict) and net:netif_receive_skb once per packet entering the
 * stack, on every device including veth and loopback. Bytes are counted as
 * the device counts them (link-layer header included): on receive the
 * header was already pulled, so it is added back from the mac offset.
 * Counters are per CPU, summed by the agent.
 *
 * Socket payload bytes of traced threads, IPv4 and IPv6 (TCP, UDP):
 * sock:sock_send_length and sock:sock_recv_length (Linux 6.3) fire in the
 * caller's context on every send and receive whatever the syscall (send,
 * write, splice...). Gathered per thread in thread_stats and sent as one
 * EV_NET_IO per window of NET_IO_WINDOW_NS (or earlier, when the thread
 * leaves the CPU): a step's network bytes without one record per call.
 * Older kernels lack the tracepoints: the agent says so and steps carry no
 * network bytes.
 *
 * tcp:tcp_retransmit_skb runs in softirq or timer context where `current`
 * is unrelated, so the owning process comes from sock_owner, filled when a
 * process connects the socket.
 */
#include "lib/common.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define AF_INET6 10

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);   /* struct sock * */
	__type(value, __u32); /* tgid */
} sock_owner SEC(".maps");

static __always_inline void count_dev(struct net_device *dev, __u64 bytes, bool tx)
{
	struct netdev_key key = {};
	struct netdev_stats *st;

	if (!dev)
		return;
	key.ifindex = BPF_CORE_READ(dev, ifindex);
	key.netns = BPF_CORE_READ(dev, nd_net.net, ns.inum);
	st = bpf_map_lookup_elem(&netdev_stats, &key);
	if (!st) {
		struct netdev_stats zero = {};

		bpf_probe_read_kernel_str(zero.name, sizeof(zero.name), dev->name);
		bpf_map_update_elem(&netdev_stats, &key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&netdev_stats, &key);
		if (!st)
			return;
	}
	if (tx) {
		st->tx_bytes += bytes;
		st->tx_packets++;
	} else {
		st->rx_bytes += bytes;
		st->rx_packets++;
	}
}

static __always_inline int handle_xmit(struct sk_buff *skb, int rc, struct net_device *dev,
				       unsigned int len)
{
	if (rc != 0) /* NETDEV_TX_OK only: a busy driver will see the packet again */
		return 0;
	count_dev(dev, len, true);
	return 0;
}

static __always_inline int handle_receive(struct sk_buff *skb)
{
	__u16 mac = BPF_CORE_READ(skb, mac_header);
	__u64 len = BPF_CORE_READ(skb, len);

	if (mac != (__u16)~0U) {
		unsigned char *head = BPF_CORE_READ(skb, head);
		unsigned char *data = BPF_CORE_READ(skb, data);
		long hdr = data - (head + mac);

		if (hdr > 0 && hdr < 256)
			len += hdr;
	}
	count_dev(BPF_CORE_READ(skb, dev), len, false);
	return 0;
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(on_net_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	return handle_xmit(skb, rc, dev, len);
}

SEC("raw_tp/net_dev_xmit")
int BPF_PROG(on_net_dev_xmit_raw, struct sk_buff *skb, int rc, struct net_device *dev,
	     unsigned int len)
{
	return handle_xmit(skb, rc, dev, len);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(on_netif_receive_skb, struct sk_buff *skb)
{
	return handle_receive(skb);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(on_netif_receive_skb_raw, struct sk_buff *skb)
{
	return handle_receive(skb);
}

#define TCP_SYN_SENT 2

/*
 * connect() moves a socket from CLOSE to SYN_SENT in the caller's context:
 * the one moment `current` is known to own the socket. Accepted sockets
 * change state in softirq, so their owner stays unknown.
 */
static __always_inline int handle_state(const struct sock *sk, int newstate)
{
	__u64 key = (__u64)sk;
	__u32 tgid;

	if (newstate != TCP_SYN_SENT)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_update_elem(&sock_owner, &key, &tgid, BPF_ANY);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_sock_state, const struct sock *sk, int oldstate, int newstate)
{
	return handle_state(sk, newstate);
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(on_sock_state_raw, const struct sock *sk, int oldstate, int newstate)
{
	return handle_state(sk, newstate);
}

static __always_inline int handle_retransmit(const struct sock *sk)
{
	struct tcp_retrans_event *e;
	__u64 key = (__u64)sk;
	__u32 *owner;
	__u16 family;

	if (!sk)
		return 0;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	e = reserve(&rb_misc, sizeof(*e), EV_TCP_RETRANS);
	if (!e)
		return 0;
	owner = bpf_map_lookup_elem(&sock_owner, &key);
	fill_hdr(&e->hdr, EV_TCP_RETRANS, sizeof(*e), owner ? *owner : 0, 0, bpf_ktime_get_ns());
	__builtin_memset(e->saddr, 0, sizeof(e->saddr));
	__builtin_memset(e->daddr, 0, sizeof(e->daddr));
	/*
	 * Explicit sizes: BPF_CORE_READ_INTO copies sizeof(*dst), which for the
	 * __u8 arrays here is one byte.
	 */
	if (family == AF_INET) {
		bpf_core_read(e->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->family = family;
	e->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	e->pad = 0;
	e->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	e->pad2 = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(on_tcp_retransmit, const struct sock *sk)
{
	return handle_retransmit(sk);
}

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(on_tcp_retransmit_raw, const struct sock *sk)
{
	return handle_retransmit(sk);
}

static __always_inline int handle_net_io(long ret, bool tx)
{
	struct thread_stats *ts;
	__u64 now;

	if (ret <= 0)
		return 0;
	ts = thread_current();
	if (!ts)
		return 0;
	now = bpf_ktime_get_ns();
	if (ts->net_first_ns && now - ts->net_first_ns >= NET_IO_WINDOW_NS)
		net_io_flush(ts);
	if (!ts->net_first_ns)
		ts->net_first_ns = now;
	ts->net_last_ns = now;
	if (tx)
		ts->net_tx_bytes += ret;
	else
		ts->net_rx_bytes += ret;
	return 0;
}

#define MSG_PEEK 2

static __always_inline int handle_sock_io(const struct sock *sk, int ret, int flags, bool tx)
{
	__u16 family;

	if (ret <= 0 || (!tx && (flags & MSG_PEEK)))
		return 0;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	return handle_net_io(ret, tx);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int ret, int flags)
{
	return handle_sock_io(sk, ret, flags, true);
}

SEC("raw_tp/sock_send_length")
int BPF_PROG(on_sock_send_raw, struct sock *sk, int ret, int flags)
{
	return handle_sock_io(sk, ret, flags, true);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv, struct sock *sk, int ret, int flags)
{
	return handle_sock_io(sk, ret, flags, false);
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(on_sock_recv_raw, struct sock *sk, int ret, int flags)
{
	return handle_sock_io(sk, ret, flags, false);
}
