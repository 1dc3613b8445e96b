"""TensorRT 11's real Python bindings on a machine without its libraries, to hold inferbench's TensorRT code to them.

The bindings (``tensorrt-cu13-bindings``, a real wheel on PyPI) are one pybind11 module that needs three of
TensorRT's libraries at load time; those download only from NVIDIA's own server. The module calls nine of their
functions (the factories of a builder, a runtime, a parser, a refitter, and the plugin registries) and nothing else,
so :func:`bindings` loads stand-ins that export those nine, each returning null (a builder made on them fails at
once: "factory function returned nullptr"). Every class, method, property and enum is then the real module's.

:class:`Checked` is an object of a real TensorRT class with no library behind it: each attribute read must exist on
that class, each call must match one of the signatures the bindings declare (pybind11 writes them into every
docstring: argument names, count and types), each property set must be settable, and what comes back is a value of
the declared return type (an object of a TensorRT class is another ``Checked``), or the test's answer."""

from __future__ import annotations

import ctypes
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The nine functions of TensorRT's libraries that the bindings call (``nm -D --undefined-only tensorrt.so``).
_STUBS = {
    "nvinfer": ["void *createInferBuilder_INTERNAL(void *l, int v)",
                "void *createInferRuntime_INTERNAL(void *l, int v)",
                "void *createInferRefitter_INTERNAL(void *e, void *l, int v)",
                "void *getBuilderPluginRegistry(int c)", "void *getPluginRegistry(void)"],
    "nvinfer_plugin": ["void *initLibNvInferPlugins(void *l, const char *n)"],
    "nvonnxparser": ["void *createNvOnnxParser_INTERNAL(void *n, void *l, int v)",
                     "void *createNvOnnxParserRefitter_INTERNAL(void *r, void *l, int v)",
                     "void *getNvOnnxParserVersion(void)"],
}


def bindings(folder: Path) -> Any:
    """The real ``tensorrt_bindings`` module, its libraries' nine functions stood in for (built with gcc in
    ``folder``)."""
    for lib, functions in _STUBS.items():
        so = folder / f"lib{lib}.so.11"
        if not so.exists():
            source = folder / f"{lib}.c"
            source.write_text("".join(f"{f} {{ return 0; }}\n" for f in functions))
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), f"-Wl,-soname,{so.name}", str(source)],
                           check=True, capture_output=True)
        ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)  # the loader then finds the soname the bindings need
    import tensorrt_bindings

    return tensorrt_bindings


_SIGNATURE = re.compile(r"^(?:\d+\. )?\w+\((.*)\) -> (.+)$", re.M)


def _split(params: str) -> list[str]:
    """A signature's parameters, split at the commas outside brackets and quotes."""
    out, depth, quoted, start = [], 0, False, 0
    for i, c in enumerate(params):
        quoted = not quoted if c == '"' else quoted
        depth += (c in "[(") - (c in "])") if not quoted else 0
        if c == "," and depth == 0 and not quoted:
            out.append(params[start:i].strip())
            start = i + 1
    return [p for p in (*out, params[start:].strip()) if p]


def signatures(doc: str) -> list[tuple[list[tuple[str, str, bool]], str]]:
    """Each overload a pybind11 docstring declares: its parameters (name, type, has a default) after ``self``, and
    its return type."""
    found = []
    for params, returns in _SIGNATURE.findall(doc or ""):
        parsed = []
        for p in _split(params)[1:]:
            head, _, default = p.partition(" = ")
            name, _, kind = head.partition(": ")
            parsed.append((name.strip(), kind.strip(), bool(default)))
        found.append((parsed, returns.strip()))
    return found


class Checked:
    """An object of the real TensorRT class ``cls`` (its methods and properties only; no library behind it)."""

    def __init__(self, trt: Any, cls: type, answers: dict[str, Any], calls: list[str]) -> None:
        object.__setattr__(self, "_c", (trt, cls, answers, calls))

    def _member(self, name: str) -> Any:
        trt, cls, _, _ = self._c
        for klass in cls.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
        raise AttributeError(f"TensorRT {trt.__version__}: {cls.__name__} has no {name}")

    def __getattr__(self, name: str) -> Any:
        trt, cls, answers, calls = self._c
        member, key = self._member(name), f"{cls.__name__}.{name}"
        if isinstance(member, property):
            calls.append(key)
            returns = signatures(f"x{member.fget.__doc__}")[0][1]
            return answers[key] if key in answers else value_of(trt, returns, answers, calls)
        return lambda *args, **kwargs: call(trt, key, member.__doc__, args, kwargs, answers, calls)

    def __setattr__(self, name: str, value: Any) -> None:
        trt, cls, _, calls = self._c
        member = self._member(name)
        if not isinstance(member, property) or member.fset is None:
            raise AttributeError(f"TensorRT {trt.__version__}: {cls.__name__}.{name} cannot be set")
        kind = signatures(f"x{member.fset.__doc__}")[0][0][0][1]
        if not accepts(trt, kind, value):
            raise TypeError(f"{cls.__name__}.{name} takes {kind}, not {value!r}")
        calls.append(f"{cls.__name__}.{name}=")


def call(trt: Any, key: str, doc: str, args: tuple, kwargs: dict, answers: dict[str, Any], calls: list[str]) -> Any:
    """A call of the method ``key`` checked against its overloads: the first whose parameters take the arguments."""
    for params, returns in signatures(doc):
        names = [p[0] for p in params]
        given = dict(zip(names, args)) | kwargs
        if (len(args) <= len(params) and set(kwargs) <= set(names) and not set(kwargs) & set(names[:len(args)])
                and all(p[0] in given or p[2] for p in params)
                and all(accepts(trt, kind, given[name]) for name, kind, _ in params if name in given)):
            calls.append(key)
            answer = answers.get(key)
            return answer(*args, **kwargs) if callable(answer) else answer if key in answers else \
                value_of(trt, returns, answers, calls)
    raise TypeError(f"TensorRT {trt.__version__}: no overload of {key} takes {args} {kwargs}; it declares "
                    + " | ".join(f"({', '.join(f'{n}: {k}' for n, k, _ in ps)})" for ps, _ in signatures(doc)))


def _trt_class(trt: Any, kind: str) -> type | None:
    name = kind.removeprefix("tensorrt_bindings.tensorrt.")
    return getattr(trt, name, None) if name != kind and "[" not in name else None


def accepts(trt: Any, kind: str, value: Any) -> bool:
    """Whether pybind11 would take ``value`` for a parameter declared ``kind`` (TensorRT's classes and enums by
    type; numbers, flags and strings by Python type; anything else is taken)."""
    cls = _trt_class(trt, kind)
    if cls is not None:
        if cls.__name__ == "Dims" or cls.__name__.startswith("Dims"):
            return isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value) or isinstance(value, cls)
        ours = value._c[1] if isinstance(value, Checked) else type(value)
        return isinstance(ours, type) and issubclass(ours, cls)
    simple: dict[str, Callable[[Any], bool]] = {
        "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str),
        "typing.SupportsInt": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "typing.SupportsFloat": lambda v: isinstance(v, (int, float)), "float": lambda v: isinstance(v, (int, float)),
        "bytes": lambda v: isinstance(v, (bytes, bytearray, memoryview)),
        "collections.abc.Buffer": lambda v: isinstance(v, (bytes, bytearray, memoryview))}
    return simple.get(kind, lambda v: True)(value)


def value_of(trt: Any, kind: str, answers: dict[str, Any], calls: list[str]) -> Any:
    """A value of the declared return type ``kind``: an object of a TensorRT class is a :class:`Checked` one."""
    cls = _trt_class(trt, kind)
    if cls is not None:
        return Checked(trt, cls, answers, calls)
    return {"bool": True, "int": 1, "str": "", "float": 1.0, "None": None}.get(kind)


class Module:
    """The real module, with the classes that need TensorRT's libraries to be made (``made``) made as
    :class:`Checked` objects, their constructor's signature checked."""

    def __init__(self, trt: Any, made: tuple[str, ...], answers: dict[str, Any], calls: list[str]) -> None:
        self._trt, self._made, self._answers, self.calls = trt, made, answers, calls

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._trt, name)
        if name not in self._made:
            return real

        def make(*args: Any, **kwargs: Any) -> Checked:
            call(self._trt, f"{name}.__init__", real.__init__.__doc__, args, kwargs, {f"{name}.__init__": None},
                 self.calls)
            return Checked(self._trt, real, self._answers, self.calls)

        return make
