// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Closing the sockets of a backend that went (`--socket-lb`, docs/socket-lb.md, "Closing
 * sockets of a backend that went").
 *
 * Two socket iterators, UDP and TCP, walk the sockets of one network namespace (the one
 * the reader was in when it created the iterator) and destroy each socket that
 *   - the socket-LB programs translated (its lb_revnat record names its peer as the
 *     backend it was given), and
 *   - whose (Service, backend) pair is in lb_destroy, the pairs the Rust side wrote
 *     before reading the iterators (and clears after).
 * A socket a process connected to a pod's address itself is never touched, as kube-proxy
 * never touches a flow that was not DNATed from a Service address.
 *
 * bpf_sock_destroy is a kfunc (6.5+). aya 0.14 cannot resolve kfunc calls, so the call is
 * compiled as a helper call with a placeholder id that the loader rewrites into a kfunc
 * call with the running kernel's BTF id (src/netfilter/bpf/destroy.rs); a kernel without
 * the kfunc is found before anything is loaded.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "socket_lb_shared.h"

#define AF_INET 2
#define AF_INET6 10

/* The loader rewrites `call SOCK_DESTROY_PLACEHOLDER` (a helper id no kernel has) into
 * `call bpf_sock_destroy` (src/netfilter/bpf/destroy.rs: SOCK_DESTROY_PLACEHOLDER). */
#define SOCK_DESTROY_PLACEHOLDER 0x7ffff5d1
static long (*sock_destroy)(void *sk) = (void *)SOCK_DESTROY_PLACEHOLDER;

/* lb_destroyed: index = family_slot * 2 + kind, family_slot 0 = IPv4, 1 = IPv6 */
#define DESTROYED 0
#define DESTROY_FAILED 1

/* The kernel's socket fields, read through CO-RE (relocated against the running
 * kernel's BTF by the loader): only the names matter, not this layout. */
struct in6_addr___sd {
	union {
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__u32 skc_daddr;
	__u16 skc_dport;
	unsigned short skc_family;
	struct in6_addr___sd skc_v6_daddr;
} __attribute__((preserve_access_index));

struct sock;
struct udp_sock;
struct tcp_sock;
struct bpf_iter_meta;

/* The iterators' contexts: fixed by the kernel's iterator registration. */
struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
};

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
};

/* A (Service, backend) pair whose sockets go: addresses and ports in network order as
 * the sockets hold them (IPv4 in the first word). Mirrored by maps.rs (DestroyKey). */
struct destroy_key {
	__u32 svc_addr[4];
	__u32 be_addr[4];
	__u16 svc_port;
	__u16 be_port;
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

_Static_assert(sizeof(struct destroy_key) == 40, "destroy_key layout is shared with maps.rs");

/* Not pinned: only the process that loaded the iterators writes and reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct destroy_key);
	__type(value, __u32);
} lb_destroy SEC(".maps");

/* Pinned beside lb_counters, so /metrics reads it as it reads the others. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_destroyed SEC(".maps");

static __always_inline void count(int family, __u32 kind)
{
	__u32 idx = (family == FAMILY_V6 ? 2 : 0) + kind;
	__u64 *c = bpf_map_lookup_elem(&lb_destroyed, &idx);

	if (c)
		__sync_fetch_and_add(c, 1);
}

/* `sk` and `skc` are the same socket: the full socket (for its storage), and its common
 * part as the iterator gave it (the kfunc wants the iterator's trusted pointer). */
static __always_inline int consider(void *sk, struct sock_common *skc, __u8 proto)
{
	struct destroy_key key = {};
	struct revnat *rn;
	int family;

	rn = bpf_sk_storage_get(&lb_revnat, sk, 0, 0);
	if (!rn)
		return 0;
	switch (skc->skc_family) {
	case AF_INET:
		family = FAMILY_V4;
		key.be_addr[0] = skc->skc_daddr;
		break;
	case AF_INET6:
		family = FAMILY_V6;
		key.be_addr[0] = skc->skc_v6_daddr.in6_u.u6_addr32[0];
		key.be_addr[1] = skc->skc_v6_daddr.in6_u.u6_addr32[1];
		key.be_addr[2] = skc->skc_v6_daddr.in6_u.u6_addr32[2];
		key.be_addr[3] = skc->skc_v6_daddr.in6_u.u6_addr32[3];
		break;
	default:
		return 0;
	}
	key.be_port = skc->skc_dport;
	/* Its peer is the backend the programs gave it: a socket reconnected elsewhere since
	 * (or never translated for this peer) is not ours to close. */
	if (rn->family != family || rn->be_port != key.be_port || rn->be_addr[0] != key.be_addr[0] ||
	    rn->be_addr[1] != key.be_addr[1] || rn->be_addr[2] != key.be_addr[2] || rn->be_addr[3] != key.be_addr[3])
		return 0;
	__builtin_memcpy(key.svc_addr, rn->svc_addr, sizeof(key.svc_addr));
	key.svc_port = rn->svc_port;
	key.proto = proto;
	key.family = family;
	if (!bpf_map_lookup_elem(&lb_destroy, &key))
		return 0;
	count(family, sock_destroy(skc) == 0 ? DESTROYED : DESTROY_FAILED);
	return 0;
}

SEC("iter/udp")
int sock_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *udp = ctx->udp_sk;

	if (!udp)
		return 0;
	return consider(udp, (struct sock_common *)udp, 17);
}

SEC("iter/tcp")
int sock_destroy_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tcp;

	if (!skc)
		return 0;
	/* Full sockets only: a time-wait or request socket has no storage and nothing to close. */
	tcp = bpf_skc_to_tcp_sock(skc);
	if (!tcp)
		return 0;
	return consider(tcp, skc, 6);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
