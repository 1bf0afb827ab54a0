"""How a size and a kernel's name are printed, in every output and every sentence (docs/metrics.md, "Units"):
one place, so the analyzers' wording and the renderers' tables agree."""

from __future__ import annotations

import re

IEC = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def size(n: int | None) -> str:
    """Bytes in IEC units: ``25.0 MiB``, ``512 B``; ``?`` when unknown."""
    if n is None:
        return "?"
    for unit, scale in IEC:
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# What a compiler adds to a kernel's name that says nothing of what it does: GCC's and MSVC's spelling of an
# anonymous namespace.
_ANONYMOUS = ("(anonymous namespace)::", "`anonymous namespace'::")
# A kernel whose own name is generic (CUTLASS's Kernel2, device_kernel) is named by its first template argument.
_GENERIC = re.compile(r"(device_)?[Kk]ernel\d*")
KERNEL_WIDTH = 60


def kernel_name(name: str, width: int = KERNEL_WIDTH) -> str:
    """A kernel's name as a person shortens it, at most ``width`` characters: a C++ signature loses its
    return type (``void``), its parameters and anonymous namespaces; then, while it is too long, its template
    arguments and its namespaces, outermost first (a generic ``cutlass::Kernel<X>`` is named by ``X``); the
    function's own name is cut last, with an ellipsis.
    ``void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, …)`` is
    ``fbgemm_gpu::_compute_FP8_quantize_cuda_kernel<float>``."""
    for anonymous in _ANONYMOUS:
        name = name.replace(anonymous, "")
    head = _signature_name(name.strip()) or name.strip()
    if len(head) > width:
        bare = _without_templates(head) or head
        if _GENERIC.fullmatch(_split_scopes(bare)[-1]) and "<" in head:
            first = _without_templates(_split_top(head[head.index("<") + 1:head.rindex(">")], ",")[0].strip())
            named = f"{bare}<{first}>"
            bare = named if len(named) <= width or not first else first
        head = bare
    scopes = _split_scopes(head)
    while len(head) > width and len(scopes) > 1:
        scopes = scopes[1:]
        head = "::".join(scopes)
    return cut(head, width)


def cut(text: str, width: int) -> str:
    """``text`` at most ``width`` characters, an ellipsis where it was cut."""
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _signature_name(name: str) -> str:
    """The qualified name of a C++ signature (its return type and parameters left out); a name that is not one
    (``Memset (Device)``: no parameter list right after a name) only without a leading ``void``."""
    depth = 0
    for i, ch in enumerate(name):
        if ch in "<(":
            if ch == "(" and depth == 0 and i and (name[i - 1].isalnum() or name[i - 1] in "_>"):
                return _split_top(name[:i], " ")[-1]
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
    return name.removeprefix("void ")


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at every ``sep`` outside template arguments and parentheses (empty pieces left out)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [piece for piece in out if piece] or [text]


def _split_scopes(name: str) -> list[str]:
    """``a::b<c::d>::f`` -> ``["a", "b<c::d>", "f"]``: the scopes outside template arguments."""
    return _split_top(name.replace("::", "\0"), "\0")


def _without_templates(name: str) -> str:
    """The name with every template argument list left out: ``a<int>::f<4, b<c>>`` -> ``a::f``."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)
