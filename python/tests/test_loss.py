"""tilejit.linear_cross_entropy on the CPU backend with numpy arrays, against the fp64
reference: two segments with dead ids between them and a bias, ignored rows, int32 and int64
targets, the reductions, soft-capped logits with a param, label smoothing and z-loss; forward
outputs and the backward's gradients for the hidden states and every weight and bias."""

from __future__ import annotations

import unittest

import numpy as np

from reference import (LossReference, Segment, assert_close, kl_reference, randn,
                       softcap_score)
from support import fresh_rng, poisoned_outputs, tilejit

TWO_HEADS = """
loss two_heads {
  segment base : [0, 40) weight W0
  segment extra : [47, 60) weight W1 bias b1
}
"""

CAPPED = """
loss capped {
  param cap : f32
  segment base : [0, 40) weight W0
  segment extra : [45, 57) weight W1
  logit = cap * tanh(logit / cap)
  label_smoothing = 0.1
  z_loss = 0.001
  ignore_index = -1
  reduction = sum
}
"""

PER_ROW = """
loss per_row {
  segment base : [0, 24) weight W0
  segment extra : [30, 41) weight W1 bias b1
  reduction = none
}
"""


def live_targets(rng, n, segments, ignore_index, ignored, dtype):
    ids = np.concatenate([s.begin + np.arange(s.weight.shape[0]) for s in segments])
    targets = rng.choice(ids, size=n).astype(dtype)
    targets[rng.choice(n, size=ignored, replace=False)] = ignore_index
    return targets


class LossTest(unittest.TestCase):

    def check(self, program, ref: LossReference, e, args, targets, params=None, grad=None,
              atol=2e-5, rtol=2e-4, **options):
        with poisoned_outputs():
            loss, row_loss, lse = tilejit.linear_cross_entropy(
                e, args, targets, program, params=params, return_rows=True, **options)
        want_loss, want_rows, want_lse = ref.forward(e, targets)
        assert_close(self, loss, want_loss, atol, rtol, f"{program.name}: loss")
        assert_close(self, row_loss, want_rows, atol, rtol, f"{program.name}: row_loss")
        assert_close(self, lse, want_lse, atol, rtol, f"{program.name}: lse")

        with poisoned_outputs():
            run = tilejit.linear_cross_entropy_forward(e, args, targets, program, params=params,
                                                       **options)
            d_e, grads = run.backward(grad)
        self.assertEqual(run.rows, (len(targets), int((targets != ref.ignore_index).sum())))
        want_de, want_grads = ref.backward(e, targets, 1.0 if grad is None else grad)
        assert_close(self, d_e, want_de, atol, rtol, f"{program.name}: d_hidden")
        self.assertEqual(len(grads), len(want_grads))
        for i, ((dw, db), (want_dw, want_db)) in enumerate(zip(grads, want_grads)):
            assert_close(self, dw, want_dw, atol, rtol, f"{program.name}: d_weight[{i}]")
            self.assertEqual(db is None, want_db is None)
            if db is not None:
                assert_close(self, db, want_db, atol, rtol, f"{program.name}: d_bias[{i}]")
        return loss

    def two_heads(self, rng, dim, dtype=np.float32):
        w0, w1 = randn(rng, (40, dim), dtype, 0.3), randn(rng, (13, dim), dtype, 0.3)
        b1 = randn(rng, (13,), dtype, 0.5)
        return [Segment(0, w0), Segment(47, w1, b1)], [w0, (w1, b1)]

    def test_two_segments_gap_bias_mean(self):
        rng = fresh_rng(30)
        segments, args = self.two_heads(rng, 24)
        e = randn(rng, (37, 24))
        for dtype in (np.int64, np.int32):
            targets = live_targets(rng, 37, segments, -100, 5, dtype)
            loss = self.check(tilejit.program(TWO_HEADS), LossReference(segments), e, args,
                              targets)
            self.assertEqual(np.shape(loss), ())

    def test_softcap_smoothing_zloss_sum(self):
        rng = fresh_rng(31)
        w0, w1 = randn(rng, (40, 16), scale=1.0), randn(rng, (12, 16), scale=1.0)
        segments = [Segment(0, w0), Segment(45, w1)]
        e = randn(rng, (29, 16))
        targets = live_targets(rng, 29, segments, -1, 4, np.int32)
        ref = LossReference(segments, reduction="sum", label_smoothing=0.1, z_loss=0.001,
                            ignore_index=-1, logit_fn=softcap_score(3.0))
        self.check(tilejit.program(CAPPED), ref, e, [w0, w1], targets, params={"cap": 3.0},
                   grad=0.7)

    def test_reduction_none_with_row_gradients(self):
        rng = fresh_rng(32)
        w0, w1, b1 = randn(rng, (24, 8), scale=0.5), randn(rng, (11, 8), scale=0.5), randn(
            rng, (11,))
        segments = [Segment(0, w0), Segment(30, w1, b1)]
        e = randn(rng, (19, 8))
        targets = live_targets(rng, 19, segments, -100, 3, np.int64)
        grad = randn(rng, (19,))
        loss = self.check(tilejit.program(PER_ROW), LossReference(segments, reduction="none"), e,
                          [w0, (w1, b1)], targets, grad=grad)
        self.assertEqual(loss.shape, (19,))

    def test_strided_inputs(self):
        rng = fresh_rng(33)
        segments, _ = self.two_heads(rng, 16)
        wide = randn(rng, (21, 40))
        e = wide[:, 3:19]  # rows with a stride of 40: passed as they are
        w0 = np.asfortranarray(segments[0].weight)  # last dimension not contiguous: copied
        args = [w0, (segments[1].weight, segments[1].bias)]
        targets = live_targets(rng, 21, segments, -100, 2, np.int32)
        self.check(tilejit.program(TWO_HEADS), LossReference(segments), e, args, targets)

    def test_f16(self):
        rng = fresh_rng(34)
        segments, args = self.two_heads(rng, 32, np.float16)
        e = randn(rng, (23, 32), np.float16)
        targets = live_targets(rng, 23, segments, -100, 2, np.int32)
        self.check(tilejit.program(TWO_HEADS), LossReference(segments), e, args, targets,
                   atol=3e-3, rtol=3e-2, filter_threshold=0.0)

    def test_vocab_order_is_accepted_on_the_cpu(self):
        # The order serves the GPU backward's filtering; the CPU executor visits every id, so
        # the results are the reference's, and the order is never asked.
        rng = fresh_rng(35)
        segments, args = self.two_heads(rng, 16)
        e = randn(rng, (19, 16), np.float32)
        targets = live_targets(rng, 19, segments, -100, 2, np.int32)
        order = tilejit.VocabOrder(refresh_every=2)
        for vocab_order in (order, "average_logit"):
            self.check(tilejit.program(TWO_HEADS), LossReference(segments), e, args, targets,
                       vocab_order=vocab_order)
        self.assertEqual(order.stats()["forwards"], 0)
        with self.assertRaises(tilejit.InvalidArgumentError):
            tilejit.linear_cross_entropy(e, args, targets, tilejit.program(TWO_HEADS),
                                         vocab_order="sorted")
        with self.assertRaises(tilejit.InvalidArgumentError):
            tilejit.VocabOrder(refresh_every=0)
        # The caller's order (per segment, a permutation of its rows), e.g. by id frequency.
        sizes = [int(np.asarray(w if not isinstance(w, tuple) else w[0]).shape[0]) for w in args]
        fixed = tilejit.VocabOrder.fixed([np.arange(n)[::-1] for n in sizes])
        self.check(tilejit.program(TWO_HEADS), LossReference(segments), e, args, targets,
                   vocab_order=fixed)
        self.assertEqual(fixed.stats()["rebuilds"], 0)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError, "not a permutation"):
            tilejit.VocabOrder.fixed([[0, 0, 1]])

    def test_kl_against_a_teacher(self):
        rng = fresh_rng(36)
        program = tilejit.program(
            "loss kd {\n  segment vocab : [0, 30) weight W\n"
            "  kl alpha = 0.3 temperature = 2\n"
            "  teacher segment vocab : [0, 30) weight W_teacher\n}\n")
        e, w = randn(rng, (17, 12)), randn(rng, (30, 12), scale=0.4)
        teacher_e, teacher_w = randn(rng, (17, 20)), randn(rng, (30, 20), scale=0.4)
        targets = rng.integers(0, 30, 17).astype(np.int32)
        with poisoned_outputs():
            run = tilejit.linear_cross_entropy_forward(
                e, [w], targets, program, buffers={"W_teacher": teacher_w},
                teacher_hidden=teacher_e)
            d_e, [(d_w, d_b)] = run.backward()
        want, want_de, want_dw = kl_reference(e, w, teacher_e, teacher_w, targets, 0.3, 2.0)
        assert_close(self, run.loss, want, 2e-5, 2e-4, "kd: loss")
        assert_close(self, d_e, want_de, 2e-5, 2e-4, "kd: d_hidden")
        assert_close(self, d_w, want_dw, 2e-5, 2e-4, "kd: d_weight")
        self.assertIsNone(d_b)

    def test_standard_program_by_name(self):
        program = tilejit.programs.two_segments()
        self.assertEqual(program.segment_count, 2)
        self.assertEqual(program.reduction, "mean")
        rng = fresh_rng(35)
        w0, w1 = randn(rng, (151936, 8), scale=0.1), randn(rng, (1024, 8), scale=0.1)
        segments = [Segment(0, w0), Segment(152066, w1)]
        e = randn(rng, (6, 8))
        targets = np.array([0, 151935, 152066, 153089, -100, 7], dtype=np.int64)
        loss = tilejit.linear_cross_entropy(e, [w0, w1], targets, program)
        assert_close(self, loss, LossReference(segments).forward(e, targets)[0], 2e-5, 2e-4,
                     "two_segments: loss")


if __name__ == "__main__":
    unittest.main()
