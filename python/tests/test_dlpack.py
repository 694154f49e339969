"""Arrays in through DLPack: legacy and versioned capsules, producers other than numpy (their
outputs come back as numpy arrays), read-only and broadcast (stride 0) inputs, and the
capsule's lifetime (the producer's memory stays alive for the call)."""

from __future__ import annotations

import gc
import unittest

import numpy as np

from reference import AttentionReference, assert_close, randn
from support import fresh_rng, poisoned_outputs, tilejit
from tilejit import _dlpack

CAUSAL = AttentionReference(lambda b, h, q, kv: q >= kv)


class LegacyProducer:
    """A host array that only speaks DLPack before 1.0 (no max_version), and has no dtype or
    shape attributes of its own."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class DlpackTest(unittest.TestCase):

    def test_legacy_capsules_from_another_library(self):
        rng = fresh_rng(40)
        q, k, v = (randn(rng, (1, 2, 15, 8)) for _ in range(3))
        exported = _dlpack.Exported(LegacyProducer(q), "q")
        self.assertEqual(exported.capsule_name, b"dltensor")
        self.assertEqual((exported.shape, exported.strides), (q.shape, (240, 120, 8, 1)))
        with poisoned_outputs():
            out = tilejit.attention(*(LegacyProducer(x) for x in (q, k, v)),
                                    tilejit.programs.causal())
        self.assertIsInstance(out, np.ndarray)
        assert_close(self, out, CAUSAL.forward(q, k, v)[0], 3e-5, 3e-4, "out")

    def test_versioned_capsules(self):
        if np.lib.NumpyVersion(np.__version__) < "2.1.0":
            self.skipTest(f"numpy {np.__version__} exports DLPack 0.x capsules only")
        q = np.zeros((2, 3), np.float32)
        exported = _dlpack.Exported(q, "q")
        self.assertEqual(exported.capsule_name, b"dltensor_versioned")
        self.assertEqual(exported.dtype, 0)  # TJ_DTYPE_F32
        self.assertEqual(exported.device, -1)  # TJ_HOST
        self.assertEqual(exported.data_pointer, q.ctypes.data)

    def test_read_only_and_broadcast_inputs(self):
        rng = fresh_rng(41)
        q = randn(rng, (2, 2, 13, 8))
        q.flags.writeable = False
        k = np.broadcast_to(randn(rng, (1, 2, 13, 8)), (2, 2, 13, 8))  # batch stride 0
        v = randn(rng, (2, 2, 13, 8))
        with poisoned_outputs():
            out = tilejit.attention(q, k, v, tilejit.programs.causal())
        assert_close(self, out, CAUSAL.forward(q, k, v)[0], 3e-5, 3e-4, "out")

    def test_a_view_with_an_offset_outlives_its_array(self):
        rng = fresh_rng(42)
        q = randn(rng, (1, 1, 9, 8))
        expected = q[0, 0, 1:].copy()
        exported = _dlpack.Exported(q[:, :, 1:], "q")  # data starts one row in
        del q
        gc.collect()
        seen = np.ctypeslib.as_array(
            (np.ctypeslib.ctypes.c_float * (8 * 8)).from_address(exported.data_pointer))
        np.testing.assert_array_equal(seen.reshape(8, 8), expected)
        self.assertEqual(exported.shape, (1, 1, 8, 8))

    def test_integer_and_bool_dtypes(self):
        for dtype, code in ((np.int32, 3), (np.int64, 4), (np.uint8, 5), (np.bool_, 6),
                            (np.float16, 1)):
            self.assertEqual(_dlpack.Exported(np.zeros(3, dtype), "x").dtype, code)


if __name__ == "__main__":
    unittest.main()
