"""Programs: the standard library (one function per program), the text form and its canonical
round trip, kinds, hashes and the loss queries."""

from __future__ import annotations

import unittest
from pathlib import Path

from support import tilejit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "programs"


class ProgramTest(unittest.TestCase):

    def test_every_standard_program_has_a_function(self):
        for name in tilejit.programs.STANDARD_PROGRAMS:
            program = getattr(tilejit.programs, name)()
            self.assertEqual(program.name, name)
            self.assertEqual(len(program.hash), 64)
            self.assertIn(program.kind, ("attention", "loss"))
            # The canonical text parses back to the same program.
            self.assertEqual(tilejit.program(program.text).hash, program.hash)

    def test_stdlib_matches_the_example_files(self):
        if not EXAMPLES.is_dir():
            self.skipTest("not run from the source tree")
        for name in ("causal", "doc_softcap", "two_segments", "llama3"):
            from_file = tilejit.load(EXAMPLES / f"{name}.tj")
            self.assertEqual(from_file, getattr(tilejit.programs, name)())

    def test_kinds_and_loss_queries(self):
        self.assertEqual(tilejit.programs.causal().kind, "attention")
        llama = tilejit.programs.llama3()
        self.assertEqual((llama.kind, llama.segment_count, llama.reduction), ("loss", 1, "mean"))
        none = tilejit.program("loss r {\n  segment a : [0, 4) weight W\n  reduction = none\n}")
        self.assertEqual(none.reduction, "none")
        with self.assertRaises(tilejit.InvalidArgumentError):
            tilejit.programs.causal().segment_count

    def test_loss_layout_from_the_library(self):
        two = tilejit.programs.two_segments()
        self.assertEqual(two.segments, (
            tilejit.programs.Segment("base", 0, 151936, "W_base", None),
            tilejit.programs.Segment("extra", 152066, 153090, "W_extra", None)))
        self.assertEqual([s.size for s in two.segments], [151936, 1024])
        head = tilejit.program("loss head {\n  segment text : [0, 100) weight W\n"
                               "  segment act : [110, 134) weight A bias a\n"
                               "  reduction = sum\n}\n")
        self.assertEqual(head.reduction, "sum")
        self.assertEqual(head.segments[1], ("act", 110, 134, "A", "a"))
        # The reduction comes from the program, not from its text: the default is spelled out.
        self.assertEqual(tilejit.program("loss d {\n  segment v : [0, 3) weight W\n}").reduction,
                         "mean")
        for query in ("segments", "reduction"):
            with self.assertRaisesRegex(tilejit.InvalidArgumentError,
                                        r"program 'causal' is an attention program"):
                getattr(tilejit.programs.causal(), query)

    def test_hash_follows_the_structure_not_the_spelling(self):
        a = tilejit.program("attention c {\n  mask = q >= kv   # causal\n}\n")
        b = tilejit.program("attention c {\n\n  mask = q >= kv\n}")
        c = tilejit.program("attention c {\n  mask = q > kv\n}")
        self.assertEqual(a.hash, b.hash)
        self.assertNotEqual(a.hash, c.hash)
        self.assertIn("attention c", repr(a))

    def test_library(self):
        self.assertRegex(tilejit.version(), r"^\d+\.\d+\.\d+")
        self.assertEqual(tilejit.__version__, tilejit.version())
        self.assertIsNotNone(tilejit.library_path())
        self.assertIsInstance(tilejit.gpu_available(), bool)
        held = tilejit.workspace_pool_held_bytes()
        self.assertIsInstance(held, int)
        if not tilejit.gpu_available():
            self.assertEqual(held, 0)
        tilejit.trim_workspace_pool()


if __name__ == "__main__":
    unittest.main()
