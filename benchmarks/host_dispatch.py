"""Host (CPU) time to dispatch one transformer layer's operations in eager PyTorch.

``python benchmarks/host_dispatch.py`` (needs torch: ``pip install -e ".[gp]"``) runs a
GPT layer written the way Megatron-LM writes it at tensor-parallel degree 1 (layer norm,
QKV linear, view/split/reshape, baddbmm scores, masked softmax, dropout, bmm, permute +
contiguous, projection with its bias kept apart, a scripted bias-dropout-add, layer norm,
two MLP linears with a scripted bias-GeLU, bias-dropout-add) on tiny tensors, so that the
time is the host's: Python, the dispatcher, autograd. It prints the time per layer and
micro-batch with full activation recomputation (reentrant checkpointing: forward,
recomputed forward, backward) and without, and per pass (the model's ``host_dispatch_us``
counts four passes with full recomputation, three without: docs/model.md, section 6).

On a machine without a GPU the operations run on the CPU: the figure leaves out each
kernel's CUDA launch and the CUDA caching allocator, and is measured with a newer Python
and PyTorch than the fitted runs used; it is the lower end of the prior in
``benchmarks/fit_calibration.py``. On a GPU (``--device cuda``) it is the real dispatch
time as long as the tiny kernels finish before the next is launched.
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def build(torch, hidden: int, heads: int):
    """A Megatron-style GPT layer class (module names as in Megatron-LM)."""
    nn, F = torch.nn, torch.nn.functional

    @torch.jit.script
    def bias_gelu(bias, y):
        x = bias + y
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @torch.jit.script
    def bias_dropout_add(x, bias, residual, prob: float):
        return residual + torch.nn.functional.dropout(x + bias, p=prob, training=True)

    class Linear(nn.Module):
        def __init__(self, n_in, n_out, skip_bias_add):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.02)
            self.bias = nn.Parameter(torch.zeros(n_out))
            self.skip_bias_add = skip_bias_add

        def forward(self, x):
            if self.skip_bias_add:
                return F.linear(x, self.weight), self.bias
            return F.linear(x, self.weight, self.bias), None

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.head_dim = hidden // heads
            self.query_key_value = Linear(hidden, 3 * hidden, False)
            self.dense = Linear(hidden, hidden, True)

        def forward(self, x, mask):
            s, b = x.shape[0], x.shape[1]
            mixed, _ = self.query_key_value(x)
            q, k, v = torch.split(mixed.view(s, b, heads, 3 * self.head_dim), self.head_dim, dim=-1)
            q, k = q.reshape(s, b * heads, -1), k.reshape(s, b * heads, -1)
            scores = torch.empty(b * heads, s, s, dtype=x.dtype, device=x.device)
            scores = torch.baddbmm(
                scores,
                q.transpose(0, 1),
                k.transpose(0, 1).transpose(1, 2),
                beta=0.0,
                alpha=1.0 / math.sqrt(self.head_dim),
            )
            probs = torch.softmax(scores.view(b, heads, s, s).masked_fill(mask, -10000.0), dim=-1)
            probs = F.dropout(probs, 0.1, training=True).view(b * heads, s, s)
            context = torch.bmm(probs, v.reshape(s, b * heads, -1).transpose(0, 1))
            context = context.view(b, heads, s, self.head_dim).permute(2, 0, 1, 3).contiguous()
            return self.dense(context.view(s, b, hidden))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense_h_to_4h = Linear(hidden, 4 * hidden, True)
            self.dense_4h_to_h = Linear(4 * hidden, hidden, True)

        def forward(self, x):
            y, bias = self.dense_h_to_4h(x)
            return self.dense_4h_to_h(bias_gelu(bias, y))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = (
                nn.LayerNorm(hidden),
                nn.LayerNorm(hidden),
            )
            self.self_attention, self.mlp = Attention(), MLP()

        def forward(self, x, mask):
            out, bias = self.self_attention(self.input_layernorm(x), mask)
            x = bias_dropout_add(out, bias.expand_as(x), x, 0.1)
            out, bias = self.mlp(self.post_attention_layernorm(x))
            return bias_dropout_add(out, bias.expand_as(x), x, 0.1)

    return Layer


def per_layer_s(torch, device: str, recompute: bool, layers: int = 24, iters: int = 30) -> float:
    """Best-of-3 time per layer and micro-batch (forward + backward, recomputed or not)."""
    from torch.utils.checkpoint import checkpoint

    hidden, heads, seq = 64, 4, 16  # tiny: the host's time, not the kernels'
    Layer = build(torch, hidden, heads)
    stack = torch.nn.ModuleList([Layer() for _ in range(layers)]).to(device)
    x0 = torch.randn(seq, 1, hidden, device=device, requires_grad=True)
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=device), 1)

    def step():
        x = x0
        for layer in stack:
            x = checkpoint(layer, x, mask, use_reentrant=True) if recompute else layer(x, mask)
        x.sum().backward()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(5):
        step()
    best = math.inf
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best / layers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print('host_dispatch.py needs torch: pip install -e ".[gp]"', file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    full = per_layer_s(torch, args.device, recompute=True)
    none = per_layer_s(torch, args.device, recompute=False)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, device {args.device}")
    print("| recomputation | per layer and micro-batch | passes | per pass |")
    print("|---|---:|---:|---:|")
    print(f"| full | {full * 1e6:.0f} us | 4 | {full / 4 * 1e6:.0f} us |")
    print(f"| none | {none * 1e6:.0f} us | 3 | {none / 3 * 1e6:.0f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
