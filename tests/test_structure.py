"""The shape of the house, checked on the CPU: layers import only downward, no import cycle,
no module over ~400 lines, every op module on the one skeleton, and every tile an op can
launch instantiated in its ``.cu`` file (so CI's nvcc build compiles it)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tensorconv
from tensorconv import ops
from tests import cu_instances

ROOT = Path(tensorconv.__file__).resolve().parent
KERNELS = ROOT.parent / "kernels_cu"

# The layers, bottom first: a module may import its own layer and the ones below it.
LAYERS = (
    ("tensorconv", "tensorconv.backend", "tensorconv.precision", "tensorconv.files",
     "tensorconv.results"),
    ("tensorconv.checks", "tensorconv.data", "tensorconv.blocksparse"),
    ("tensorconv.cuda", "tensorconv.graph", "tensorconv.scratch"),
    ("tensorconv.timing", "tensorconv.tunecache"),
    ("tensorconv.reference", "tensorconv.bench"),
    ("tensorconv.ops",),
    ("tensorconv.autograd",),
    ("tensorconv.decomp", "tensorconv.tuning"),
    ("tensorconv.nn",),
    ("tensorconv.engine", "tensorconv.distributed"),
    ("tensorconv.compress",),
    ("tensorconv.cli", "tensorconv.__main__"),
)
# Imports inside functions that are allowed: a Tensor's operators and backward() call the
# autograd functions, which are defined on Tensors (Chainer's FunctionNode pair).
LOCAL_IMPORTS_ALLOWED = {("tensorconv.autograd.tensor", "tensorconv.autograd.function"),
                         ("tensorconv.autograd.tensor", "tensorconv.autograd.functions")}
MAX_LINES = 420


def _modules() -> dict:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _resolve(target: str) -> str:
    """The module an import names (``from a.b import c``: ``a.b.c`` when that is a module)."""
    return target if target in MODULES else target.rsplit(".", 1)[0]


def _imports(name: str, path: Path) -> list:
    """``(imported module, inside a function)`` for every tensorconv import of a module."""
    tree = ast.parse(path.read_text())
    local = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            targets = [_resolve(f"{base}.{a.name}") for a in node.names]
        else:
            continue
        out += [(t, id(node) in local) for t in targets if t.split(".")[0] == "tensorconv"]
    return out


def _layer(name: str) -> int:
    for i, members in enumerate(LAYERS):
        if any(name == m or name.startswith(m + ".") for m in members if m != "tensorconv"):
            return i
    if name == "tensorconv":
        return 0
    raise AssertionError(f"{name} belongs to no layer of LAYERS: add it")


def test_layers_import_only_downward():
    wrong = []
    for name, path in MODULES.items():
        for target, _ in _imports(name, path):
            if _layer(target) > _layer(name):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports that go up a layer:\n" + "\n".join(wrong)


def test_no_function_local_imports_hide_dependencies():
    local = [f"{name} imports {target} inside a function"
             for name, path in MODULES.items() for target, inside in _imports(name, path)
             if inside and (name, target) not in LOCAL_IMPORTS_ALLOWED]
    assert not local, "\n".join(local)


def test_no_import_cycle():
    graph = {name: {t for t, _ in _imports(name, path) if t in MODULES and t != name}
             for name, path in MODULES.items()}
    # a package's __init__ importing its own submodules is how packages work, not a cycle
    exempt = set(LOCAL_IMPORTS_ALLOWED)
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if (v, w) in exempt:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_no_module_is_over_about_400_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules to split: {long}"


def test_the_layer_check_sees_an_upward_import():
    """The checks above can fail: ops importing tuning is an upward import."""
    assert _layer("tensorconv.tuning.oracle") > _layer("tensorconv.ops.core_conv")
    assert _resolve("tensorconv.ops.direct_conv") == "tensorconv.ops.direct_conv"
    assert _resolve("tensorconv.ops.conv2d") == "tensorconv.ops"


# --------------------------------------------------------------------------- op skeleton

TILED = [m for m in ops.FAMILIES.values() if hasattr(m, "Tile")]


@pytest.mark.parametrize("module", ops.FAMILIES.values(), ids=lambda m: m.FILE)
def test_every_op_module_is_named_after_its_kernel_file(module):
    assert module.__name__.rsplit(".", 1)[1] == Path(module.FILE).stem
    assert (KERNELS / module.FILE).is_file()
    assert callable(module.kernels) and callable(module.instantiations)


@pytest.mark.parametrize("module", TILED, ids=lambda m: m.FILE)
def test_tiled_op_modules_follow_the_skeleton(module):
    for name in ("Problem", "Tile", "supported", "candidates", "default_tile"):
        assert hasattr(module, name), f"{module.__name__} lacks {name}"
    for method in ("smem_bytes", "grid"):
        params = list(inspect.signature(getattr(module.Tile, method)).parameters)
        assert len(params) == 2, f"{module.__name__}.Tile.{method} takes {params}"
    assert list(inspect.signature(module.candidates).parameters)[:2] == ["p", "facts"]
    assert list(inspect.signature(module.default_tile).parameters)[:2] == ["p", "facts"]
    assert module.Tile.__dataclass_params__.frozen


@pytest.mark.parametrize("file", sorted(p.name for p in KERNELS.glob("*.cu")))
def test_every_kernel_file_has_an_op_module(file):
    # the launch floor (bench) and the graph timings' hold (timing) are measuring tools
    assert file in ops.FAMILIES or file in ("launch_floor.cu", "timing_hold.cu")


@pytest.mark.parametrize("module", ops.FAMILIES.values(), ids=lambda m: m.FILE)
def test_cu_instantiations_are_the_tiles_the_op_can_launch(module):
    text = (KERNELS / module.FILE).read_text()
    want, have = set(module.instantiations()), cu_instances.read(text)
    if want != have:
        block = cu_instances.block(module, sorted(want), cu_instances.signatures(text))
        pytest.fail(f"{module.FILE}: missing {sorted(want - have)[:5]}, extra "
                    f"{sorted(have - want)[:5]}; its block should read:\n{block}")


def test_the_instantiation_reader_sees_every_macro_call():
    text = ("#ifndef __CUDACC_RTC__\n#define TC_I_K(...) template __global__ void k<__VA_ARGS__>"
            "(const float*, \\\n int);\nTC_I_K(1, 2) TC_I_K(3,4)\n#undef TC_I_K\n#endif\n")
    assert cu_instances.read(text) == {"k<1, 2>", "k<3, 4>"}
