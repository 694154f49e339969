"""tilejit with CUDA torch tensors: bf16 attention and fused linear cross-entropy with autograd,
against torch fp64 references computed independently (torch_reference.py: dense attention with
the program's mask and score modifier, cross-entropy over materialised logits) on small shapes.

What is checked: the document mask + causal + soft-capping program with GQA, head dims 64 and
128, odd lengths; lse; non-contiguous inputs (permuted [B, S, H, D] views, strided rows, a
strided last dimension); torch.no_grad; outputs on the inputs' device (the last GPU, which is
not the current device on a multi-GPU host); the two-segment loss with a bias, soft-capping,
label smoothing, z-loss and ignored rows under reductions mean and none. Every output the
library allocates starts poisoned (NaN), so an element it fails to write fails the test.

Streams. Each stream test queues a spin kernel on a side stream, then writes the inputs on that
stream (they hold NaN before), calls tilejit there and copies the results on that stream: a
kernel the library launched on another stream would read NaN inputs or be copied before it
ran. For attention with a block mask built beforehand the library promises no host
synchronisation, so the call (forward and backward) must return while the spin still runs,
with torch's sync debug mode set to error around it (torch-side synchronisation raises). The
loss forward synchronises its stream once by contract (it reads back the kept-row count, see
runtime/LinearCe.h), and building a block mask from device buffers waits for its stream (the
mask comes back to host memory): those are checked for ordering and results, not for the
absence of synchronisation.

Skipped unless torch has CUDA and the library finds a usable GPU.
"""

from __future__ import annotations

import gc
import os
import unittest

from support import poisoned_outputs, tilejit

try:
    import torch
except ImportError:  # the CPU-only CI has no torch
    torch = None

CUDA = torch is not None and torch.cuda.is_available() and tilejit.gpu_available()
if torch is not None:
    from torch_reference import (brute_force_tile_counts, document_causal_mask, generator,
                                 randn, reference_attention, reference_loss_terms, reference_lse,
                                 sorted_docs)

# GPU clock cycles a stream test keeps its stream busy: ~0.5 s at 2 GHz, far longer than the
# host needs to issue a warm forward and backward.
SPIN_CYCLES = int(os.environ.get("TILEJIT_TEST_SPIN_CYCLES", 1_000_000_000))

CAP = 5.0  # doc_softcap's soft-cap: scores of these inputs reach it


def softcap(s):
    return CAP * torch.tanh(s / CAP)


def device():
    """The last GPU: on a multi-GPU host, not the current device (0)."""
    return torch.device("cuda", torch.cuda.device_count() - 1)


def rel_error(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


class CudaTestCase(unittest.TestCase):

    def assert_bf16_close(self, got, want, what, rel=1e-2, elem=5e-2):
        """bf16 results against fp64: relative Frobenius error <= rel (PERF.md's bound for bf16
        inputs: bf16 rounding gives ~3e-3, while a program without the soft-cap is ~7e-2 off)
        and every element within elem * max|ref|; NaN fails."""
        self.assertEqual(tuple(got.shape), tuple(want.shape), f"{what}: shape")
        got64, want64 = got.detach().double(), want.detach().double().to(got.device)
        bad = int((~torch.isfinite(got64)).sum())
        self.assertEqual(bad, 0, f"{what}: {bad} non-finite elements (left unwritten?)")
        err = rel_error(got64, want64)
        self.assertLessEqual(err, rel, f"{what}: relative error {err:.2e}")
        worst, scale = float((got64 - want64).abs().max()), float(want64.abs().max())
        self.assertLessEqual(worst, elem * scale + 1e-6,
                             f"{what}: an element is off by {worst:.3e} (max |ref| {scale:.3e})")

    def assert_on(self, tensors, dev, dtype=None):
        for t in tensors:
            self.assertEqual(t.device, dev)
            if dtype is not None:
                self.assertEqual(t.dtype, dtype)

    def spin_then_fill(self, stream, sources):
        """On `stream`: a spin kernel, then NaN-initialised copies of `sources` filled in
        (returned, with an event recorded after the spin)."""
        targets = [torch.full_like(s, float("nan")) if s.is_floating_point()
                   else torch.full_like(s, -777) for s in sources]
        torch.cuda.synchronize(stream.device)
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SPIN_CYCLES)
            spun = torch.cuda.Event()
            spun.record(stream)
            for t, s in zip(targets, sources):
                t.copy_(s)
        return targets, spun


@unittest.skipIf(not CUDA, "no CUDA device usable by both torch and tilejit")
class CudaAttentionTest(CudaTestCase):

    def inputs(self, gen, dim, seq=200, batch=2, heads=4, heads_kv=2, docs=3):
        """bf16 q, k, v [B, H, S, D] leaves on the device, document ids, their dense mask."""
        dev = device()
        q = randn(gen, batch, heads, seq, dim, dtype=torch.bfloat16, device=dev)
        k, v = (randn(gen, batch, heads_kv, seq, dim, dtype=torch.bfloat16, device=dev)
                for _ in range(2))
        doc = sorted_docs(gen, batch, seq, docs)
        return q, k, v, doc.to(dev), document_causal_mask(doc, dev)

    def check(self, what, leaves, mask, out, lse, grads, d_out, views=lambda q, k, v: (q, k, v)):
        """out, lse (None: not checked) and the gradients of `leaves` against the fp64
        reference on fp64 copies of the leaves; views(leaves) gives q, k, v."""
        ref_leaves = [x.detach().double().requires_grad_() for x in leaves]
        q, k, v = views(*ref_leaves)
        want = reference_attention(q, k, v, mask, softcap)
        want_grads = torch.autograd.grad(want, ref_leaves, d_out.double())
        self.assert_bf16_close(out, want, f"{what}: out")
        if lse is not None:
            torch.testing.assert_close(lse.double(), reference_lse(q, k, mask, softcap),
                                       atol=2e-3, rtol=1e-3, msg=lambda m: f"{what}: lse: {m}")
        for name, g, w in zip(("q", "k", "v"), grads, want_grads):
            self.assert_bf16_close(g, w, f"{what}: d{name}")

    def test_document_softcap_gqa_autograd(self):
        gen = generator(30)
        program = tilejit.programs.doc_softcap()
        for dim in (64, 128):
            q, k, v, doc, mask = self.inputs(gen, dim)
            d_out = torch.randn(q.shape, generator=gen).to(q)
            with poisoned_outputs():
                out, lse = tilejit.attention(q, k, v, program, buffers={"doc": doc},
                                             params={"cap": CAP}, return_lse=True)
                grads = torch.autograd.grad(out, (q, k, v), d_out)
            self.assertIsNotNone(out.grad_fn)
            self.assertFalse(lse.requires_grad)
            self.assert_on([out] + list(grads), q.device, torch.bfloat16)
            self.assert_on([lse], q.device, torch.float32)
            self.check(f"D={dim}", (q, k, v), mask, out, lse, grads, d_out)

    def test_non_contiguous_inputs(self):
        gen = generator(31)
        dev, B, S, H, Hkv, D = device(), 2, 150, 4, 2, 64
        # q: [B, S, H, D] memory as a [B, H, S, D] view; k: rows of a wider buffer (row stride
        # 2D, passed with its strides); v: a strided last dimension (copied by the package).
        qb = randn(gen, B, S + 1, H, D, dtype=torch.bfloat16, device=dev)
        kb = randn(gen, B, S, Hkv, 2 * D, dtype=torch.bfloat16, device=dev)
        vb = randn(gen, B, Hkv, S, 2 * D, dtype=torch.bfloat16, device=dev)

        def views(qb, kb, vb):
            return qb[:, 1:].transpose(1, 2), kb[..., :D].transpose(1, 2), vb[..., ::2]

        q, k, v = views(qb, kb, vb)
        self.assertFalse(any(x.is_contiguous() for x in (q, k, v)))
        doc = sorted_docs(gen, B, S, 4)
        d_out = torch.randn(q.shape, generator=gen).to(q)
        with poisoned_outputs():
            out = tilejit.attention(q, k, v, tilejit.programs.doc_softcap(),
                                    buffers={"doc": doc.to(dev)}, params={"cap": CAP})
            grads = torch.autograd.grad(out, (qb, kb, vb), d_out)
        self.check("strided", (qb, kb, vb), document_causal_mask(doc, dev), out, None, grads,
                   d_out, views)

    def test_no_grad(self):
        gen = generator(32)
        q, k, v, doc, mask = self.inputs(gen, 64, seq=130)
        with torch.no_grad(), poisoned_outputs():
            out, lse = tilejit.attention(q, k, v, tilejit.programs.doc_softcap(),
                                         buffers={"doc": doc}, params={"cap": CAP},
                                         return_lse=True)
        self.assertIsNone(out.grad_fn)
        self.assertFalse(out.requires_grad)
        self.assert_on([out], q.device, torch.bfloat16)
        q, k, v = (x.detach().double() for x in (q, k, v))
        self.assert_bf16_close(out, reference_attention(q, k, v, mask, softcap), "no_grad: out")
        torch.testing.assert_close(lse.double(), reference_lse(q, k, mask, softcap), atol=2e-3,
                                   rtol=1e-3)

    def test_block_mask_from_device_buffers_follows_the_stream(self):
        # The document ids are written on a side stream behind a spin; the analysis must run on
        # that stream after them (ids still at -777 would make one document: wrong counts).
        gen = generator(33)
        dev, B, H, S = device(), 2, 4, 700
        doc = sorted_docs(gen, B, S, 4)
        stream = torch.cuda.Stream(dev)
        (doc_live,), _ = self.spin_then_fill(stream, [doc.to(dev)])
        program = tilejit.programs.doc_softcap()
        with torch.cuda.stream(stream):
            mask = tilejit.block_mask(program, B, H, S, S, buffers={"doc": doc_live},
                                      params={"cap": CAP})
        shape = mask.shape
        self.assertEqual((shape.batch, shape.heads, shape.block_q, shape.block_kv),
                         (B, 1, 128, 64))
        full, partial, empty = mask.counts
        want_full, want_partial, want_empty = brute_force_tile_counts(
            document_causal_mask(doc), shape.block_q, shape.block_kv)
        # Sound: a tile called full or empty is; the GPU may keep a few decidable tiles partial.
        self.assertEqual(full + partial + empty, want_full + want_partial + want_empty)
        self.assertLessEqual(full, want_full)
        self.assertLessEqual(empty, want_empty)
        self.assertGreaterEqual(empty, want_empty // 2, "the analysis decided too little")
        # And attention through it is right.
        q, k, v, _, _ = self.inputs(gen, 64, seq=S, batch=B, heads=H)
        d_out = torch.randn(q.shape, generator=gen).to(q)
        with poisoned_outputs():
            out = tilejit.attention(q, k, v, program, buffers={"doc": doc_live},
                                    params={"cap": CAP}, block_mask=mask)
            grads = torch.autograd.grad(out, (q, k, v), d_out)
        self.check("GPU-analysed mask", (q, k, v), document_causal_mask(doc, dev), out, None,
                   grads, d_out)

    def test_side_stream_without_host_synchronisation(self):
        gen = generator(34)
        program = tilejit.programs.doc_softcap()
        q0, k0, v0, doc, mask = self.inputs(gen, 128)
        d_out = torch.randn(q0.shape, generator=gen).to(q0)
        block = tilejit.block_mask(program, 2, 4, 200, 200, buffers={"doc": doc},
                                   params={"cap": CAP})
        stream = torch.cuda.Stream(q0.device)
        torch.cuda.synchronize(q0.device)  # the side stream reads what the default one wrote

        def step(q, k, v):
            out, lse = tilejit.attention(q, k, v, program, buffers={"doc": doc},
                                         params={"cap": CAP}, block_mask=block,
                                         return_lse=True)
            return (out, lse) + torch.autograd.grad(out, (q, k, v), d_out)

        with torch.cuda.stream(stream):  # warm: kernels compiled, mask uploaded, scratch sized
            step(*(x.detach().clone().requires_grad_() for x in (q0, k0, v0)))
        stream.synchronize()

        (q, k, v), spun = self.spin_then_fill(stream, [x.detach() for x in (q0, k0, v0)])
        for x in (q, k, v):
            x.requires_grad_()
        previous = torch.cuda.get_sync_debug_mode()
        with poisoned_outputs(), torch.cuda.stream(stream):
            torch.cuda.set_sync_debug_mode("error")
            try:
                results = step(q, k, v)
            finally:
                torch.cuda.set_sync_debug_mode(previous)
            still_spinning = not spun.query()
            seen = [r.detach().clone() for r in results]  # consumed on the stream
        stream.synchronize()
        self.assertTrue(still_spinning, "the forward and backward waited for their stream")
        out, lse, *grads = seen
        self.assert_on(seen, q0.device)
        self.check("side stream", (q0, k0, v0), mask, out, lse, grads, d_out)


@unittest.skipIf(not CUDA, "no CUDA device usable by both torch and tilejit")
class CudaLossTest(CudaTestCase):
    PROGRAM = ("loss gpu_head {\n  param cap : f32\n  segment text : [0, 1000) weight W0\n"
               "  segment act : [1010, 1082) weight W1 bias b1\n"
               "  logit = cap * tanh(logit / cap)\n  label_smoothing = 0.1\n  z_loss = 0.001\n"
               "  reduction = REDUCTION\n}\n")
    N, D, LOGIT_CAP = 300, 64, 3.0

    def setUp(self):
        gen = generator(40)
        dev, N, D = device(), self.N, self.D
        # e: [D, N] memory seen as [N, D] (copied by the package); W0: rows of a wider buffer
        # (row stride D + 8, passed with its strides).
        self.e_store = randn(gen, D, N, dtype=torch.bfloat16, device=dev)
        self.w0_store = randn(gen, 1000, D + 8, dtype=torch.bfloat16, device=dev, scale=0.15)
        self.w1 = randn(gen, 72, D, dtype=torch.bfloat16, device=dev, scale=0.15)
        self.b1 = randn(gen, 72, dtype=torch.bfloat16, device=dev, scale=0.5)
        ids = torch.cat([torch.arange(1000), 1010 + torch.arange(72)])
        targets = ids[torch.randint(0, 1072, (N,), generator=gen)]
        targets[torch.randperm(N, generator=gen)[:N // 10]] = -100
        self.targets = targets.to(dev)  # int64: the package converts them to int32
        self.leaves = (self.e_store, self.w0_store, self.w1, self.b1)

    def views(self, e_store, w0_store):
        return e_store.t(), w0_store[:, :self.D]

    def loss(self, reduction, e_store=None, w0_store=None, return_rows=False):
        e, w0 = self.views(self.e_store if e_store is None else e_store,
                           self.w0_store if w0_store is None else w0_store)
        program = tilejit.program(self.PROGRAM.replace("REDUCTION", reduction))
        return tilejit.linear_cross_entropy(e, [w0, (self.w1, self.b1)], self.targets, program,
                                            params={"cap": self.LOGIT_CAP},
                                            filter_threshold=0.0, return_rows=return_rows)

    def reference(self, reduction, leaves):
        e_store, w0_store, w1, b1 = leaves
        e, w0 = self.views(e_store, w0_store)
        return reference_loss_terms(e, [(w0, None), (w1, b1)], [0, 1010], self.targets,
                                    cap=self.LOGIT_CAP, smoothing=0.1, z_loss=0.001,
                                    reduction=reduction)

    def check(self, what, reduction, loss, rows, lse, grads, upstream):
        """The outputs and the leaves' gradients against the fp64 reference, computed on fp64
        copies of the leaves."""
        ref_leaves = [x.detach().double().requires_grad_() for x in self.leaves]
        want, want_rows, want_lse = self.reference(reduction, ref_leaves)
        want_grads = torch.autograd.grad(want, ref_leaves, upstream.double())
        for name, got, ref in (("loss", loss, want), ("rows", rows, want_rows),
                               ("lse", lse, want_lse)):
            torch.testing.assert_close(got.double(), ref.detach(), atol=2e-3, rtol=2e-3,
                                       msg=lambda m: f"{what}: {name}: {m}")
        for name, g, w, leaf in zip(("e", "W0", "W1", "b1"), grads, want_grads, self.leaves):
            self.assertEqual(g.dtype, leaf.dtype, f"{what}: d{name} dtype")
            self.assert_bf16_close(g, w, f"{what}: d{name}")

    def test_mean_and_none(self):
        gen = generator(41)
        for reduction in ("mean", "none"):
            upstream = (torch.randn(self.N, generator=gen) if reduction == "none"
                        else torch.tensor(0.7)).to(self.e_store.device)
            with poisoned_outputs():
                loss, rows, lse = self.loss(reduction, return_rows=True)
                grads = torch.autograd.grad(loss, self.leaves, upstream)
            self.assertIsNotNone(loss.grad_fn)
            self.assert_on([loss, rows, lse], self.e_store.device, torch.float32)
            self.assert_on(grads, self.e_store.device)
            self.check(reduction, reduction, loss, rows, lse, grads, upstream)

    def test_no_grad(self):
        with torch.no_grad(), poisoned_outputs():
            loss, rows, lse = self.loss("mean", return_rows=True)
        self.assertIsNone(loss.grad_fn)
        want, want_rows, want_lse = self.reference("mean", self.leaves)
        for got, ref in ((loss, want), (rows, want_rows), (lse, want_lse)):
            self.assertEqual(got.device, self.e_store.device)
            torch.testing.assert_close(got.double(), ref.detach(), atol=2e-3, rtol=2e-3)

    def test_vocab_order_kept_across_steps(self):
        # Filtering on (no smoothing under the soft-cap's logit_mod here), the order built on the
        # first step and reused on the second; the weights' gradients are allocated with the
        # forward (which builds its position-order weight copy in them). Dropped entries are
        # below the bf16 threshold 2^-12: within the tolerance.
        program = tilejit.program("loss gpu_ordered {\n  segment text : [0, 1000) weight W0\n"
                                  "  segment act : [1010, 1082) weight W1 bias b1\n"
                                  "  reduction = mean\n}\n")
        order = tilejit.VocabOrder(refresh_every=2)
        ref_leaves = [x.detach().double().requires_grad_() for x in self.leaves]
        e_ref, w0_ref = self.views(ref_leaves[0], ref_leaves[1])
        want, _, _ = reference_loss_terms(e_ref, [(w0_ref, None), (ref_leaves[2], ref_leaves[3])],
                                          [0, 1010], self.targets, reduction="mean")
        want_grads = torch.autograd.grad(want, ref_leaves)
        for step in range(2):
            leaves = [x.detach().clone().requires_grad_() for x in self.leaves]
            e, w0 = self.views(leaves[0], leaves[1])
            with poisoned_outputs():
                loss = tilejit.linear_cross_entropy(e, [w0, (leaves[2], leaves[3])],
                                                    self.targets, program, vocab_order=order)
                grads = torch.autograd.grad(loss, leaves)
            torch.testing.assert_close(loss.double(), want.detach(), atol=2e-3, rtol=2e-3)
            for name, got, ref in zip(("e", "W0", "W1", "b1"), grads, want_grads):
                torch.testing.assert_close(got.double(), ref, atol=2e-3, rtol=2e-2,
                                           msg=lambda m, n=name, k=step: f"step {k} d{n}: {m}")
        stats = order.stats()
        self.assertEqual(stats["forwards"], 2)
        self.assertEqual(stats["rebuilds"], 1)
        self.assertGreaterEqual(stats["last_survival"], 0.0)
        with self.assertRaises(tilejit.InvalidArgumentError):
            tilejit.linear_cross_entropy(e, [w0, (leaves[2], leaves[3])], self.targets, program,
                                         vocab_order="by_frequency")

    def test_workspace_pool_keeps_the_scratch_until_trimmed(self):
        tilejit.trim_workspace_pool()
        loss = self.loss("mean")
        torch.autograd.grad(loss, self.leaves)
        del loss  # the saved state: its workspace goes back to the pool in stream order
        gc.collect()
        torch.cuda.synchronize()
        self.assertGreater(tilejit.workspace_pool_held_bytes(), 0)
        # The dropped state waits (for the work its stream had queued) until a release or a trim
        # finds that done: the first trim frees it, its scratch goes back in its stream's order,
        # and once the stream has passed that the second trim hands it back.
        tilejit.trim_workspace_pool()
        torch.cuda.synchronize()
        tilejit.trim_workspace_pool()
        self.assertEqual(tilejit.workspace_pool_held_bytes(), 0)

    def test_side_stream(self):
        # The forward synchronises its stream once by contract: ordering and results only.
        stream = torch.cuda.Stream(self.e_store.device)
        upstream = torch.tensor(1.3, device=self.e_store.device)
        (e_store, w0_store), _ = self.spin_then_fill(
            stream, [self.e_store.detach(), self.w0_store.detach()])
        e_store.requires_grad_()
        w0_store.requires_grad_()
        with poisoned_outputs(), torch.cuda.stream(stream):
            loss, rows, lse = self.loss("mean", e_store, w0_store, return_rows=True)
            grads = torch.autograd.grad(loss, (e_store, w0_store, self.w1, self.b1), upstream)
            seen = [r.detach().clone() for r in (loss, rows, lse, *grads)]
        stream.synchronize()
        loss, rows, lse, *grads = seen
        self.check("side stream", "mean", loss, rows, lse, grads, upstream)


if __name__ == "__main__":
    unittest.main()
