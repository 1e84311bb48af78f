"""hkjit ops as torch.library ops (hkjit/frameworks/torch_ops.py), on the CPU: shape inference on
meta tensors for every op, the schemas, torch.library.opcheck and torch.compile(fullgraph=True)
running real kernels on the CDNA simulator (CPU tensors are staged to sim:gfx950), and the launch
path's CUDA-graph capture refusal. The GPU half is tests/test_frameworks_gpu.py."""

import pytest

import hkjit
from hkjit import launch, ops
from hkjit.errors import DeviceError, GraphCaptureError, InvalidArgumentError

torch = pytest.importorskip("torch")
from hkjit.frameworks import torch_ops  # noqa: E402

from conftest import needs_clang  # noqa: E402

BF = torch.bfloat16


def meta(*shape, dtype=BF):
    return torch.empty(*shape, dtype=dtype, device="meta")


# op name -> (call on meta tensors, expected (shape, dtype) of each returned tensor)
CASES = {
    "gemm": (lambda: hkjit.gemm(meta(40, 24), meta(24, 56)), [((40, 56), BF)]),
    "rms_norm": (lambda: hkjit.rms_norm(meta(2, 3, 64), meta(64)), [((2, 3, 64), BF)]),
    "add_rms_norm": (lambda: hkjit.add_rms_norm(meta(5, 64), meta(5, 64), meta(64)), [((5, 64), BF)] * 2),
    "layer_norm": (lambda: hkjit.layer_norm(meta(5, 96), meta(96), meta(96)), [((5, 96), BF)]),
    "dropout_add_layer_norm": (lambda: hkjit.dropout_add_layer_norm(meta(5, 64), meta(5, 64), meta(64), meta(64),
                                                                     0.1, seed=2 ** 63 + 5),
                               [((5, 64), BF)] * 2),
    "silu": (lambda: hkjit.silu(meta(7, 33)), [((7, 33), BF)]),
    "gelu": (lambda: hkjit.gelu(meta(7, 33)), [((7, 33), BF)]),
    "gelu_tanh": (lambda: hkjit.gelu_tanh(meta(7, 33)), [((7, 33), BF)]),
    "relu": (lambda: hkjit.relu(meta(7, 33)), [((7, 33), BF)]),
    "tanh": (lambda: hkjit.tanh(meta(7, 33)), [((7, 33), BF)]),
    "silu_and_mul": (lambda: hkjit.silu_and_mul(meta(3, 5, 128)), [((3, 5, 64), BF)]),
    "gelu_and_mul": (lambda: hkjit.gelu_and_mul(meta(3, 128), "tanh"), [((3, 64), BF)]),
    "softmax": (lambda: hkjit.softmax(meta(9, 200, dtype=torch.float32)), [((9, 200), torch.float32)]),
    "rope": (lambda: hkjit.rope(meta(2, 4, 16, 64), meta(16, 32, dtype=torch.float32),
                                meta(16, 32, dtype=torch.float32)), [((2, 4, 16, 64), BF)]),
    "rope_qk": (lambda: hkjit.rope_qk(meta(2, 4, 16, 64), meta(2, 2, 16, 64), meta(16, 32, dtype=torch.float32),
                                      meta(16, 32, dtype=torch.float32)),
                [((2, 4, 16, 64), BF), ((2, 2, 16, 64), BF)]),
    "topk": (lambda: hkjit.topk(meta(6, 1000, dtype=torch.float32), 8),
             [((6, 8), torch.float32), ((6, 8), torch.int64)]),
    "attention": (lambda: hkjit.attention(meta(2, 8, 100, 64), meta(2, 2, 120, 64), meta(2, 2, 120, 64),
                                          return_lse=True),
                  [((2, 8, 100, 64), BF), ((2, 8, 100), torch.float32)]),
    "attention_bwd_dq": (lambda: hkjit.attention_backward(meta(2, 4, 64, 128), meta(2, 4, 64, 128),
                                                          meta(2, 1, 80, 128), meta(2, 1, 80, 128),
                                                          meta(2, 4, 64, 128), meta(2, 4, 64, dtype=torch.float32)),
                         [((2, 4, 64, 128), BF), ((2, 1, 80, 128), BF), ((2, 1, 80, 128), BF)]),
    "causal_conv1d": (lambda: hkjit.causal_conv1d(meta(2, 48, 100), meta(48, 4), meta(48), activation="silu"),
                      [((2, 48, 100), BF)]),
    "causal_conv1d_update": (lambda: hkjit.causal_conv1d_update(meta(3, 48), meta(3, 48, 3), meta(48, 4)),
                             [((3, 48), BF)]),
}
CASES["attention_bwd_dkdv"] = CASES["attention_bwd_dq"]       # one call launches both


@pytest.mark.parametrize("name", ops.names())
def test_meta_tensors_give_meta_results(cache_dir, name):
    """Every registered op infers its outputs on meta tensors (its fake implementation is its own
    bind), compiling nothing."""
    assert name in CASES, f"no meta case for {name}: add one to CASES (every registered op must have one)"
    call, expected = CASES[name]
    got = call()
    got = got if isinstance(got, tuple) else (got,)
    assert [(tuple(t.shape), t.dtype) for t in got] == [(tuple(s), d) for s, d in expected]
    assert all(t.device.type == "meta" for t in got)
    assert not (cache_dir / "entries").exists(), "shape inference compiles nothing"


def _mutated(schema) -> list:
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


@pytest.mark.parametrize("name", ops.names())
def test_every_op_registers_both_forms(name):
    """hkjit::<op> (outputs allocated) and hkjit::<op>.into (outputs given: declared mutated), one
    returned tensor per output name; the arrays an op updates (updated_names) declared mutated in
    both; returns_for names only outputs and updated arrays."""
    op = ops.get(name)
    torch_ops.ensure(name)
    packet = getattr(torch.ops.hkjit, name)
    functional, into = packet.default._schema, packet.into._schema
    assert functional.is_mutable == bool(op.updated_names) and into.is_mutable
    assert len(functional.returns) == len(into.returns) == len(op.output_names)
    assert all(r.alias_info is None for r in functional.returns + into.returns), "returns never alias"
    assert _mutated(functional) == [n for n in op.array_names if n in op.updated_names]
    assert _mutated(into) == [n for n in op.array_names if n in op.output_names or n in op.updated_names]
    assert not set(op.updated_names) & set(op.output_names)
    for options in ({}, {"return_lse": True}):
        assert set(op.returns_for(options)) <= set(op.output_names + op.updated_names)


def test_the_sm90a_dkdv_op_declares_the_dq_it_writes():
    """attention_bwd_dkdv's sm_90a kernel writes dq, an input of the op: the schema says dq is
    mutated (the op's updated_names, for every target), and every target's binding writes no
    array beyond its outputs and those (host calls copy Binding.updates back)."""
    from hkjit import interop, targets
    from hkjit.ops.attention_backward import ARRAYS, DKDV_OP
    from test_attention_backward_staged import HostMemoryDevice
    assert DKDV_OP.updated_names == ("dq",) and ops.get("attention_bwd_dq").updated_names == ()
    torch_ops.ensure("attention_bwd_dkdv")
    assert "Tensor(a!)? dq" in str(torch.ops.hkjit.attention_bwd_dkdv.default._schema)
    arrays = dict.fromkeys(ARRAYS)
    arrays.update(q=torch.randn(1, 4, 100, 64).to(BF), k=torch.randn(1, 2, 90, 64).to(BF),
                  grad_out=torch.randn(1, 4, 100, 64).to(BF), delta=torch.randn(1, 4, 100))
    arrays.update(v=torch.randn(1, 2, 90, 64).to(BF), lse=torch.randn(1, 4, 100), dq=torch.empty(1, 4, 100, 64).to(BF))
    described = {n: None if a is None else interop.describe(a) for n, a in arrays.items()}
    for target in ("sm_90a", "gfx942", "gfx950"):
        dev = HostMemoryDevice()
        dev.target = targets.parse(target)
        binding = DKDV_OP.bind(described, {"causal": True, "layout": "bhnd"}, dev)
        assert set(binding.updates) <= set(DKDV_OP.updated_names), target
        assert binding.updates == (("dq",) if target == "sm_90a" else ()), target
        assert binding.returns == ("dk", "dv", "dq") == DKDV_OP.returns_for({})


def test_a_compiled_graph_reads_dq_after_the_dkdv_call_writes_it():
    """torch.compile of the backward on meta tensors, functionalized (AOTAutograd): the dK/dV call
    is an auto_functionalized op over dq, and a later read of dq reads its result, so no compiler
    may move that read before the call (with dq undeclared it read the dQ call's result)."""
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def step(do, q, k, v, o, lse):
        dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, causal=True)
        return dq.float() * 2, dk, dv
    torch._dynamo.reset()
    args = (meta(1, 4, 100, 64), meta(1, 4, 100, 64), meta(1, 2, 90, 64), meta(1, 2, 90, 64), meta(1, 4, 100, 64),
            meta(1, 4, 100, dtype=torch.float32))
    got = torch.compile(step, fullgraph=True, backend=aot_autograd(fw_compiler=keep))(*args)
    assert [tuple(t.shape) for t in got] == [(1, 4, 100, 64), (1, 2, 90, 64), (1, 2, 90, 64)]
    nodes = list(graphs[0].graph.nodes)
    read = next(n for n in nodes if n.target == torch.ops.aten._to_copy.default)
    source = read.args[0].args[0]             # the call whose result (a getitem of it) is read
    assert source.target in (torch.ops.higher_order.auto_functionalized,
                             getattr(torch.ops.higher_order, "auto_functionalized_v2", None))
    assert source.args[0] == torch.ops.hkjit.attention_bwd_dkdv.default
    assert nodes.index(source) < nodes.index(read)


def test_a_binding_that_writes_an_undeclared_array_is_refused(monkeypatch):
    """An op whose binding says its kernel writes an input the op does not declare (updated_names)
    is an op bug: compilers would not know; the launch path refuses it before compiling."""
    from hkjit import interop, runtime
    rms = ops.get("rms_norm")
    real_bind = type(rms).bind

    def bind(self, arrays, options, device):
        b = real_bind(self, arrays, options, device)
        if b is not None:
            b.updates = ("weight",)
        return b
    monkeypatch.setattr(type(rms), "bind", bind)
    monkeypatch.setattr(launch, "_launchers", {})
    x, w = interop.describe(torch.randn(4, 64).to(BF)), interop.describe(torch.randn(64).to(BF))
    with pytest.raises(InvalidArgumentError, match="does not declare in updated_names"):
        launch._launcher(rms, (x, w, None), {}, runtime.from_string("sim:gfx950"), None, {})


def test_first_registration_registers_every_op():
    """A graph torch.compile loads from its on-disk cache is not traced: the ops its backward calls
    (attention's hkjit::attention_bwd_dq) must exist once any hkjit op has been registered. A fresh
    process, since registration is per process."""
    import subprocess
    import sys
    code = ("import torch; from hkjit import ops; from hkjit.frameworks import torch_ops\n"
            "torch_ops.ensure('attention')\n"
            "missing = [n for n in ops.names() if not hasattr(torch.ops.hkjit, n)]\n"
            "assert not missing, missing\n"
            "torch.ops.hkjit.attention_bwd_dq.default, torch.ops.hkjit.attention_bwd_dkdv.into\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_out_and_in_place_calls_mutate_on_meta():
    x, w = meta(4, 64), meta(64)
    assert hkjit.rms_norm(x, w, out=x) is x
    out = meta(40, 56, dtype=torch.float32)
    assert hkjit.gemm(meta(40, 24), meta(24, 56), out=out) is out
    o, lse = hkjit.attention(meta(1, 2, 64, 64), meta(1, 2, 64, 64), meta(1, 2, 64, 64), out=meta(1, 2, 64, 64),
                             return_lse=True)
    assert lse.shape == (1, 2, 64) and o.shape == (1, 2, 64, 64)


def test_bad_input_is_refused_at_trace_time():
    with pytest.raises(InvalidArgumentError, match="inner dimensions differ"):
        hkjit.gemm(meta(40, 24), meta(25, 56))
    with pytest.raises(DeviceError, match="different devices"):
        hkjit.rms_norm(meta(4, 64), torch.empty(64, dtype=BF))
    with pytest.raises(InvalidArgumentError, match="finite"):
        hkjit.rms_norm(meta(4, 64), meta(64), float("nan"))


def test_config_round_trips_exact_values():
    op = ops.get("dropout_add_layer_norm")
    config = torch_ops.encode(op, (0.1, 1e-5, 2 ** 64 - 1), (("approximate", "tanh"),), None, None, {"vec": 4})
    scalars, options, device, compiler, tiles = torch_ops.decode(config)
    assert scalars == (0.1, 1e-5, 2 ** 64 - 1) and options == (("approximate", "tanh"),) and tiles == {"vec": 4}
    gemm = ops.get("gemm")
    assert torch_ops.decode(torch_ops.encode(gemm, (1.0, 0.0), (("out_dtype", torch.float32),), None, None,
                                             {}))[1] == (("out_dtype", "float32"),)


def test_fullgraph_traces_a_block_with_no_graph_break():
    """norm -> gemm -> activation -> gemm: one graph of hkjit ops (dynamo runs on meta tensors)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def block(x, w_norm, w1, w2):
        return hkjit.gemm(hkjit.silu_and_mul(hkjit.gemm(hkjit.rms_norm(x, w_norm), w1)), w2)

    torch._dynamo.reset()
    f = torch.compile(block, fullgraph=True, backend=backend)
    y = f(meta(16, 64), meta(64), meta(64, 256), meta(128, 64))
    assert y.shape == (16, 64) and y.device.type == "meta"
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.hkjit.rms_norm.default, torch.ops.hkjit.gemm.default,
                       torch.ops.hkjit.silu_and_mul.default, torch.ops.hkjit.gemm.default]


# --- real kernels on the simulator ---------------------------------------------------------------
@pytest.fixture
def sim(cache_dir, monkeypatch):
    monkeypatch.setenv("HKJIT_DEVICE", "sim:gfx950")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _rel(got, ref):
    return ((got.double() - ref).norm() / ref.norm()).item()


@needs_clang
def test_compiled_block_matches_eager_on_the_simulator(sim):
    """torch.compile(fullgraph=True) of rms_norm -> gemm -> silu_and_mul -> gemm, run (aot_eager:
    AOTAutograd, functionalization) on sim:gfx950, against a float64 reference and eager hkjit."""
    g = torch.Generator().manual_seed(14)
    x = torch.randn(24, 64, generator=g).to(BF)
    wn = (torch.rand(64, generator=g) + 0.5).to(BF)
    w1 = (torch.randn(64, 96, generator=g) / 8).to(BF)
    w2 = (torch.randn(48, 40, generator=g) / 8).to(BF)

    def block(x, wn, w1, w2):
        h = hkjit.rms_norm(x, wn, 1e-6)
        return hkjit.gemm(hkjit.silu_and_mul(hkjit.gemm(h, w1)), w2)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(x, wn, w1, w2)
    eager = block(x, wn, w1, w2)
    xd = x.double()
    h = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wn.double()).to(BF).double()
    u = (h @ w1.double()).to(BF).double()
    a = (torch.nn.functional.silu(u[:, :48]) * u[:, 48:]).to(BF).double()
    ref = a @ w2.double()
    assert compiled.shape == (24, 40) and compiled.dtype == BF
    assert _rel(compiled, ref) < 2e-2
    assert torch.equal(compiled, eager), "the compiled graph runs the same kernels"


@needs_clang
def test_opcheck_on_the_simulator(sim):
    """torch.library.opcheck: schema, fake vs real, autograd registration, AOT dispatch."""
    x, w = torch.randn(4, 64).to(BF), (torch.rand(64) + 0.5).to(BF)
    rms = ops.get("rms_norm")
    torch_ops.ensure("rms_norm")
    config = torch_ops.encode(rms, (1e-6,), (), None, None, {})
    torch.library.opcheck(torch.ops.hkjit.rms_norm.default, (x, w, config))
    torch.library.opcheck(torch.ops.hkjit.rms_norm.into, (x, w, torch.empty_like(x), config))
    torch_ops.ensure("silu_and_mul")
    torch.library.opcheck(torch.ops.hkjit.silu_and_mul.default,
                          (torch.randn(3, 128).to(BF), torch_ops.encode(ops.get("silu_and_mul"), (), (), None, None,
                                                                         {})))


@needs_clang
def test_compiled_in_place_call_writes_its_input(sim):
    x, w = torch.randn(6, 64).to(BF), (torch.rand(64) + 0.5).to(BF)

    def f(x, w):
        hkjit.rms_norm(x, w, out=x)
        return x * 2
    want = hkjit.rms_norm(x, w) * 2
    got_x = x.clone()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(got_x, w)
    assert torch.equal(got, want) and torch.equal(got_x * 2, want)


@needs_clang
def test_compiled_attention_trains_on_the_simulator(sim):
    """Attention under torch.compile with inputs that require grad: hkjit::attention's registered
    autograd (AttentionOp.torch_backward -> attention_bwd_dq / _dkdv) gives eager autograd's
    gradients (hkjit's autograd.Function), on sim:gfx950."""
    g = torch.Generator().manual_seed(7)
    q, k, v = ((torch.randn(1, 2, 64, 64, generator=g) * 0.5).to(BF).requires_grad_() for _ in range(3))
    w = torch.randn(1, 2, 64, 64, generator=g).to(BF)

    def loss(q, k, v):
        return (hkjit.attention(q, k, v, causal=True).float() * w.float()).sum()
    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(torch.compile(loss, fullgraph=True, backend="aot_eager")(q, k, v), (q, k, v))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


# --- CUDA graph capture: refused where it would compile -------------------------------------------
class _Capturing:
    """A device stand-in whose every stream is capturing."""
    kind, index = "cuda", 0

    def __init__(self, real):
        self.real = real
        self.target, self.multiprocessors = real.target, getattr(real, "multiprocessors", 1)

    def is_capturing(self, stream):
        return True


def test_a_first_call_during_capture_is_refused_before_compiling(cache_dir):
    from hkjit import interop, runtime
    dev = _Capturing(runtime.from_string("sim:gfx950"))
    x = interop.describe(torch.randn(4, 64).to(BF))
    w = interop.describe(torch.randn(64).to(BF))
    with pytest.raises(GraphCaptureError, match="warm-up"):
        launch._launcher(ops.get("rms_norm"), (x, w, None), {}, dev, None, {}, stream=7)
    assert not (cache_dir / "entries").exists()
    with pytest.raises(GraphCaptureError, match="capturing a CUDA graph"):
        launch.refuse_capture("gemm", dev, 7, "allocate its workspace")
    launch.refuse_capture("gemm", object(), 7, "anything")      # devices that cannot tell: no check


def test_tracing_is_false_in_eager():
    assert launch.tracing() is False
