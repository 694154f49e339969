"""tilejit with torch tensors and autograd on the CPU backend, against torch fp64 reference
implementations (torch_reference.py).

Attention gradients for q, k, v (causal, document buffer, soft-capping param, GQA, non-contiguous
views), the fused loss's gradients for e and every weight and bias, torch.no_grad, a small model
composed of both, torch.compile (opaque op), and torch.autograd.gradcheck of both backwards. The
C ABI takes no float64 tensors (and the CPU backend computes in f32), so gradcheck runs in
float32 on tiny shapes with a step and tolerances sized for f32, beside the f32 results against
fp64 references. The CUDA tests are in test_torch_cuda.py. Skipped as a whole when torch is not
importable.
"""

from __future__ import annotations

import unittest
import warnings

from support import tilejit

try:
    import torch
except ImportError:  # the CPU-only CI has no torch
    torch = None

if torch is not None:
    from torch_reference import (brute_force_tile_counts, causal, document_causal_mask,
                                 generator, randn, reference_attention, reference_loss,
                                 reference_loss_terms, sorted_docs)


class _DlpackOnly:
    """A tensor seen only through DLPack (its capsule), as a library tilejit does not know."""

    def __init__(self, tensor) -> None:
        self._tensor = tensor

    def __dlpack__(self, **kwargs):
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


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

    def test_block_mask_counts_against_brute_force(self):
        # The CPU analysis with the tiles the CUDA tests use; brute force counts the dense mask.
        gen = generator(7)
        doc = sorted_docs(gen, 2, 700, 4)
        mask = tilejit.block_mask(tilejit.programs.doc_softcap(), 2, 4, 700, 700,
                                  buffers={"doc": doc}, params={"cap": 5.0})
        shape = mask.shape
        self.assertEqual((shape.batch, shape.heads, shape.block_q, shape.block_kv),
                         (2, 1, 128, 64))
        want = brute_force_tile_counts(document_causal_mask(doc), shape.block_q, shape.block_kv)
        self.assertEqual(tuple(mask.counts), want)

    def test_tensors_are_described_as_their_dlpack_capsules_describe_them(self):
        # Plain tensors are read from their own attributes (no capsule); the description must be
        # the capsule's: pointer (storage offset included), shape, strides, dtype and device.
        from tilejit import _dlpack
        gen = generator(7)
        base = randn(gen, 3, 4, 10, 8).detach()
        cases = {
            "contiguous": base,
            "permuted": base.transpose(1, 2),
            "offset slice": base[1:, :, 3:7, ::2],
            "expanded": randn(gen, 1, 4, 1, 8).detach().expand(3, 4, 5, 8),
            "bf16": base.to(torch.bfloat16),
            "f16": base.to(torch.float16),
            "int32": torch.arange(12, dtype=torch.int32).reshape(3, 4)[:, 1:],
            "int64": torch.arange(6, dtype=torch.int64),
            "uint8": torch.zeros(5, dtype=torch.uint8),
            "bool": torch.ones(2, 3, dtype=torch.bool),
            "parameter": torch.nn.Parameter(base.clone(), requires_grad=False),
            "0-d": torch.tensor(2.5),
            "empty": torch.zeros(0, 4),
        }
        for what, t in cases.items():
            fast = _dlpack.Exported(t, "x")
            self.assertEqual(fast.capsule_name, b"", what)  # the fast path was taken
            slow = _dlpack.Exported(_DlpackOnly(t), "x")
            self.assertNotEqual(slow.capsule_name, b"", what)
            got = (fast.data_pointer, fast.shape, fast.strides, fast.dtype, fast.device,
                   fast.dtype_label)
            want = (slow.data_pointer, slow.shape, slow.strides, slow.dtype, slow.device,
                    slow.dtype_label)
            if t.numel() == 0:  # no memory: only the description is compared
                got, want = got[1:], want[1:]
            self.assertEqual(got, want, what)
        # What the fast path does not take goes through DLPack and its errors.
        with self.assertRaisesRegex(tilejit.InvalidArgumentError, r"tensor 'x' has dtype"):
            _dlpack.Exported(torch.zeros(2, dtype=torch.complex64), "x")

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

    def test_softcap_smoothing_z_loss_rows_and_lse(self):
        # The same terms the CUDA tests check in bf16, here in f32 on the CPU backend.
        program = tilejit.program(
            "loss terms {\n  param cap : f32\n  segment base : [0, 40) weight W0\n"
            "  segment extra : [47, 60) weight W1 bias b1\n  logit = cap * tanh(logit / cap)\n"
            "  label_smoothing = 0.1\n  z_loss = 0.001\n}\n")
        leaves = (self.e, self.w0, self.w1, self.b1)
        loss, rows, lse = tilejit.linear_cross_entropy(
            self.e, [self.w0, (self.w1, self.b1)], self.targets, program, params={"cap": 3.0},
            filter_threshold=0.0, return_rows=True)
        want, want_rows, want_lse = reference_loss_terms(
            self.e, [(self.w0, None), (self.w1, self.b1)], [0, 47], self.targets, cap=3.0,
            smoothing=0.1, z_loss=0.001)
        for what, got, ref in (("loss", loss, want), ("rows", rows, want_rows),
                               ("lse", lse, want_lse)):
            torch.testing.assert_close(got.double(), ref.detach(), atol=2e-5, rtol=2e-4,
                                       msg=lambda m: f"{what}: {m}")
        for name, g, w in zip(("e", "W0", "W1", "b1"), torch.autograd.grad(loss, leaves),
                              torch.autograd.grad(want, leaves)):
            torch.testing.assert_close(g.double(), w.double(), atol=2e-5, rtol=2e-4,
                                       msg=lambda m: f"d{name}: {m}")

    def test_weights_bound_by_name_get_gradients_from_backward(self):
        # Segments left out of `segments` come from the buffers by the program's names; the
        # backward follows the program's layout and returns every segment's gradients.
        program = tilejit.program(self.PROGRAM.replace("REDUCTION", "sum"))
        e, w0, w1, b1 = (x.detach() for x in (self.e, self.w0, self.w1, self.b1))
        run = tilejit.linear_cross_entropy_forward(
            e, [], self.targets, program, buffers={"W0": w0, "W1": w1, "b1": b1},
            filter_threshold=0.0)
        d_e, [(d_w0, d_b0), (d_w1, d_b1)] = run.backward()
        self.assertIsNone(d_b0)
        leaves = [x.clone().requires_grad_() for x in (e, w0, w1, b1)]
        want = reference_loss(leaves[0], [(leaves[1], None), (leaves[2], leaves[3])], [0, 47],
                              self.targets, "sum")
        for name, g, w in zip(("e", "W0", "W1", "b1"), (d_e, d_w0, d_w1, d_b1),
                              torch.autograd.grad(want, leaves)):
            torch.testing.assert_close(g.double(), w.double(), atol=2e-5, rtol=2e-4,
                                       msg=lambda m: f"d{name}: {m}")

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


@unittest.skipIf(torch is None, "torch is not importable")
class TorchGradcheckTest(unittest.TestCase):
    """torch.autograd.gradcheck of the library's backwards on the CPU backend: finite
    differences of the library's own forward against its backward, element by element of the
    Jacobian. In float32 (f64 is not a tensor dtype of the C ABI), hence a step of 1e-2: the
    central difference's truncation and f32 rounding errors then stay near 4e-5 on these
    shapes (1e-1 and 1e-3 give 4e-3 and 1e-4), a tenth of the tolerance, while a gradient 1%
    off fails (test_gradcheck_sees_a_wrong_gradient)."""

    EPS, ATOL, RTOL = 1e-2, 4e-4, 1e-3

    def gradcheck(self, fn, inputs, **kwargs):
        with warnings.catch_warnings():  # it warns that f32 inputs are likely to fail
            warnings.filterwarnings("ignore", "Input #", UserWarning)
            return torch.autograd.gradcheck(fn, inputs, eps=self.EPS, atol=self.ATOL,
                                            rtol=self.RTOL, nondet_tol=0.0, **kwargs)

    def test_float64(self):
        self.skipTest("float64 is not a supported tensor dtype (tj_dtype has no f64, and the CPU "
                      "backend computes in f32): gradcheck runs in float32 on tiny shapes, with "
                      "eps and atol sized for f32, in the other tests of this class")

    def test_attention_document_softcap_gqa(self):
        gen = generator(40)
        q = randn(gen, 1, 2, 7, 4)
        k, v = randn(gen, 1, 1, 7, 4), randn(gen, 1, 1, 7, 4)
        doc = torch.tensor([[0, 0, 0, 1, 1, 2, 2]], dtype=torch.int32)
        program = tilejit.programs.doc_softcap()
        self.assertTrue(self.gradcheck(lambda q, k, v: tilejit.attention(
            q, k, v, program, buffers={"doc": doc}, params={"cap": 1.5}, scale=0.7), (q, k, v)))

    def test_loss_two_segments_softcap_smoothing_z_loss(self):
        gen = generator(41)
        program = tilejit.program(
            "loss tiny {\n  param cap : f32\n  segment a : [0, 5) weight W0\n"
            "  segment b : [8, 11) weight W1 bias b1\n  logit = cap * tanh(logit / cap)\n"
            "  label_smoothing = 0.1\n  z_loss = 0.01\n  reduction = none\n}\n")
        e = randn(gen, 4, 3)
        w0, w1, b1 = randn(gen, 5, 3, scale=0.5), randn(gen, 3, 3, scale=0.5), randn(gen, 3)
        targets = torch.tensor([1, 9, -100, 10], dtype=torch.int32)
        self.assertTrue(self.gradcheck(lambda e, w0, w1, b1: tilejit.linear_cross_entropy(
            e, [w0, (w1, b1)], targets, program, params={"cap": 2.0}, filter_threshold=0.0),
            (e, w0, w1, b1)))

    def test_gradcheck_sees_a_wrong_gradient(self):
        # The check itself: the library's attention with its backward scaled by 1.01 fails.
        gen = generator(42)
        q, k, v = (randn(gen, 1, 1, 5, 4) for _ in range(3))
        program = tilejit.programs.causal()

        class Scaled(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                return 1.01 * g

        fn = lambda q, k, v: tilejit.attention(Scaled.apply(q), k, v, program)
        self.assertFalse(self.gradcheck(fn, (q, k, v), raise_exception=False))


if __name__ == "__main__":
    unittest.main()
