"""Collectives on a hierarchical network: alpha-beta costs of all-reduce, reduce-scatter,
all-gather and point-to-point for a group spread over scale-up domains.

A group of ``g`` accelerators placed with ``stride`` (Megatron order: tensor parallel
innermost, then data parallel, then pipeline) has ``k = clip(size // stride, 1, g)``
members in each scale-up domain and spans ``g / k`` domains. Collectives are
hierarchical (NCCL's tree/ring across nodes behaves the same way in bandwidth): a
reduce-scatter inside the domain, an all-reduce of ``D / k`` bytes across domains over
each accelerator's own scale-out link, an all-gather inside the domain (Thakur et al.
2005 for the ring costs; Jia et al. 2018 / Sanders et al. 2009 for the two-level form).

Scale-up topologies: a switch (NVSwitch: every member at the full per-accelerator
bandwidth), a ring, a fully connected mesh (AMD Infinity Fabric: one link per peer) and
the 2-D and 3-D tori of TPU pods (ICI: 4 or 6 links per chip, wraparound assumed). A
group on a torus occupies ``d`` of its ``D`` axes (as many as ``k`` members need, axes of
``size^(1/D)`` chips); a ring collective along each used axis in both directions uses
``2 d`` of the ``2 D`` links, so ``d / D`` of the chip's bandwidth, and takes
``d (k^(1/d) - 1)`` steps (jax-ml scaling-book, "How to think about TPUs" and its
collectives chapter). The all-to-all of mixture-of-experts dispatch is bisection-bound on
a ring or torus: a ``d``-dimensional torus of side ``n`` moves ``k V / 4`` bytes across a
cut of ``2 n^(d-1)`` links each way, so it takes ``n V D / (4 B)`` for per-chip bandwidth
``B`` (``k V / (4 B)`` on a ring); on a switch it takes ``V (k-1) / (k B)``.
"""

from __future__ import annotations

import numpy as np

from dse.analytic.rows import once, where

SCALEUP_TOPOLOGIES = ("switch", "ring", "fully_connected", "torus_2d", "torus_3d")
SCALEOUT_FABRICS = ("fat_tree", "rail_optimized", "ring")
#: context-parallel attention: ring (keys and values passed around the ranks behind the
#: attention blocks; Megatron-Core / Transformer Engine) or all-gather (gathered before the
#: attention, exposed; Llama 3, Dubey et al. 2024, section 3.3.2)
CP_ALGORITHMS = ("ring", "all_gather")
#: mixture-of-experts token dispatch: every token-expert copy sent to its expert's rank
#: (Megatron-Core's alltoall dispatcher), or one copy per destination domain over the
#: fabric, forwarded inside the domain (DeepEP; DeepSeek-V3 report, section 3.2.2)
MOE_DISPATCHERS = ("alltoall", "deepep")
SWITCH_HOP_S = 0.5e-6  # per extra switch traversal (approximate InfiniBand/Ethernet switch latency)


def exposed(comm_s, overlaps, window_s, tax):
    """Communication time a stack that ``overlaps`` (0/1 per candidate) leaves on the
    critical path when it runs it behind ``window_s`` of compute: the part that does not
    fit in the window, plus ``tax`` seconds per second overlapped (the collective's kernels
    take SMs and HBM bandwidth from the compute they run beside)."""
    hidden = np.minimum(comm_s * overlaps, window_s)
    return comm_s - kept_share(tax) * hidden


def kept_share(tax):
    """``1 - tax``, the share of overlapped time a collective leaves off the critical path;
    one value for every row (a part's catalog tax in a block of one part) stays one (no
    per-row subtraction at each of the step's ~16 overlapped terms: :func:`~dse.analytic.rows.once`)."""
    return once(np.subtract, 1.0, tax)


def exposed_in(comm_s, overlaps, window_s, tax):
    """:func:`exposed` for traffic that shares its window with other overlapped traffic:
    ``(exposed time, window left)``. What one collective hides behind the window is no
    longer there for the next (the same kernels cannot hide two collectives' time twice:
    they share the links and the SMs that drive them)."""
    hidden = np.minimum(comm_s * overlaps, window_s)
    return comm_s - kept_share(tax) * hidden, window_s - hidden


class Network:
    """Per-candidate network arrays: scale-up domain and scale-out fabric."""

    def __init__(
        self, *, size, up_bw, up_lat, up_topo, out_bw, out_lat, out_fabric, eff, call_lat=0.0
    ):
        self.size = np.maximum(size, 1)
        self.call_lat = call_lat  # fixed cost of one collective call (kernel launch, setup)
        self.up_bw, self.up_lat, self.up_topo = up_bw * eff, up_lat, up_topo
        self.out_bw, self.out_fabric = out_bw * eff, out_fabric
        # fat tree: leaf-spine-leaf (two more switch hops than a rail-aligned leaf)
        self.out_lat = out_lat + where(out_fabric == 0, 2 * SWITCH_HOP_S, 0.0)
        self._ring, self._full, self._oring = up_topo == 1, up_topo == 2, out_fabric == 2
        self._axes = where(up_topo == 3, 2.0, where(up_topo == 4, 3.0, 0.0))  # torus axes (0: none)
        self._torus = self._axes > 0
        self._groups: dict = {}  # (id(g), id(stride)) -> _Group: split

    def map_arrays(self, fn) -> Network:
        """The network with ``fn`` applied to each of its per-candidate arrays (e.g. picking
        some candidates' rows; nothing memoised)."""
        out = object.__new__(Network)
        for name, value in vars(self).items():
            if name != "_groups":
                out.__dict__[name] = fn(value) if np.ndim(value) else value
        out._groups = {}
        return out

    def split(self, g, stride):
        """Members per domain ``k``, domains spanned ``nn``, and the bandwidths the group sees
        (memoised per (g, stride) array pair: each group is costed several times), the ring's
        latency and one call's fixed cost."""
        return self._group(g, stride).split

    def _group(self, g, stride) -> _Group:
        """The memo of the group ``(g, stride)`` (arrays, or numbers): found by the two
        objects' ids, and only where it holds those very objects. It holds them for as long
        as it is kept (the network's life), so neither can be freed and its id taken by
        another object meanwhile."""
        key = (id(g), id(stride))
        group = self._groups.get(key)
        if group is not None and group.g is g and group.stride is stride:
            return group
        g1 = np.maximum(g, 1)
        st = np.maximum(stride, 1)
        k = np.minimum(np.maximum(np.floor(self.size / st), 1), g1)
        nn = np.maximum(np.floor(g1 / k), 1)
        # ring: a strided sub-group shares the physical ring's links; fully connected:
        # k members use only k-1 of the size-1 point-to-point links.
        up_bw = self.up_bw
        # members and domains less one (the ring's steps, the shares, the traffic): once
        k1, nn1 = k - 1.0, nn - 1.0
        steps = k1  # ring steps inside the domain
        if self._ring.any():
            up_bw = where(self._ring, up_bw / np.minimum(st, self.size), up_bw)
        if self._full.any():
            up_bw = where(self._full, up_bw * k1 / np.maximum(self.size - 1, 1), up_bw)
        if self._torus.any():
            d = self.torus_axes_used(k)
            up_bw = where(self._torus, up_bw * d / np.maximum(self._axes, 1.0), up_bw)
            steps = where(self._torus, d * (k ** (1.0 / d) - 1.0), steps)
        out_bw, out_lat = self.out_bw, self.out_lat
        if self._oring.any():
            node_stride = np.maximum(np.floor(st * k / self.size), 1)
            out_bw = where(self._oring, out_bw / node_stride, out_bw)
            out_lat = where(self._oring, out_lat * node_stride, out_lat)
        # NCCL's ring latency (see ring_latency): g - nn steps in the domains, nn - 1 across
        intra_steps = where(self._torus, steps, g1 - nn) if self._torus.any() else g1 - nn
        call = where(g1 > 1, self.call_lat, 0.0)  # one call's fixed cost (none for g = 1)
        ring_lat = intra_steps * self.up_lat + nn1 * out_lat + call
        split = (g1, k, nn, np.maximum(up_bw, 1e-9), out_bw, out_lat, steps, ring_lat, call)
        group = _Group(g, stride, split, k1, nn1)
        self._groups[key] = group
        return group

    def _transfer(self, nbytes, g, stride):
        """Bandwidth time of a reduce-scatter (all-gather) of ``nbytes``: the ``(k-1)/k``
        share inside the domain, the ``(nn-1)/nn`` share of a member's ``1/k`` across it."""
        group = self._group(g, stride)
        _, k, nn, up_bw, out_bw, *_ = group.split
        shares = group.shares
        if shares is None:
            shares = group.shares = (group.k1 / k, group.nn1 / nn)
        return shares[0] * nbytes / up_bw + shares[1] * nbytes / k / out_bw

    def ring_latency(self, g, stride):
        """Latency of one ring reduce-scatter or all-gather call over ``g`` members (NCCL's
        tuning model, ``src/graph/tuning.cc``: ``nRanks - 1`` steps, ``nNodes - 1`` of them
        across nodes): ``g - nn`` steps in the domains at ``up_lat``, ``nn - 1`` across at
        ``out_lat`` (a torus: its axis steps), plus the call's fixed cost (0 for g = 1)."""
        return self.split(g, stride)[7]

    def reduce_scatter(self, nbytes, g, stride):
        """Reduce-scatter of an ``nbytes`` buffer (all-gather costs the same): bandwidth-
        optimal transfer plus the ring's latency (:meth:`ring_latency`)."""
        return self._transfer(nbytes, g, stride) + self.split(g, stride)[7]

    all_gather = reduce_scatter

    def all_reduce(self, nbytes, g, stride):
        """All-reduce = reduce-scatter + all-gather in bandwidth (2(g-1)/g D / B); latency the
        lower of NCCL's two algorithms: the ring's ``2 (g - 1)`` steps, or the double binary
        tree's ``2 ((k-1) up_lat + log2(nn) out_lat)`` (NCCL >= 2.4 picks by its predicted time;
        ``src/graph/tuning.cc``), plus one call. Inside one domain both are ``2 (k-1)`` steps."""
        _, _, nn, _, _, out_lat, steps, ring_lat, call = self.split(g, stride)
        lat = 2.0 * ring_lat - call
        if bool((nn > 1).any()):
            lat = np.minimum(lat, 2.0 * (steps * self.up_lat + np.log2(nn) * out_lat) + call)
        return 2.0 * self._transfer(nbytes, g, stride) + lat

    def p2p(self, nbytes, same_domain):
        """Point-to-point send of ``nbytes``."""
        return where(
            same_domain, nbytes / self.up_bw + self.up_lat, nbytes / self.out_bw + self.out_lat
        )

    def traffic(self, nbytes, g, stride, factor=2.0):
        """Bytes each accelerator sends on scale-up and scale-out links for a collective
        (factor 2 for all-reduce, 1 for reduce-scatter / all-gather)."""
        group = self._group(g, stride)
        _, k, nn, *_ = group.split
        up = factor * group.k1 / k * nbytes
        out = factor * group.nn1 / nn * nbytes / k
        return up, out

    def torus_axes_used(self, k):
        """Axes ``d`` a group of ``k`` members occupies on the torus: as many as it needs,
        axes of ``size^(1/D)`` chips (1 where the topology is not a torus)."""
        axes = np.maximum(self._axes, 1.0)
        side = np.maximum(self.size ** (1.0 / axes), 2.0)
        return np.clip(np.ceil(np.log(np.maximum(k, 1.0)) / np.log(side) - 1e-9), 1.0, axes)

    def all_to_all(self, nbytes, g, stride, intra_share=None, inter_share=None):
        """All-to-all in which each of ``g`` members sends ``nbytes`` in all (``1/g`` to every
        member, itself included), as mixture-of-experts dispatch and combine do.

        Inside the domain the ``(k-1)/g`` share moves at the topology's all-to-all rate
        (switch: ``V (k-1)/(g B)``; fully connected: one link per peer; ring ``k V/(4 B)``
        and torus ``k^(1/d) V D/(4 B)``: bisection-bound, see the module docstring); the
        ``(g-k)/g`` share crosses the scale-out fabric at the accelerator's own link. NCCL
        posts every send at once, so the two fabrics work concurrently and the slower
        sets the time; plus one call, one step latency in the domain and one across.
        ``intra_share`` / ``inter_share`` replace the two shares (a dispatcher that sends
        one copy per destination domain and forwards it inside, :mod:`.experts`)."""
        g1, k, nn, up_bw, out_bw, out_lat, *_, call = self.split(g, stride)
        intra_share = (k - 1.0) / g1 if intra_share is None else intra_share
        inter_share = (g1 - k) / g1 if inter_share is None else inter_share
        intra = intra_share * nbytes / up_bw
        if self._ring.any() or self._torus.any():
            d = self.torus_axes_used(k)
            side = k ** (1.0 / d)
            # bisection-bound rate, on the full per-accelerator bandwidth (not the strided share)
            rate = where(self._torus, side * np.maximum(self._axes, 1.0) / 4.0, k / 4.0)
            bisect = nbytes * rate / np.maximum(self.up_bw, 1e-9)
            intra = where((self._ring | self._torus) & (k > 1), np.maximum(intra, bisect), intra)
        inter = inter_share * nbytes / out_bw
        lat = where(k > 1, self.up_lat, 0.0) + where(nn > 1, out_lat, 0.0)
        return np.maximum(intra, inter) + lat + call

    def all_to_all_traffic(self, nbytes, g, stride, intra_share=None, inter_share=None):
        """Bytes each member sends on scale-up and scale-out links in :meth:`all_to_all`."""
        g1, k, *_ = self.split(g, stride)
        intra_share = (k - 1.0) / g1 if intra_share is None else intra_share
        inter_share = (g1 - k) / g1 if inter_share is None else inter_share
        return intra_share * nbytes, inter_share * nbytes


class _Group:
    """What :class:`Network` memoises of one group ``(g, stride)``: the objects themselves
    (the key's ids stay theirs while this is kept), :meth:`Network.split`'s tuple, the
    members and domains less one (``k - 1``, ``nn - 1``) and the two shares of
    :meth:`Network._transfer` (made at its first call)."""

    __slots__ = ("g", "stride", "split", "k1", "nn1", "shares")

    def __init__(self, g, stride, split: tuple, k1, nn1) -> None:
        self.g, self.stride, self.split = g, stride, split
        self.k1, self.nn1 = k1, nn1
        self.shares: tuple | None = None
