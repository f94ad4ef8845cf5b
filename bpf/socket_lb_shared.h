// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * What bpf/socket_lb.c (which writes it) and bpf/sock_destroy.c (which reads it) share:
 * the families' numbers and each socket's record of its last translation, `lb_revnat`,
 * one map through its pin. Included after <linux/bpf.h> and <bpf/bpf_helpers.h>.
 */
#ifndef SVCPROXY_SOCKET_LB_SHARED_H
#define SVCPROXY_SOCKET_LB_SHARED_H

#define FAMILY_V4 4
#define FAMILY_V6 6

/* Per socket: the last translation, for the reverse direction (recvmsg, getpeername), so
 * that an unconnected UDP socket keeps its backend while the Service is unchanged, and so
 * that the socket of a removed backend is found. */
struct revnat {
	__u32 svc_addr[4];
	__u32 be_addr[4];
	__u16 svc_port;
	__u16 be_port;
	__u32 backend_id;
	__u32 slot;
	__u8 family;
	__u8 pad[3];
};

_Static_assert(sizeof(struct revnat) == 48, "revnat layout is shared with maps.rs");
_Static_assert(__builtin_offsetof(struct revnat, svc_port) == 32, "revnat.svc_port");
_Static_assert(__builtin_offsetof(struct revnat, family) == 44, "revnat.family");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct revnat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_revnat SEC(".maps");

#endif
