"""Collectives on a hierarchical network: alpha-beta costs of all-reduce, reduce-scatter,
all-gather and point-to-point for a group spread over scale-up domains.

A group of ``g`` accelerators placed with ``stride`` (Megatron order: tensor parallel
innermost, then data parallel, then pipeline) has ``k = clip(size // stride, 1, g)``
members in each scale-up domain and spans ``g / k`` domains. Collectives are
hierarchical (NCCL's tree/ring across nodes behaves the same way in bandwidth): a
reduce-scatter inside the domain, an all-reduce of ``D / k`` bytes across domains over
each accelerator's own scale-out link, an all-gather inside the domain (Thakur et al.
2005 for the ring costs; Jia et al. 2018 / Sanders et al. 2009 for the two-level form).
"""

from __future__ import annotations

import numpy as np

SCALEUP_TOPOLOGIES = ("switch", "ring", "fully_connected")
SCALEOUT_FABRICS = ("fat_tree", "rail_optimized", "ring")
SWITCH_HOP_S = 0.5e-6  # per extra switch traversal (approximate InfiniBand/Ethernet switch latency)


def exposed(comm_s, overlaps, window_s, tax):
    """Communication time a stack that ``overlaps`` (0/1 per candidate) leaves on the
    critical path when it runs it behind ``window_s`` of compute: the part that does not
    fit in the window, plus ``tax`` seconds per second overlapped (the collective's kernels
    take SMs and HBM bandwidth from the compute they run beside)."""
    hidden = np.minimum(comm_s * overlaps, window_s)
    return comm_s - (1.0 - tax) * hidden


class Network:
    """Per-candidate network arrays: scale-up domain and scale-out fabric."""

    def __init__(self, *, size, up_bw, up_lat, up_topo, out_bw, out_lat, out_fabric, eff, call_lat=0.0):
        self.size = np.maximum(size, 1)
        self.call_lat = call_lat  # fixed cost of one collective call (kernel launch, setup)
        self.up_bw, self.up_lat, self.up_topo = up_bw * eff, up_lat, up_topo
        self.out_bw, self.out_fabric = out_bw * eff, out_fabric
        # fat tree: leaf-spine-leaf (two more switch hops than a rail-aligned leaf)
        self.out_lat = out_lat + np.where(out_fabric == 0, 2 * SWITCH_HOP_S, 0.0)
        self._ring, self._full, self._oring = up_topo == 1, up_topo == 2, out_fabric == 2
        self._cache: dict = {}
        self._keep: list = []

    def split(self, g, stride):
        """Members per domain ``k``, domains spanned ``nn``, and the bandwidths the group sees
        (memoised per (g, stride) array pair: each group is costed several times)."""
        key = (id(g), id(stride))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        g1 = np.maximum(g, 1)
        st = np.maximum(stride, 1)
        k = np.minimum(np.maximum(np.floor(self.size / st), 1), g1)
        nn = np.maximum(np.floor(g1 / k), 1)
        # ring: a strided sub-group shares the physical ring's links; fully connected:
        # k members use only k-1 of the size-1 point-to-point links.
        up_bw = self.up_bw
        if self._ring.any():
            up_bw = np.where(self._ring, up_bw / np.minimum(st, self.size), up_bw)
        if self._full.any():
            up_bw = np.where(self._full, up_bw * (k - 1) / np.maximum(self.size - 1, 1), up_bw)
        out_bw, out_lat = self.out_bw, self.out_lat
        if self._oring.any():
            node_stride = np.maximum(np.floor(st * k / self.size), 1)
            out_bw = np.where(self._oring, out_bw / node_stride, out_bw)
            out_lat = np.where(self._oring, out_lat * node_stride, out_lat)
        hit = (g1, k, nn, np.maximum(up_bw, 1e-9), out_bw, out_lat)
        self._cache[key] = hit
        self._keep.append((g, stride))  # keep ids alive while cached
        return hit

    def reduce_scatter(self, nbytes, g, stride):
        """Reduce-scatter of an ``nbytes`` buffer (all-gather costs the same)."""
        g1, k, nn, up_bw, out_bw, out_lat = self.split(g, stride)
        intra = (k - 1) / k * nbytes / up_bw + (k - 1) * self.up_lat
        inter = (nn - 1) / nn * nbytes / k / out_bw + (nn - 1) * out_lat
        return intra + inter + np.where(g1 > 1, self.call_lat, 0.0)  # zero for g = 1 (k = nn = 1)

    all_gather = reduce_scatter

    def all_reduce(self, nbytes, g, stride):
        """All-reduce = reduce-scatter + all-gather (bandwidth-optimal ring, 2(g-1)/g D / B)."""
        return 2.0 * self.reduce_scatter(nbytes, g, stride)

    def p2p(self, nbytes, same_domain):
        """Point-to-point send of ``nbytes``."""
        return np.where(same_domain, nbytes / self.up_bw + self.up_lat, nbytes / self.out_bw + self.out_lat)

    def traffic(self, nbytes, g, stride, factor=2.0):
        """Bytes each accelerator sends on scale-up and scale-out links for a collective
        (factor 2 for all-reduce, 1 for reduce-scatter / all-gather)."""
        _, k, nn, *_ = self.split(g, stride)
        up = factor * (k - 1) / k * nbytes
        out = factor * (nn - 1) / nn * nbytes / k
        return up, out
