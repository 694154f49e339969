#!/usr/bin/env python3
"""The Hopper backward's 16-byte dK / dV epilogue, checked on a model of a warp's lanes.

An m64nN wgmma accumulator gives lane l of a warp (quad g = l >> 2, t = l & 3) the columns
8n + 2t and 8n + 2t + 1 of rows 16 * warp + g and + 8, for every n8 block n. The epilogue packs
each pair into one 32-bit word, then for every four blocks n = 4k .. 4k + 3 calls
quad_transpose (kernels_templates/wgmma.cuh): two rounds of __shfl_xor_sync within the quad
(across lanes t and t ^ 2, then t and t ^ 1), each lane sending the word of one slot and
overwriting that slot with what it receives. Lane t then stores its four words as 16 bytes at
column 8 * (4k + t).

This script runs those rounds on a model of the 32 lanes (a shuffle is every lane reading its
partner's value before any lane writes), as the device code writes them, and checks what the
stores write: every column of every row once, the value the accumulator held there. A broken
variant must be found to fail, which shows the check can: the first round's lanes sending the
word of the slot they do not overwrite (the rounds' order alone does not matter: either order
transposes).

  python3 tests/models/quad_transpose.py
"""
import sys


def shfl_xor(values, mask):
    """__shfl_xor_sync over all 32 lanes: lane l gets what lane l ^ mask offered."""
    return [values[lane ^ mask] for lane in range(32)]


CORRECT = ((2, "hi", False), (1, "lo", False))
BROKEN = ((2, "hi", True), (1, "lo", False))


def quad_transpose(words, rounds=CORRECT):
    """words[lane] = [w0, w1, w2, w3]; the two rounds of wgmma.cuh's quad_transpose (a round:
    the xor mask, which pairs of slots it exchanges, and whether the selection is inverted)."""
    words = [list(w) for w in words]
    for mask, pairs, inverted in rounds:
        for m in range(2):
            # "hi": the off-diagonal 2 x 2 blocks (slots m, 2 + m); "lo": the words within each
            # block (slots 2m, 2m + 1). A lane whose bit (the mask's) is set exchanges its low
            # slot, its partner the high one.
            low, high = (m, 2 + m) if pairs == "hi" else (2 * m, 2 * m + 1)
            use_low = [(lane & mask) != 0 for lane in range(32)]
            # the word of the slot it overwrites goes out (the broken variant sends the other)
            offered = [words[lane][low if use_low[lane] != inverted else high]
                       for lane in range(32)]
            got = shfl_xor(offered, mask)
            for lane in range(32):
                words[lane][low if use_low[lane] else high] = got[lane]
    return words


def check(rounds, columns=128):
    """Runs the epilogue on a warp's two rows per quad; returns a failure or None."""
    blocks = columns // 8
    # the accumulator pair lane l holds of row (g, half) in block n, tagged (row, first column)
    written = {}
    for half in range(2):
        for k in range(blocks // 4):
            words = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                words.append([((g, half), 8 * (4 * k + j) + 2 * t) for j in range(4)])
            words = quad_transpose(words, rounds)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                col = 8 * (4 * k + t)  # the 16-byte store: columns col .. col + 7
                for j, (row, first) in enumerate(words[lane]):
                    if row != (g, half):
                        return f"lane {lane} stores row {row} into row {(g, half)}"
                    if first != col + 2 * j:
                        return (f"lane {lane} stores column pair {first} at column {col + 2 * j}"
                                f" (k {k}, half {half})")
                    key = (row, first)
                    if key in written:
                        return f"row {row} column {first} written twice"
                    written[key] = True
    expected = 8 * 2 * columns // 2
    if len(written) != expected:
        return f"{len(written)} column pairs written, {expected} expected"
    return None


def main():
    for columns in (64, 128):
        failure = check(CORRECT, columns)
        if failure:
            print(f"quad_transpose, {columns} columns: {failure}")
            return 1
    broken = check(BROKEN)
    if broken is None:
        print("the broken variant passed: the check cannot fail")
        return 1
    print(f"ok: 64 and 128 columns; the broken variant fails ({broken})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
