"""Reading and writing the explicit template instantiations of a ``kernels_cu/*.cu`` file.

Each file ends with one block that NVRTC skips and CI's offline nvcc build compiles
(``TC_SKIP_INSTANCES`` leaves it out too, for a build of a chosen few)::

    #if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
    #define TC_I_KERNEL(...) template __global__ void kernel<__VA_ARGS__>(signature);
    TC_I_KERNEL(3, 3, 1) TC_I_KERNEL(...)
    #undef TC_I_KERNEL
    #endif

one macro per templated kernel, one level deep, invoked with literal arguments, so that
the names it instantiates can be read here without a preprocessor.
"""

from __future__ import annotations

import re

_DEFINE = re.compile(r"#define\s+(\w+)\(\.\.\.\)\s+template __global__ void (\w+)<__VA_ARGS__>"
                     r"\s*\(([^;]*)\);")
_BLOCK = re.compile(r"\n*#if(?:ndef __CUDACC_RTC__| !defined\(__CUDACC_RTC__\))[^\n]*\n"
                    r".*?#endif\n?", re.DOTALL)
GUARD = "#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)"


def read(text: str) -> set:
    """The name expressions (``kernel<a, b>``) the file's instantiation block instantiates."""
    text = text.replace("\\\n", " ")
    calls = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    names = set()
    for macro, kernel, _ in _DEFINE.findall(text):
        for args in re.findall(rf"\b{macro}\(([^()]*)\)", calls):
            names.add(f"{kernel}<{', '.join(a.strip() for a in args.split(','))}>")
    return names


def signatures(text: str) -> dict:
    """kernel -> parameter list of the instantiation macros in ``text``."""
    return {k: " ".join(sig.split()) for _, k, sig in _DEFINE.findall(text.replace("\\\n", " "))}


def block(module, names, sigs: dict) -> str:
    """The instantiation block of ``names`` (sorted by kernel) for ``module`` (an ops module)."""
    by_kernel: dict = {}
    for name in names:
        kernel, args = name.split("<", 1)
        by_kernel.setdefault(kernel, []).append(args[:-1])
    lines = [f"// What CI's nvcc build type-checks: {module.__name__}.instantiations()",
             GUARD]
    for kernel, arg_list in sorted(by_kernel.items()):
        macro = f"TC_I_{kernel.upper()}"
        define = f"#define {macro}(...) template __global__ void {kernel}<__VA_ARGS__>("
        lines += _wrap(define, sigs[kernel].split(", "), ");", 100, "    ", " \\")
        calls, line = [], ""
        for args in arg_list:
            call = f"{macro}({args})"
            if line and len(line) + 1 + len(call) > 100:
                calls.append(line)
                line = call
            else:
                line = f"{line} {call}" if line else call
        lines += calls + [line, f"#undef {macro}"]
    lines.append("#endif")
    return "\n".join(lines) + "\n"


def _wrap(head: str, items, tail: str, width: int, indent: str, cont: str) -> list:
    out, line = [], head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else tail)
        if len(line) + 1 + len(piece) + len(cont) > width and line.strip():
            out.append(line + cont)
            line = indent + piece
        else:
            line = line + ("" if line.endswith("(") else " ") + piece
    out.append(line)
    return out


def replace_block(text: str, new_block: str) -> str:
    """``text`` with its instantiation blocks (and a ``// @instantiations`` marker) replaced
    by ``new_block`` at the end."""
    text = re.sub(r"\n*// @instantiations[^\n]*\n?", "\n", text)
    text = re.sub(r"\n*// What CI's nvcc build type-checks[^\n]*\n", "\n", text)
    text = _BLOCK.sub("\n", text).rstrip() + "\n"
    return text + ("\n" + new_block if new_block else "")
