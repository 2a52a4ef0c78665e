"""Code the importers write into input.py, and the probe runs itself (one text, so the sizes the
probe validated are the sizes input.py produces)."""

# KernelBench: the problem module with some module-level sizes replaced. Derived sizes
# (`dim2 = dim * 2`) follow, because the module is executed again with the new values.
PROBLEM_LOADER = '''
def _problem_module(path, sizes):
    """The problem file at `path`, executed with its module-level `sizes` replaced."""
    import ast
    import types

    tree = ast.parse(path.read_text(), filename=str(path))
    body = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in sizes for t in node.targets):
            for target in node.targets:  # `height = width = 256`: one assignment per name
                value = node.value
                if isinstance(target, ast.Name) and target.id in sizes:
                    value = ast.Constant(sizes[target.id])
                body.append(ast.Assign(targets=[target], value=value))
            continue
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \\
                and node.target.id in sizes:
            node.value = ast.Constant(sizes[node.target.id])
        body.append(node)
    tree.body = body
    ast.fix_missing_locations(tree)
    module = types.ModuleType("atrex_kernelbench_problem")
    module.__file__ = str(path)
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module
'''

KERNELBENCH_INPUT = '''"""Inputs of the KernelBench problem in reference.py.

Written by `atrex import kernelbench`.

The problem's module-level sizes are the keyword arguments; reference.py is executed with them and
its get_inputs() is called (the judge has seeded torch before), its values named after
Model.forward's parameters and moved to the GPU (the runner maps that to the CPU on a CPU run).
"""

import pathlib

import torch

_SOURCE = pathlib.Path(__file__).with_name("reference.py")
_FORWARD = {forward!r}
{loader}

def _make_inputs({params}):
    problem = _problem_module(_SOURCE, {sizes_dict})
    values = problem.get_inputs()
    return {{name: value.to("cuda") if isinstance(value, torch.Tensor) else value
            for name, value in zip(_FORWARD, values)}}
'''

# FlashInfer-Bench: random tensors for a definition's inputs, by dtype.
RANDOM_TENSOR = '''
def _random(shape, dtype, device):
    """Random values of a definition's dtype. Integer inputs are drawn in [0, 16): an index or
    offset tensor with structure (indptr, page tables) needs its own generator here."""
    if dtype in ("float32", "float16", "bfloat16"):
        return torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    if dtype.startswith("float8"):
        values = torch.randn(shape, dtype=torch.float32, device=device).clamp_(-2.0, 2.0)
        return values.to(getattr(torch, dtype))
    if dtype == "float4_e2m1":
        bits = torch.randint(0, 256, shape, dtype=torch.uint8, device=device)
        return bits.view(torch.float4_e2m1fn_x2)
    if dtype == "bool":
        return torch.randint(0, 2, shape, device=device).bool()
    return torch.randint(0, 16, shape, dtype=getattr(torch, dtype), device=device)
'''

FLASHINFER_INPUT = '''"""Inputs of the FlashInfer-Bench definition {name!r}.

Written by `atrex import flashinfer-bench`.

The definition's axes are the keyword arguments (const axes too, so a CPU shape can scale them
down); each input tensor is drawn at random in its dtype, scalar inputs come from the workload.
"""

import torch

_TENSORS = {tensors!r}  # name -> (axis names, dtype), in the definition's order
_SCALARS = {scalars!r}  # scalar inputs, in the definition's order
{random}

def _make_inputs({params}):
    axes = {axes_dict}
    scalars = {scalars_dict}
    inputs = {{}}
    for name, (shape, dtype) in _TENSORS.items():
        inputs[name] = _random(tuple(axes[a] for a in shape), dtype, "cuda")
    for name in _SCALARS:
        inputs[name] = scalars[name]
    return inputs
'''

FLASHINFER_REFERENCE_TAIL = '''

# --- written by `atrex import flashinfer-bench`: the definition's `run` as a Model ----------------
import torch as _atrex_torch  # noqa: E402


class Model(_atrex_torch.nn.Module):
    def forward(self, {params}):
        return run({args})
'''
