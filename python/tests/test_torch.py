"""tilejit with torch tensors and autograd, against torch fp64 reference implementations.

CPU backend: attention gradients for q, k, v (causal, document buffer, soft-capping param, GQA,
non-contiguous views), the fused loss's gradients for e and every weight and bias, torch.no_grad,
a small model composed of both, and torch.compile (opaque op). The C ABI takes no float64
tensors, so gradcheck in fp64 is replaced by f32 results against fp64 references. With CUDA:
bf16 attention and loss on a side stream, without host synchronisation from the wrapper.
Skipped as a whole when torch is not importable.
"""

from __future__ import annotations

import unittest

from support import SEED, tilejit

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the CPU-only CI has no torch
    torch = None

CUDA = torch is not None and torch.cuda.is_available() and tilejit.gpu_available()


def generator(stream: int) -> "torch.Generator":
    return torch.Generator().manual_seed(SEED * 1000 + stream)


def randn(gen, *shape, dtype=None, device="cpu", scale=1.0, grad=True):
    x = (scale * torch.randn(*shape, generator=gen, dtype=torch.float64))
    x = x.to(dtype=dtype or torch.float32, device=device)
    return x.requires_grad_(grad)


def reference_attention(q, k, v, mask, score_mod=None, scale=None):
    """fp64 attention with torch autograd (mask: bool [.., Sq, Skv], rows never empty)."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (scale if scale is not None else q.shape[-1] ** -0.5) * q @ k.transpose(-1, -2)
    if score_mod is not None:
        s = score_mod(s)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


def reference_loss(e, segments, begins, targets, reduction="mean", ignore_index=-100):
    """fp64 cross-entropy over the live ids of a segmented vocabulary."""
    logits = torch.cat([e.double() @ w.double().T + (b.double() if b is not None else 0)
                        for w, b in segments], 1)
    ids = torch.cat([b0 + torch.arange(w.shape[0]) for b0, (w, _) in zip(begins, segments)])
    kept = targets != ignore_index
    col = torch.searchsorted(ids.to(targets.device), torch.where(kept, targets, ids[0]))
    col = torch.where(kept, col, torch.full_like(col, -100))
    return F.cross_entropy(logits, col, ignore_index=-100, reduction=reduction)


def causal(sq, skv, device="cpu"):
    return torch.arange(sq, device=device)[:, None] >= torch.arange(skv, device=device)[None]


def sorted_docs(gen, batch, seq, docs):
    cuts = torch.stack([torch.randperm(seq - 1, generator=gen)[:docs - 1] + 1
                        for _ in range(batch)]).sort(1).values
    return torch.searchsorted(cuts, torch.arange(seq).expand(batch, seq).contiguous(),
                              right=True).to(torch.int32)


@unittest.skipIf(torch is None, "torch is not importable")
class TorchAttentionTest(unittest.TestCase):

    def compare(self, got, want, atol, rtol, what):
        torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol,
                                   msg=lambda m: f"{what}: {m}")

    def check_grads(self, q, k, v, program, mask, score_mod=None, buffers=None, params=None,
                    scale=None, atol=2e-5, rtol=2e-4, leaves=None):
        gen = generator(99)
        out = tilejit.attention(q, k, v, program, buffers=buffers, params=params, scale=scale)
        self.assertIsNotNone(out.grad_fn)
        d_out = torch.randn(out.shape, generator=gen).to(out)
        leaves = leaves or (q, k, v)
        grads = torch.autograd.grad(out, leaves, d_out)
        want = reference_attention(q, k, v, mask, score_mod, scale)
        want_grads = torch.autograd.grad(want, leaves, d_out.double())
        self.compare(out, want, atol, rtol, f"{program.name}: out")
        for name, g, w in zip("qkv", grads, want_grads):
            self.compare(g, w, 10 * atol, 10 * rtol, f"{program.name}: d{name}")

    def test_causal_gqa_odd_lengths(self):
        gen = generator(1)
        q = randn(gen, 2, 6, 29, 16)
        k, v = randn(gen, 2, 3, 37, 16), randn(gen, 2, 3, 37, 16)
        self.check_grads(q, k, v, tilejit.programs.causal(), causal(29, 37))

    def test_document_buffer(self):
        gen = generator(2)
        q, k, v = (randn(gen, 2, 2, 40, 8) for _ in range(3))
        doc = sorted_docs(gen, 2, 40, 3)
        mask = (doc[:, None, :, None] == doc[:, None, None, :]) & causal(40, 40)
        self.check_grads(q, k, v, tilejit.programs.document_causal(), mask,
                         buffers={"doc": doc})

    def test_softcap_param_and_scale(self):
        gen = generator(3)
        q, k, v = (randn(gen, 1, 2, 25, 16, scale=2.0) for _ in range(3))
        cap = 1.5
        self.check_grads(q, k, v, tilejit.programs.softcap_causal(), causal(25, 25),
                         lambda s: cap * torch.tanh(s / cap), params={"cap": cap}, scale=0.4)

    def test_non_contiguous_views(self):
        gen = generator(4)
        # [B, S, H, D] leaves, attended as [B, H, S, D] views; v's last dim strided.
        qb, kb = randn(gen, 2, 21, 2, 8), randn(gen, 2, 21, 2, 8)
        vb = randn(gen, 2, 21, 2, 16)
        q, k, v = qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2)[..., ::2]
        self.assertFalse(q.is_contiguous())
        self.check_grads(q, k, v, tilejit.programs.causal(), causal(21, 21),
                         leaves=(qb, kb, vb))

    def test_no_grad_and_lse(self):
        gen = generator(5)
        q, k, v = (randn(gen, 1, 2, 17, 8) for _ in range(3))
        with torch.no_grad():
            out, lse = tilejit.attention(q, k, v, tilejit.programs.causal(), return_lse=True)
        self.assertIsNone(out.grad_fn)
        self.assertFalse(out.requires_grad)
        self.assertEqual(lse.dtype, torch.float32)
        want = reference_attention(q, k, v, causal(17, 17))
        self.compare(out, want, 2e-5, 2e-4, "no_grad out")
        s = (q.double() @ k.double().transpose(-1, -2)) / 8 ** 0.5
        want_lse = torch.logsumexp(s.masked_fill(~causal(17, 17), float("-inf")), -1)
        self.compare(lse, want_lse, 2e-5, 2e-4, "lse")
        out, lse = tilejit.attention(q, k, v, tilejit.programs.causal(), return_lse=True)
        self.assertFalse(lse.requires_grad)  # lse is an output without gradient

    def test_float64_is_refused_naming_the_tensor(self):
        # No f64 in the C ABI (tj_dtype), hence no fp64 gradcheck of the library itself.
        q = torch.zeros(1, 1, 4, 8, dtype=torch.float64)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError, r"tensor 'q' has dtype float64"):
            tilejit.attention(q, q, q, tilejit.programs.causal())

    def test_torch_compile_treats_it_as_an_opaque_op(self):
        gen = generator(6)
        q, k, v = (randn(gen, 1, 2, 19, 8) for _ in range(3))
        program = tilejit.programs.causal()

        def f(q, k, v):
            return (tilejit.attention(q * 2, k, v, program) * 3).sum()

        compiled = torch.compile(f, backend="eager", fullgraph=False)
        got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
        want = torch.autograd.grad(f(q, k, v), (q, k, v))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


@unittest.skipIf(torch is None, "torch is not importable")
class TorchLossTest(unittest.TestCase):
    PROGRAM = ("loss two_heads {\n  segment base : [0, 40) weight W0\n"
               "  segment extra : [47, 60) weight W1 bias b1\n  reduction = REDUCTION\n}\n")

    def setUp(self):
        gen = generator(10)
        self.e = randn(gen, 33, 16)
        self.w0, self.w1 = randn(gen, 40, 16, scale=0.3), randn(gen, 13, 16, scale=0.3)
        self.b1 = randn(gen, 13, scale=0.5)
        ids = torch.cat([torch.arange(40), 47 + torch.arange(13)])
        self.targets = ids[torch.randint(0, 53, (33,), generator=gen)]
        self.targets[torch.randperm(33, generator=gen)[:4]] = -100

    def run_case(self, reduction, upstream=None, atol=2e-5, rtol=2e-4):
        program = tilejit.program(self.PROGRAM.replace("REDUCTION", reduction))
        leaves = (self.e, self.w0, self.w1, self.b1)
        loss = tilejit.linear_cross_entropy(self.e, [self.w0, (self.w1, self.b1)], self.targets,
                                            program, filter_threshold=0.0)
        want = reference_loss(self.e, [(self.w0, None), (self.w1, self.b1)], [0, 47],
                              self.targets, reduction)
        self.assertEqual(loss.shape, want.shape)
        torch.testing.assert_close(loss.double(), want, atol=atol, rtol=rtol)
        grad = torch.ones_like(loss) if upstream is None else upstream
        got = torch.autograd.grad(loss, leaves, grad)
        expect = torch.autograd.grad(want, leaves, grad.double())
        for name, g, w in zip(("e", "W0", "W1", "b1"), got, expect):
            self.assertEqual(g.dtype, torch.float32)
            torch.testing.assert_close(g.double(), w.double(), atol=atol, rtol=rtol,
                                       msg=lambda m: f"d{name}: {m}")

    def test_mean(self):
        self.run_case("mean")

    def test_sum_with_int32_targets(self):
        self.targets = self.targets.to(torch.int32)
        self.run_case("sum", torch.tensor(0.7))

    def test_none_with_row_gradients(self):
        self.run_case("none", torch.randn(33, generator=generator(11)))

    def test_rows_and_no_grad(self):
        program = tilejit.program(self.PROGRAM.replace("REDUCTION", "mean"))
        with torch.no_grad():
            loss, rows, lse = tilejit.linear_cross_entropy(
                self.e, [self.w0, (self.w1, self.b1)], self.targets, program, return_rows=True)
        self.assertIsNone(loss.grad_fn)
        want_rows = reference_loss(self.e, [(self.w0, None), (self.w1, self.b1)], [0, 47],
                                   self.targets, "none")
        torch.testing.assert_close(rows.double(), want_rows, atol=2e-5, rtol=2e-4)
        self.assertEqual(lse.shape, (33,))

    def test_frozen_weights_get_no_gradient(self):
        program = tilejit.program(self.PROGRAM.replace("REDUCTION", "mean"))
        w0 = self.w0.detach()
        loss = tilejit.linear_cross_entropy(self.e, [w0, (self.w1, self.b1)], self.targets,
                                            program)
        loss.backward()
        self.assertIsNone(w0.grad)
        self.assertIsNotNone(self.e.grad)
        self.assertIsNotNone(self.b1.grad)


@unittest.skipIf(torch is None, "torch is not importable")
class TorchModelTest(unittest.TestCase):
    """Embedding -> attention with a document mask -> fused two-segment loss: every parameter's
    gradient against the same model in fp64 pure torch."""

    def test_model_gradients(self):
        gen = generator(20)
        B, S, H, D, E = 2, 24, 2, 8, 16
        vocab = 30
        emb = randn(gen, vocab, E, scale=0.5)
        w_qkv = randn(gen, 3 * H * D, E, scale=0.3)
        w_o = randn(gen, E, H * D, scale=0.3)
        heads = [randn(gen, 20, E, scale=0.3), randn(gen, 6, E, scale=0.3)]
        bias = randn(gen, 6, scale=0.1)
        tokens = torch.randint(0, vocab, (B, S), generator=gen)
        targets = torch.randint(0, 26, (B * S,), generator=gen)
        targets = torch.where(targets >= 20, targets + 4, targets)  # ids 20..23 are dead
        doc = sorted_docs(gen, B, S, 3)
        params = (emb, w_qkv, w_o, heads[0], heads[1], bias)
        attention_prog = tilejit.programs.document_causal()
        loss_prog = tilejit.program("loss head {\n  segment base : [0, 20) weight W\n"
                                    "  segment extra : [24, 30) weight X bias c\n}\n")

        def step(attend, loss_fn, dtype):
            x = emb.to(dtype)[tokens]
            qkv = (x @ w_qkv.to(dtype).T).view(B, S, 3, H, D)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, S, D] views
            o = attend(q, k, v).transpose(1, 2).reshape(B, S, H * D)
            h = x + o @ w_o.to(dtype).T
            return loss_fn(h.reshape(B * S, E))

        mask = (doc[:, None, :, None] == doc[:, None, None, :]) & causal(S, S)
        loss = step(lambda q, k, v: tilejit.attention(q, k, v, attention_prog,
                                                      buffers={"doc": doc}),
                    lambda h: tilejit.linear_cross_entropy(h, [heads[0], (heads[1], bias)],
                                                           targets, loss_prog),
                    torch.float32)
        want = step(lambda q, k, v: reference_attention(q, k, v, mask),
                    lambda h: reference_loss(h, [(heads[0], None), (heads[1], bias)], [0, 24],
                                             targets),
                    torch.float64)
        torch.testing.assert_close(loss.double(), want, atol=1e-5, rtol=1e-4)
        got, expect = torch.autograd.grad(loss, params), torch.autograd.grad(want, params)
        for i, (g, w) in enumerate(zip(got, expect)):
            torch.testing.assert_close(g.double(), w.double(), atol=5e-5, rtol=5e-4,
                                       msg=lambda m: f"parameter {i}: {m}")


@unittest.skipIf(not CUDA, "no CUDA device for torch and tilejit")
class TorchCudaTest(unittest.TestCase):
    """bf16 on the GPU, on a side stream, with torch's sync debug mode set to error: the
    wrapper itself never synchronises the host."""

    def test_attention_bf16_on_a_side_stream(self):
        gen = generator(30)
        for dim in (64, 128):
            q, k, v = (randn(gen, 2, 4, 200, dim, dtype=torch.bfloat16, device="cuda")
                       for _ in range(3))
            doc = sorted_docs(gen, 2, 200, 3).cuda()
            d_out = torch.randn(q.shape, generator=gen).to(q)
            program = tilejit.programs.document_causal()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                torch.cuda.set_sync_debug_mode("error")
                try:
                    out = tilejit.attention(q, k, v, program, buffers={"doc": doc})
                    grads = torch.autograd.grad(out, (q, k, v), d_out)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            stream.synchronize()
            self.assertEqual((out.dtype, out.device), (torch.bfloat16, q.device))
            mask = (doc[:, None, :, None] == doc[:, None, None, :]) & causal(200, 200, "cuda")
            want = reference_attention(q, k, v, mask)
            want_grads = torch.autograd.grad(want, (q, k, v), d_out.double())
            torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=2e-2)
            for g, w in zip(grads, want_grads):
                self.assertEqual(g.dtype, torch.bfloat16)
                torch.testing.assert_close(g.double(), w.double(), atol=5e-2, rtol=5e-2)

    def test_loss_bf16(self):
        gen = generator(31)
        e = randn(gen, 256, 64, dtype=torch.bfloat16, device="cuda")
        w0 = randn(gen, 1000, 64, dtype=torch.bfloat16, device="cuda", scale=0.1)
        w1 = randn(gen, 72, 64, dtype=torch.bfloat16, device="cuda", scale=0.1)
        ids = torch.cat([torch.arange(1000), 1010 + torch.arange(72)]).cuda()
        targets = ids[torch.randint(0, 1072, (256,), generator=gen).cuda()]  # int64: converted
        program = tilejit.program("loss two {\n  segment a : [0, 1000) weight A\n"
                                  "  segment b : [1010, 1082) weight B\n}\n")
        loss = tilejit.linear_cross_entropy(e, [w0, w1], targets, program, filter_threshold=0.0)
        want = reference_loss(e, [(w0, None), (w1, None)], [0, 1010], targets)
        torch.testing.assert_close(loss.double(), want, atol=2e-2, rtol=1e-2)
        got = torch.autograd.grad(loss, (e, w0, w1))
        expect = torch.autograd.grad(want, (e, w0, w1))
        for g, w in zip(got, expect):
            self.assertEqual(g.dtype, torch.bfloat16)
            torch.testing.assert_close(g.double(), w.double(), atol=2e-3, rtol=5e-2)


if __name__ == "__main__":
    unittest.main()
