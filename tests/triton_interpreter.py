"""Whether Triton's interpreter (TRITON_INTERPRET=1) can run this project's kernels here, and if not why, for the
skip reason of the interpreted kernel tests. One known failure: some Triton releases turn a scalar in a loop bound
into an int with int() of a one-element array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be
converted to Python scalars"); the GPU image pairs such a Triton with such a NumPy. The probe runs a kernel with
both loop bounds our kernels use (a scalar argument, a loaded value) in a real interpreted subprocess; any other
failure is not a reason to skip: the interpreted tests then run and show it."""
from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

from tests.checkout_path import ROOT, with_checkout

KNOWN = "only 0-dimensional arrays can be converted to Python scalars"

PROBE = textwrap.dedent("""
    import torch, triton
    import triton.language as tl

    @triton.jit
    def loops(X, N, out, vocab, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], tl.float32)
        for it in range(tl.cdiv(vocab, BLOCK)):  # a scalar argument as the bound (fused sampling)
            o = it * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(X + o, mask=o < vocab, other=0.0)
        n = tl.load(N)
        for start in range(0, n, BLOCK):  # a loaded value as the bound (decode attention)
            o = start + tl.arange(0, BLOCK)
            acc += tl.load(X + o, mask=o < n, other=0.0)
        tl.store(out, tl.sum(acc, 0))

    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(1)
    loops[(1,)](x, torch.tensor([20]), out, 40, BLOCK=16)
    assert out.item() == x.sum().item() + x[:20].sum().item(), out
    print("PROBE ok")
""")


@functools.lru_cache(maxsize=1)
def interpreter_problem() -> str | None:
    """A skip reason where the interpreter has the known failure; None where it runs the probe (or fails some
    other way, which the tests themselves then report)."""
    run = subprocess.run([sys.executable, "-c", PROBE], check=False, cwd=ROOT, capture_output=True, text=True,
                         env=with_checkout(TRITON_INTERPRET="1"), timeout=600)
    if run.returncode == 0 or KNOWN not in run.stderr:
        return None
    import numpy
    import triton

    return (f"Triton {triton.__version__}'s interpreter cannot run a loop bounded by a scalar under NumPy "
            f"{numpy.__version__} (it calls int() on a one-element array: '{KNOWN}'); "
            "the compiled kernel runs in this file's CUDA tests instead")
