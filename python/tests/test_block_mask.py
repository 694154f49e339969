"""tilejit.block_mask: tile counts against a brute-force classification of the dense mask.
Index-only masks classify exactly; masks reading a buffer soundly (a tile called full or empty
is one, and every tile is counted once)."""

from __future__ import annotations

import unittest

import numpy as np

from reference import brute_force_counts, index_grids, sorted_documents
from support import fresh_rng, tilejit


class BlockMaskTest(unittest.TestCase):

    def counts(self, program, mask_fn, batch, heads, seq_q, seq_kv, block_q, block_kv,
               buffers=None, params=None, exact=True):
        mask = tilejit.block_mask(program, batch, heads, seq_q, seq_kv, buffers=buffers,
                                  params=params, block_q=block_q, block_kv=block_kv)
        shape = mask.shape
        self.assertEqual((shape.seq_q, shape.seq_kv, shape.block_q, shape.block_kv),
                         (seq_q, seq_kv, block_q, block_kv))
        self.assertEqual(shape.heads, 1)  # no program here reads h
        dense = mask_fn(*index_grids(shape.batch, shape.heads, seq_q, seq_kv))
        want = brute_force_counts(dense, block_q, block_kv)
        got = tuple(mask.counts)
        if exact:
            self.assertEqual(got, want, f"{program.name}: (full, partial, empty)")
        else:
            self.assertLessEqual(got[0], want[0], f"{program.name}: full tiles must be full")
            self.assertLessEqual(got[2], want[2], f"{program.name}: empty tiles must be empty")
            self.assertEqual(sum(got), sum(want), f"{program.name}: every tile counted once")
        return mask

    def test_causal(self):
        mask = self.counts(tilejit.programs.causal(), lambda b, h, q, kv: q >= kv, 3, 4, 100,
                           100, 16, 8)
        self.assertEqual(mask.shape.batch, 1)  # the mask does not read b: broadcast

    def test_sliding_window_param(self):
        self.counts(tilejit.programs.sliding_window(),
                    lambda b, h, q, kv: (q >= kv) & (q - kv < 21), 1, 2, 77, 77, 8, 8,
                    params={"window": 21})

    def test_odd_lengths_and_rectangular(self):
        self.counts(tilejit.programs.causal(), lambda b, h, q, kv: q >= kv, 1, 1, 37, 53, 16,
                    16)

    def test_document_buffer(self):
        rng = fresh_rng(20)
        doc = sorted_documents(rng, 2, 96, 5)
        mask = self.counts(tilejit.programs.document_causal(),
                           lambda b, h, q, kv: (doc[b, q] == doc[b, kv]) & (q >= kv), 2, 3, 96,
                           96, 16, 8, buffers={"doc": doc}, exact=False)
        self.assertEqual(mask.shape.batch, 2)
        self.assertGreater(mask.counts.empty, 0)

    def test_prefix_lm_buffer(self):
        prefix = np.array([10, 33], dtype=np.int32)
        self.counts(tilejit.programs.prefix_lm(),
                    lambda b, h, q, kv: (kv < prefix[b]) | (q >= kv), 2, 1, 64, 64, 8, 8,
                    buffers={"prefix": prefix}, exact=False)

    def test_default_tiles_are_the_gpu_kernels(self):
        mask = tilejit.block_mask(tilejit.programs.causal(), 1, 1, 1000, 1000)
        self.assertEqual((mask.shape.block_q, mask.shape.block_kv), (128, 64))
        self.assertIn("causal", repr(mask))


if __name__ == "__main__":
    unittest.main()
