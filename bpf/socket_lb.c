// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * svcproxy's socket-level load balancing (`--socket-lb`, docs/socket-lb.md).
 *
 * cgroup sock_addr programs rewrite a socket's destination once, when the process
 * names it: a Service address:port becomes one backend's, so the packets carry the
 * backend's address from the first one and no rule, DNAT or conntrack entry is needed.
 * Only addresses the maps hold are touched; everything else passes unchanged.
 *
 * The key and value layouts are mirrored, byte for byte, by src/netfilter/bpf/maps.rs
 * (its tests pin the bytes; the _Static_asserts below pin the C side).
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "socket_lb_shared.h"

/* Not in the UAPI headers a BPF build can include. */
#define ECONNREFUSED 111

/* svc_value.flags */
#define SVC_F_NO_BACKENDS 1 /* the Service has no usable endpoint: connect() is refused */
#define SVC_F_AFFINITY 2    /* ClientIP session affinity, for svc_value.affinity_timeout seconds */

#define NSEC_PER_SEC 1000000000ULL

/* counters: index = family_slot * COUNTER_KINDS + kind, family_slot 0 = IPv4, 1 = IPv6 */
#define COUNTER_TRANSLATED 0   /* a Service address rewritten to a backend's */
#define COUNTER_NO_BACKEND 1   /* a Service with no endpoints refused */
#define COUNTER_SLOT_MISSING 2 /* a picked slot absent: a planner bug, passed unchanged */
#define COUNTER_REVERSED 3     /* a backend address shown as the Service's (recvmsg, getpeername) */
#define COUNTER_KINDS 4

/* A Service port: address (network order, IPv4 in addr[0], the rest zero), port
 * (network order), IP protocol and family. */
struct svc_key {
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 family;
};

/* The backend set of one Service port: its slots live under backend_id, a fresh id per
 * generation, so a new set is written beside the old one and swapped in by one update. */
struct svc_value {
	__u32 backend_id;
	__u16 count;
	__u16 flags;
	__u32 affinity_timeout; /* seconds, with SVC_F_AFFINITY */
};

struct backend_key {
	__u32 backend_id;
	__u32 slot;
};

struct backend_value {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

/* ClientIP affinity: one client (a network namespace: a pod, or the node's own) and one
 * Service port. The client's address is not known at connect() for an unbound socket (the
 * kernel picks it after this hook), so its namespace stands for it, as in Cilium. */
struct affinity_key {
	__u64 netns_cookie;
	struct svc_key svc;
	__u32 pad;
};

/* The backend the client last went to, when, and where it sat in which generation. The
 * address is what counts: a new generation is searched for it, so a backend still in the
 * Service keeps its clients across endpoint changes, as the rules' per-endpoint lists do. */
struct affinity_value {
	__u64 last_used_ns; /* bpf_ktime_get_coarse_ns: CLOCK_MONOTONIC_COARSE */
	__u32 backend_id;
	__u32 slot;
	struct backend_value backend;
	__u32 pad;
};

_Static_assert(sizeof(struct svc_key) == 20, "svc_key layout is shared with maps.rs");
_Static_assert(__builtin_offsetof(struct svc_key, port) == 16, "svc_key.port");
_Static_assert(sizeof(struct svc_value) == 12, "svc_value layout is shared with maps.rs");
_Static_assert(sizeof(struct affinity_key) == 32, "affinity_key layout is shared with maps.rs");
_Static_assert(__builtin_offsetof(struct affinity_key, svc) == 8, "affinity_key.svc");
_Static_assert(sizeof(struct affinity_value) == 40, "affinity_value layout is shared with maps.rs");
_Static_assert(__builtin_offsetof(struct affinity_value, backend) == 16, "affinity_value.backend");
_Static_assert(sizeof(struct backend_key) == 8, "backend_key layout is shared with maps.rs");
_Static_assert(sizeof(struct backend_value) == 20, "backend_value layout is shared with maps.rs");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1048576);
	__type(key, struct backend_key);
	__type(value, struct backend_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct affinity_key);
	__type(value, struct affinity_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * COUNTER_KINDS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_counters SEC(".maps");

static __always_inline void count(int family, __u32 kind)
{
	__u32 idx = (family == FAMILY_V6 ? COUNTER_KINDS : 0) + kind;
	__u64 *c = bpf_map_lookup_elem(&lb_counters, &idx);

	if (c)
		*c += 1;
}

/* The address the process named, as a key's address words. */
static __always_inline void read_addr(struct bpf_sock_addr *ctx, int family, __u32 addr[4])
{
	if (family == FAMILY_V4) {
		addr[0] = ctx->user_ip4;
	} else {
		addr[0] = ctx->user_ip6[0];
		addr[1] = ctx->user_ip6[1];
		addr[2] = ctx->user_ip6[2];
		addr[3] = ctx->user_ip6[3];
	}
}

static __always_inline void write_addr(struct bpf_sock_addr *ctx, int family, const __u32 addr[4], __u16 port)
{
	if (family == FAMILY_V4) {
		ctx->user_ip4 = addr[0];
	} else {
		ctx->user_ip6[0] = addr[0];
		ctx->user_ip6[1] = addr[1];
		ctx->user_ip6[2] = addr[2];
		ctx->user_ip6[3] = addr[3];
	}
	ctx->user_port = port;
}

static __always_inline int same_addr(const __u32 a[4], const __u32 b[4])
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* bpf_loop's state: the slot of `backend` in generation `backend_id`, if it is there. */
struct find_slot {
	__u32 backend_id;
	__u32 slot;
	int found;
	struct backend_value backend;
};

static long find_slot_step(__u32 i, void *data)
{
	struct find_slot *f = data;
	struct backend_key k = { .backend_id = f->backend_id, .slot = i };
	struct backend_value *be = bpf_map_lookup_elem(&lb_backends, &k);

	if (be && be->port == f->backend.port && same_addr(be->addr, f->backend.addr)) {
		f->slot = i;
		f->found = 1;
		return 1;
	}
	return 0;
}

/* The slot a client's affinity entry names in the Service's current set: only a fresh
 * entry whose backend is still in the set counts. The same generation is checked by its
 * slot; a newer one is searched for the address (once per client: the entry is rewritten). */
static __always_inline int affinity_slot(const struct affinity_value *av, const struct svc_value *svc, __u64 now, __u32 *slot)
{
	struct backend_key bkey = { .backend_id = svc->backend_id, .slot = av->slot };
	struct backend_value *be;
	struct find_slot f = { .backend_id = svc->backend_id };

	if (now - av->last_used_ns >= (__u64)svc->affinity_timeout * NSEC_PER_SEC)
		return 0;
	if (av->backend_id == svc->backend_id && av->slot < svc->count) {
		be = bpf_map_lookup_elem(&lb_backends, &bkey);
		if (be && be->port == av->backend.port && same_addr(be->addr, av->backend.addr)) {
			*slot = av->slot;
			return 1;
		}
	}
	__builtin_memcpy(&f.backend, &av->backend, sizeof(f.backend));
	bpf_loop(svc->count, find_slot_step, &f, 0);
	if (!f.found)
		return 0;
	*slot = f.slot;
	return 1;
}

/* Whether the socket's record is its last pick for this Service port in the Service's
 * current generation (an unconnected UDP socket keeps that pick). */
static __always_inline int kept_pick(const struct revnat *rn, int family, const struct svc_key *key, const struct svc_value *svc)
{
	return rn->family == family && rn->svc_port == key->port && same_addr(rn->svc_addr, key->addr) && rn->backend_id == svc->backend_id &&
	       rn->slot < svc->count;
}

/* connect and sendmsg: a Service address:port becomes a backend's. Returns the hook's
 * verdict: 1 lets the call go on (translated or not ours), 0 refuses it.
 * An unconnected UDP socket runs this for every datagram, so the path of a datagram that
 * keeps its pick writes nothing it would write unchanged (no random draw, no record
 * rewrite, the affinity entry's time set in place instead of a map update). */
static __always_inline int translate(struct bpf_sock_addr *ctx, int family, int keep_pick)
{
	struct svc_key key = {};
	struct svc_value *svc;
	struct backend_key bkey = {};
	struct backend_value *be;
	struct revnat *rn;
	struct affinity_key akey = {};
	struct affinity_value *av = 0;
	__u64 now = 0;
	__u32 slot = 0;
	int sticky = 0, kept = 0;

	read_addr(ctx, family, key.addr);
	key.port = (__u16)ctx->user_port;
	key.proto = (__u8)ctx->protocol;
	key.family = family;
	svc = bpf_map_lookup_elem(&lb_services, &key);
	if (!svc)
		return 1;
	if (svc->count == 0 || (svc->flags & SVC_F_NO_BACKENDS)) {
		count(family, COUNTER_NO_BACKEND);
		/* The rules answer such a Service with a REJECT (ICMP port unreachable); the
		 * socket's equivalent is ECONNREFUSED instead of the hook's default EPERM. */
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}

	rn = bpf_sk_storage_get(&lb_revnat, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (svc->flags & SVC_F_AFFINITY) {
		now = bpf_ktime_get_coarse_ns();
		akey.netns_cookie = bpf_get_netns_cookie(ctx);
		akey.svc = key;
		av = bpf_map_lookup_elem(&lb_affinity, &akey);
		if (av)
			sticky = affinity_slot(av, svc, now, &slot);
	}
	/* An unconnected UDP socket sends each datagram through this hook: it keeps its pick
	 * while the Service's backend set is the one it picked from. */
	if (!sticky && keep_pick && rn && kept_pick(rn, family, &key, svc)) {
		slot = rn->slot;
		kept = 1;
	}
	if (!sticky && !kept)
		slot = bpf_get_prandom_u32() % svc->count;

	bkey.backend_id = svc->backend_id;
	bkey.slot = slot;
	be = bpf_map_lookup_elem(&lb_backends, &bkey);
	if (!be) {
		count(family, COUNTER_SLOT_MISSING);
		return 1;
	}
	if (svc->flags & SVC_F_AFFINITY) {
		if (sticky && av && av->backend_id == svc->backend_id && av->slot == slot) {
			/* The entry already names this backend in this generation: only its time
			 * moves (every use refreshes it, as the rules' `recent --set` does per new
			 * flow). Written in place, once per clock tick: a map update per datagram
			 * costs an LRU node and a bucket lock. */
			if (av->last_used_ns != now)
				av->last_used_ns = now;
		} else {
			struct affinity_value nv = { .last_used_ns = now, .backend_id = svc->backend_id, .slot = slot };

			__builtin_memcpy(&nv.backend, be, sizeof(nv.backend));
			bpf_map_update_elem(&lb_affinity, &akey, &nv, BPF_ANY);
		}
	}
	if (rn) {
		/* Rewritten only when it differs: a kept (or affinity-followed) pick's record
		 * can differ in the backend alone, since a generation id can be handed out
		 * again (after a restart) with other addresses in its slots. */
		int same = (kept || (kept_pick(rn, family, &key, svc) && rn->slot == slot)) && rn->be_port == be->port &&
			   same_addr(rn->be_addr, be->addr);

		if (!same) {
			__builtin_memcpy(rn->svc_addr, key.addr, sizeof(rn->svc_addr));
			__builtin_memcpy(rn->be_addr, be->addr, sizeof(rn->be_addr));
			rn->svc_port = key.port;
			rn->be_port = be->port;
			rn->backend_id = svc->backend_id;
			rn->slot = slot;
			rn->family = family;
		}
	}
	write_addr(ctx, family, be->addr, be->port);
	count(family, COUNTER_TRANSLATED);
	return 1;
}

/* recvmsg and getpeername: the backend the socket was sent to is shown as the Service
 * address it named, so the application sees the peer it used. Always returns 1 (these
 * hooks cannot refuse). */
static __always_inline int reverse(struct bpf_sock_addr *ctx, int family)
{
	struct revnat *rn;
	__u32 addr[4] = {};

	rn = bpf_sk_storage_get(&lb_revnat, ctx->sk, 0, 0);
	if (!rn || rn->family != family)
		return 1;
	read_addr(ctx, family, addr);
	if ((__u16)ctx->user_port != rn->be_port || !same_addr(addr, rn->be_addr))
		return 1;
	write_addr(ctx, family, rn->svc_addr, rn->svc_port);
	count(family, COUNTER_REVERSED);
	return 1;
}

SEC("cgroup/connect4")
int sock_connect4(struct bpf_sock_addr *ctx) { return translate(ctx, FAMILY_V4, 0); }

SEC("cgroup/connect6")
int sock_connect6(struct bpf_sock_addr *ctx) { return translate(ctx, FAMILY_V6, 0); }

SEC("cgroup/sendmsg4")
int sock_sendmsg4(struct bpf_sock_addr *ctx) { return translate(ctx, FAMILY_V4, 1); }

SEC("cgroup/sendmsg6")
int sock_sendmsg6(struct bpf_sock_addr *ctx) { return translate(ctx, FAMILY_V6, 1); }

SEC("cgroup/recvmsg4")
int sock_recvmsg4(struct bpf_sock_addr *ctx) { return reverse(ctx, FAMILY_V4); }

SEC("cgroup/recvmsg6")
int sock_recvmsg6(struct bpf_sock_addr *ctx) { return reverse(ctx, FAMILY_V6); }

SEC("cgroup/getpeername4")
int sock_getpeername4(struct bpf_sock_addr *ctx) { return reverse(ctx, FAMILY_V4); }

SEC("cgroup/getpeername6")
int sock_getpeername6(struct bpf_sock_addr *ctx) { return reverse(ctx, FAMILY_V6); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
