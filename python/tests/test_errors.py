"""Errors: the library's message, verbatim, as the exception class of its tj_status, naming the
position (parse errors), the program and the tensor, buffer or param at fault; and what the
Python side rejects before any call (arrays DLPack cannot carry to the C ABI)."""

from __future__ import annotations

import os
import re
import tempfile
import unittest

import numpy as np

from support import tilejit

DOC = tilejit.programs.document_causal


def zeros(*shape, dtype=np.float32):
    return np.zeros(shape, dtype=dtype)


class ErrorTest(unittest.TestCase):

    def test_parse_error_has_line_and_column(self):
        text = "attention x {\n  mask = q >= kvv\n}\n"
        with self.assertRaises(tilejit.ParseError) as caught:
            tilejit.program(text, "x.tj")
        message = str(caught.exception)
        self.assertTrue(message.startswith("tj_program_from_text: x.tj:2:15: "), message)
        self.assertIn("unknown name 'kvv'", message)
        self.assertIn("  mask = q >= kvv\n              ^", message)  # the line and a caret
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIsInstance(caught.exception, tilejit.TilejitError)
        self.assertEqual(caught.exception.status, "TJ_ERR_PARSE")

    def test_parse_error_in_a_loss_layout(self):
        text = "loss x {\n  segment a : [0, 10) weight W\n  segment b : [5, 12) weight V\n}\n"
        with self.assertRaisesRegex(tilejit.ParseError, r"<input>:3:15: segment 'b' \[5, 12\)"):
            tilejit.program(text)

    def test_load_labels_errors_with_the_path(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "bad.tj")
            with open(path, "w") as f:
                f.write("attention bad {\n  mask = q >=\n}\n")
            with self.assertRaisesRegex(tilejit.ParseError, re.escape(path) + r":2:\d+: "):
                tilejit.load(path)

    def test_every_status_has_its_class(self):
        from tilejit import _capi
        from tilejit.errors import ERROR_OF_STATUS
        for status in range(1, 12):
            name = _capi.decode(_capi.lib.tj_status_name(status))
            self.assertEqual(ERROR_OF_STATUS[status].status, name)
            self.assertTrue(issubclass(ERROR_OF_STATUS[status], tilejit.TilejitError))
        for cls in (tilejit.ParseError, tilejit.ValidationError, tilejit.InvalidArgumentError):
            self.assertTrue(issubclass(cls, ValueError))

    def test_unbound_buffer_names_it(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaises(tilejit.InvalidArgumentError) as caught:
            tilejit.attention(q, q, q, DOC())
        self.assertEqual(str(caught.exception),
                         "tj_attention_forward [document_causal]: program document_causal: "
                         "buffer 'doc' (i32[B, S]) is not bound")

    def test_buffer_of_the_wrong_dtype_names_it(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"buffer 'doc' is declared i32\[B, S\] but bound to a f32"):
            tilejit.attention(q, q, q, DOC(), buffers={"doc": zeros(1, 4)})

    def test_params_unbound_mistyped_unknown(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"param 'cap' \(f32\) is not bound"):
            tilejit.attention(q, q, q, tilejit.programs.softcap_causal())
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"param 'window' is i32 but bound to the float 2.5"):
            tilejit.attention(q, q, q, tilejit.programs.sliding_window(), params={"window": 2.5})
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"'window' is bound but the program declares no such"):
            tilejit.attention(q, q, q, tilejit.programs.causal(), params={"window": 2})
        with self.assertRaisesRegex(tilejit.InvalidArgumentError, r"param 'cap' must be an int"):
            tilejit.attention(q, q, q, tilejit.programs.softcap_causal(), params={"cap": "30"})

    def test_wrong_dtype_names_the_tensor(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaises(tilejit.InvalidArgumentError) as caught:
            tilejit.attention(q, q.astype(np.int32), q, tilejit.programs.causal())
        self.assertEqual(str(caught.exception),
                         "tj_attention_forward [causal]: attention: 'k' must have dtype f32 "
                         "(like q (B, D) and k), got i32")

    def test_wrong_shape_names_the_tensor(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError, r"tensor 'v': dimension 3"):
            tilejit.attention(q, q, zeros(1, 1, 4, 4), tilejit.programs.causal())

    def test_dtypes_the_c_abi_cannot_carry(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"tensor 'q' has dtype float64, which tilejit does not take"):
            tilejit.attention(q.astype(np.float64), q, q, tilejit.programs.causal())
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"tensor 'k' is a builtins.list, which does not speak DLPack"):
            tilejit.attention(q, [1.0], q, tilejit.programs.causal())

    def test_program_kind_and_stdlib_names(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"program 'llama3' is a loss program; this call needs an "
                                    r"attention program"):
            tilejit.attention(q, q, q, tilejit.programs.llama3())
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"program 'causal' is an attention program; this call "
                                    r"needs a loss program"):
            tilejit.linear_cross_entropy(zeros(2, 8), [zeros(3, 8)], np.zeros(2, np.int32),
                                         tilejit.programs.causal())
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"no standard program named 'nope' \(there are: causal, "):
            tilejit.programs.stdlib("nope")

    def test_loss_targets_and_segments(self):
        program = tilejit.program("loss x {\n  segment a : [0, 10) weight W\n}\n")
        e, w = zeros(3, 4), zeros(10, 4)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"tj_linear_ce_forward \[x\]: .*target 15 of row 1 is not a "
                                    r"live id"):
            tilejit.linear_cross_entropy(e, [w], np.array([0, 15, 2], np.int32), program)
        with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                    r"program 'two_segments' has 2 segment\(s\) but "
                                    r"inputs->num_segments is 1"):
            tilejit.linear_cross_entropy(e, [w], np.zeros(3, np.int32),
                                         tilejit.programs.two_segments())
        with self.assertRaisesRegex(tilejit.InvalidArgumentError, r"segment 'a' has no bias"):
            tilejit.linear_cross_entropy(e, [(w, zeros(10))], np.zeros(3, np.int32), program)

    def test_a_failed_call_does_not_disturb_the_next(self):
        q = zeros(1, 1, 4, 8)
        with self.assertRaises(tilejit.InvalidArgumentError):
            tilejit.attention(q, q, q, DOC())
        out = tilejit.attention(q, q, q, tilejit.programs.causal())  # the next call succeeds
        self.assertTrue(np.all(out == 0))


if __name__ == "__main__":
    unittest.main()
