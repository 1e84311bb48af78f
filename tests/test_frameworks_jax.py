"""hkjit ops inside jax.jit (hkjit/frameworks/jax_ffi.py), on the CPU: what the traced call lowers
to (StableHLO text), without a GPU. What stands in: the device (sm_90a, host memory) and the loaded
kernel (a null function: nothing is launched, lowering only). Skipped where jax is not installed.
The GPU half (XLA running the kernels) is tests/test_frameworks_gpu.py."""

import re

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import hkjit  # noqa: E402
from hkjit import launch  # noqa: E402
from hkjit.frameworks import jax_ffi  # noqa: E402
from hkjit.ops._attention_args import BackwardArgs  # noqa: E402
from hkjit.ops.attention_backward import ARRAYS, DKDV_OP  # noqa: E402

from test_attention_backward_staged import HostMemoryDevice  # noqa: E402


@pytest.fixture
def sm90a(cache_dir, monkeypatch):
    """jax_ffi binds and plans for a stand-in sm_90a device; the kernel 'loads' as a null function."""
    dev = HostMemoryDevice()
    dev.context = 0

    class Loaded:
        function = 0
    monkeypatch.setattr(launch, "_launchers", {})
    monkeypatch.setattr(jax_ffi, "_device", lambda jax, device: dev)
    monkeypatch.setattr(jax_ffi, "_register", lambda jax: None)
    monkeypatch.setattr(launch.jit, "load_spec", lambda spec, *a, **k: Loaded())


def test_the_dq_the_dkdv_kernel_writes_is_an_aliased_result(sm90a):
    """attention_backward inside jax.jit: the dK/dV custom call takes dq as an operand and gives it
    back as a result aliased to it (output_operand_aliases), and the jitted function's dq, and a read
    of dq inside it, are that result, not the dQ call's (XLA never sees a write it does not know of)."""
    bf = jnp.bfloat16

    @jax.jit
    def grads(do, q, k, v, o, lse):
        dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=True)
        return dq, dk, dv, dq.astype(jnp.float32).sum(-1)
    args = (jnp.ones((1, 4, 100, 64), bf), jnp.ones((1, 4, 100, 64), bf), jnp.ones((1, 2, 90, 64), bf),
            jnp.ones((1, 2, 90, 64), bf), jnp.ones((1, 4, 100, 64), bf), jnp.ones((1, 4, 100), jnp.float32))
    text = grads.lower(*args).as_text()
    calls = re.findall(r"(%\d+):(\d+) = stablehlo\.custom_call @hkjit_launch\(([^)]*)\)(.*)", text)
    assert len(calls) == 2, text
    (prep, _, _, prep_attrs), (dkdv, n_results, operands, attrs) = calls
    assert "output_operand_aliases" not in prep_attrs
    # dkdv's operands: the arrays given, in ARRAYS order (q, k, v, grad_out, lse, delta, dq); its
    # results: dk, dv, dq, the semaphores (workspace), the dQ accumulators (scratch)
    given = [n for n in ARRAYS if n in ("q", "k", "v", "grad_out", "lse", "delta", "dq")]
    dq_operand = given.index("dq")
    assert operands.split(", ")[dq_operand] == f"{prep}#0", "dq: the dQ call's first result"
    assert int(n_results) == 5
    alias = re.findall(r"output_operand_alias<output_tuple_indices = \[(\d+)\], operand_index = (\d+)", attrs)
    assert alias == [("2", str(dq_operand))]
    assert re.search(rf"stablehlo\.convert {dkdv}#2 ", text), "the read of dq reads the aliased result"
    assert re.search(rf"return {dkdv}#2, {dkdv}#0, {dkdv}#1, ", text)
    # the handler's buffers: 7 operands, then results 7 dk, 8 dv, 9 dq, 10 workspace, 11 scratch; the
    # kernel's dq pointer is the result's (XLA's alias: the same memory, holding the operand's value)
    geometry = [int(x) for x in re.search(r"launch = dense<\[([^\]]*)\]>", attrs).group(1).split(", ")]
    assert geometry[11] == len(given) + 5 and geometry[9] == len(given) + 3, geometry
    flat = [int(x) for x in re.search(r"patches = dense<\[([^\]]*)\]>", attrs).group(1).split(", ")]
    where = {offset: buffer for kind, buffer, offset, _ in zip(*[iter(flat)] * 4)}
    assert where[BackwardArgs.dq.offset] == len(given) + 2
    assert sorted(where.values()) == [i for i in range(len(given) + 5) if i != dq_operand]


def test_an_op_updating_nothing_aliases_nothing(sm90a):
    """Ops without updated arrays (all but attention_bwd_dkdv) lower as before: no aliases."""
    from hkjit import ops
    assert [n for n in ops.names() if ops.get(n).updated_names] == [DKDV_OP.name]

    @jax.jit
    def f(x, w):
        return hkjit.rms_norm(x, w)
    text = f.lower(jnp.ones((4, 64), jnp.bfloat16), jnp.ones(64, jnp.bfloat16)).as_text()
    assert "hkjit_launch" in text and "output_operand_aliases" not in text
