"""tilejit.attention forward and backward on the CPU backend with numpy arrays, against the fp64
reference: causal, document (a buffer), soft-capping (a param), ALiBi, GQA, odd lengths, rows
the mask empties, strided layouts, f16, and a block mask built once and reused."""

from __future__ import annotations

import unittest

import numpy as np

from reference import (AttentionReference, assert_close, identity_score, randn,
                       softcap_score, sorted_documents)
from support import fresh_rng, poisoned_outputs, tilejit

causal_mask = lambda b, h, q, kv: q >= kv


class AttentionTest(unittest.TestCase):

    def check(self, program, ref: AttentionReference, q, k, v, buffers=None, params=None,
              block_mask=None, scale=None, atol=3e-5, rtol=3e-4):
        rng = fresh_rng(99)
        d_out = randn(rng, q.shape, q.dtype)
        with poisoned_outputs():
            out, lse = tilejit.attention(q, k, v, program, buffers=buffers, params=params,
                                         block_mask=block_mask, scale=scale, return_lse=True)
        self.assertEqual(out.dtype, q.dtype)
        self.assertEqual(lse.dtype, np.float32)
        want_out, want_lse = ref.forward(q, k, v)
        assert_close(self, out, want_out, atol, rtol, f"{program.name}: out")
        assert_close(self, lse, want_lse, atol, rtol, f"{program.name}: lse")

        with poisoned_outputs():
            dq, dk, dv = tilejit.attention_backward(q, k, v, out, lse, d_out, program,
                                                    buffers=buffers, params=params,
                                                    block_mask=block_mask, scale=scale)
        want = ref.backward(q, k, v, d_out)
        for name, got, expected in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
            self.assertEqual(got.shape, expected.shape)
            assert_close(self, got, expected, 10 * atol, 10 * rtol, f"{program.name}: {name}")
        return out

    def test_causal_odd_lengths(self):
        rng = fresh_rng(1)
        q, k, v = (randn(rng, (2, 3, 37, 24)) for _ in range(3))
        self.check(tilejit.programs.causal(), AttentionReference(causal_mask), q, k, v)

    def test_document_with_buffer(self):
        rng = fresh_rng(2)
        q, k, v = (randn(rng, (2, 2, 45, 16)) for _ in range(3))
        doc = sorted_documents(rng, 2, 45, 4)
        ref = AttentionReference(lambda b, h, qi, kv: (doc[b, qi] == doc[b, kv]) & (qi >= kv))
        self.check(tilejit.programs.document_causal(), ref, q, k, v, buffers={"doc": doc})

    def test_softcap_with_param(self):
        rng = fresh_rng(3)
        q, k, v = (randn(rng, (1, 2, 33, 16), scale=2.0) for _ in range(3))
        cap = 1.5
        ref = AttentionReference(causal_mask, softcap_score(cap))
        self.check(tilejit.programs.softcap_causal(), ref, q, k, v, params={"cap": cap})

    def test_alibi_with_f32_buffer(self):
        rng = fresh_rng(4)
        q, k, v = (randn(rng, (1, 4, 21, 8)) for _ in range(3))
        slopes = np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32)
        alibi = lambda s, b, h, qi, kv: (s + slopes[h] * (kv - qi), np.ones_like(s))
        self.check(tilejit.programs.alibi_causal(), AttentionReference(causal_mask, alibi),
                   q, k, v, buffers={"slopes": slopes})

    def test_gqa_with_different_lengths(self):
        rng = fresh_rng(5)
        q = randn(rng, (2, 6, 29, 8))
        k, v = randn(rng, (2, 2, 41, 8)), randn(rng, (2, 2, 41, 8))
        self.check(tilejit.programs.causal(), AttentionReference(causal_mask), q, k, v)

    def test_text_program_with_scale(self):
        rng = fresh_rng(6)
        q, k, v = (randn(rng, (2, 2, 26, 16)) for _ in range(3))
        doc = sorted_documents(rng, 2, 26, 3)
        program = tilejit.program(
            "attention doc_softcap {\n"
            "  buffer doc : i32[B, S]\n"
            "  param cap : f32\n"
            "  mask = doc[b, q] == doc[b, kv] && q >= kv\n"
            "  score = cap * tanh(score / cap)\n"
            "}\n", "doc_softcap.tj")
        ref = AttentionReference(lambda b, h, qi, kv: (doc[b, qi] == doc[b, kv]) & (qi >= kv),
                                 softcap_score(2.0), scale=0.3)
        self.check(program, ref, q, k, v, buffers={"doc": doc}, params={"cap": 2.0}, scale=0.3)

    def test_rows_the_mask_empties(self):
        rng = fresh_rng(7)
        q, k, v = (randn(rng, (1, 2, 19, 8)) for _ in range(3))
        program = tilejit.program("attention lagged {\n  mask = q - kv >= 5\n}\n")
        out = self.check(program, AttentionReference(lambda b, h, qi, kv: qi - kv >= 5), q, k, v)
        self.assertTrue(np.all(out[:, :, :5] == 0))

    def test_strided_layouts(self):
        rng = fresh_rng(8)
        # [B, S, H, D] memory seen as [B, H, S, D]: passed with its strides, no copy.
        q, k, v = (randn(rng, (2, 23, 3, 16)).transpose(0, 2, 1, 3) for _ in range(3))
        self.assertFalse(q.flags["C_CONTIGUOUS"])
        self.check(tilejit.programs.causal(), AttentionReference(causal_mask), q, k, v)
        # A last dimension with stride 2: copied to a contiguous layout first.
        wide = randn(rng, (1, 2, 17, 32))
        q2, k2, v2 = wide[..., ::2], wide[..., 1::2], np.flip(wide, axis=2)[..., :16]
        self.check(tilejit.programs.causal(), AttentionReference(causal_mask), q2, k2, v2)

    def test_f16(self):
        rng = fresh_rng(9)
        q, k, v = (randn(rng, (1, 2, 31, 32), np.float16) for _ in range(3))
        self.check(tilejit.programs.causal(), AttentionReference(causal_mask), q, k, v,
                   atol=2e-3, rtol=2e-2)

    def test_block_mask_built_once(self):
        rng = fresh_rng(10)
        q, k, v = (randn(rng, (2, 2, 40, 16)) for _ in range(3))
        doc = sorted_documents(rng, 2, 40, 3)
        program = tilejit.programs.document_causal()
        mask = tilejit.block_mask(program, 2, 2, 40, 40, buffers={"doc": doc}, block_q=16,
                                  block_kv=8)
        ref = AttentionReference(lambda b, h, qi, kv: (doc[b, qi] == doc[b, kv]) & (qi >= kv))
        self.check(program, ref, q, k, v, buffers={"doc": doc}, block_mask=mask)

    def test_out_only_by_default(self):
        rng = fresh_rng(11)
        q, k, v = (randn(rng, (1, 1, 9, 8)) for _ in range(3))
        out = tilejit.attention(q, k, v, tilejit.programs.causal())
        self.assertIsInstance(out, np.ndarray)
        assert_close(self, out, AttentionReference(causal_mask).forward(q, k, v)[0], 3e-5,
                     3e-4, "out")

    def test_unused_identity_score_reference(self):
        # The reference's own check: with every position visible it is plain softmax attention.
        rng = fresh_rng(12)
        q, k, v = (randn(rng, (1, 1, 5, 4)) for _ in range(3))
        out, _ = AttentionReference(lambda *g: np.ones(g[0].shape, bool), identity_score).forward(
            q, k, v)
        s = q[0, 0].astype(np.float64) @ k[0, 0].T.astype(np.float64) / 2.0
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        assert_close(self, out[0, 0], p @ v[0, 0], 1e-12, 1e-12, "reference")


if __name__ == "__main__":
    unittest.main()
