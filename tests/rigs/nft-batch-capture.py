#!/usr/bin/env python3
"""nft-batch-capture.py: the nf_tables batch `nft -f FILE` sends, one message a line:
TYPE FLAGS(without NLM_F_ACK) FAMILY PAYLOAD-AFTER-NFGENMSG-IN-HEX (sequence numbers left out),
read from strace's hex dump of nft's writes to its netlink socket (no nlmon needed). Runs
nft inside the network namespace NETNS (create it first: `ip netns add NETNS`; the text
is applied there). This is where src/nftables/wire/testdata/nft106-*.txt came from.

    tests/rigs/nft-batch-capture.py NETNS FILE      # what nft sends
    tests/rigs/nft-batch-capture.py --bin BATCH     # the same print of a batch's bytes
"""
import re, subprocess, sys, struct, tempfile, os

def msgs(buf):
    off = 0
    while off + 16 <= len(buf):
        ln, typ, flags, seq, pid = struct.unpack_from('=IHHII', buf, off)
        if ln < 16: break
        body = buf[off+16:off+ln]
        if typ >> 8 == 10:
            yield (typ & 0xff, flags, body[0], body[4:].hex())
        off += (ln + 3) & ~3

def from_strace(ns, path):
    out = tempfile.mktemp()
    subprocess.run(['ip','netns','exec',ns,'strace','-e','trace=sendmsg','-e','write=3','-o',out,'nft','-f',path], check=True)
    data = bytearray(); cur = None; bufs = []
    for line in open(out):
        if line.startswith('sendmsg('):
            if cur is not None: bufs.append(cur)
            cur = bytearray()
        m = re.match(r'\s*\| [0-9a-f]{5}  (.{49})', line)
        if m and cur is not None:
            hexes = m.group(1).split()
            cur.extend(bytes(int(h,16) for h in hexes[:16]))
    if cur is not None: bufs.append(cur)
    os.unlink(out)
    # the batch: the one with a BATCH_BEGIN
    res = []
    for b in bufs:
        if len(b) >= 6 and struct.unpack_from('=H', b, 4)[0] == 0x10:
            res.extend(msgs(bytes(b)))
    return res

if sys.argv[1] == '--bin':
    res = list(msgs(open(sys.argv[2],'rb').read()))
else:
    res = from_strace(sys.argv[1], sys.argv[2])
for t, f, fam, h in res:
    print(t, hex(f & ~0x4), fam, h)
