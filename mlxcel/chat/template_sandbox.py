"""The sandbox chat templates render in. A template is untrusted input (it comes from a
model file or an operator's file): it runs in jinja2's immutable sandbox, where unsafe
attribute access raises instead of rendering empty; string and list blow-ups through
``*``, ``**``, ``+``, ``~``, ``%``, padding, ``replace``, ``join``, ``indent``, format
widths and literals are refused before they allocate; and a render is stopped at its next
loop step or call once its deadline (`render_deadline`) has passed."""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime
from functools import wraps
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import loopcontrols
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import Namespace, generate_lorem_ipsum

MAX_OUTPUT_CHARS = 8 * 1024 * 1024
_MAX_POW_BITS = 1 << 16
_MAX_LIPSUM_PARAGRAPHS = 100
_MAX_JSON_INDENT = 1024  # each line of tojson's output repeats it once per nesting level
_FORMAT_WIDTH = re.compile(r"\d+")  # widths and precisions in a %- or {}-format string


class TemplateError(ValueError):
    """A chat template failed to compile or render; the message says why."""


class TemplateTimeout(TemplateError):
    """A render ran past its deadline (`render_deadline`)."""


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> str:
    """JSON without HTML or ASCII escaping, as transformers' chat templates expect."""
    indent_chars = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if indent_chars > _MAX_JSON_INDENT or _text_too_big(value):
        raise TemplateError("chat template error: tojson result too large")
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _too_big(size: int) -> bool:
    return size > MAX_OUTPUT_CHARS


_render_deadline = threading.local()  # `at`, `seconds`: when the render on this thread must have ended


@contextlib.contextmanager
def render_deadline(seconds: float) -> Iterator[None]:
    """Renders on this thread inside the block stop with `TemplateTimeout` once `seconds` pass."""
    _render_deadline.at, _render_deadline.seconds = time.monotonic() + seconds, seconds
    try:
        yield
    finally:
        _render_deadline.at = None


def _check_deadline() -> None:
    deadline = getattr(_render_deadline, "at", None)
    if deadline is not None and time.monotonic() > deadline:
        raise TemplateTimeout(f"chat template error: rendering took longer than {_render_deadline.seconds:g} s")


def _held(value: Any) -> Collection[Any] | None:
    """What a container holds (a mapping's keys and values, a namespace's values), or
    None for a value that holds nothing."""
    if isinstance(value, Mapping):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return value
    if isinstance(value, Namespace):  # its attributes live in a private dict
        return list(object.__getattribute__(value, "_Namespace__attrs").values())
    return None


def _text_too_big(value: Any) -> bool:
    """Whether ``str(value)`` would pass the output cap: containers are walked, not
    printed, so one holding the same long string many times is caught before it is built."""
    budget = MAX_OUTPUT_CHARS
    pending = [value]
    while pending:
        item = pending.pop()
        held = _held(item)
        if isinstance(item, str):
            budget -= len(item) + 4  # quotes and a separator, as a container prints it
        elif held is not None:
            budget -= 2 * len(held) + 2
            pending.extend(held)
        else:
            budget -= 24  # a number, None, a bool: short
        if budget < 0:
            return True
    return False


def _content_size(value: Any) -> int:
    """The characters of the strings `value` holds, each container counting at least 1
    and each other value 1, every alias of a string counted again (walked only until
    past the output cap): what a list repeated, joined or written out in a literal multiplies."""
    size, pending = 0, [value]
    while pending and size <= MAX_OUTPUT_CHARS:
        item = pending.pop()
        held = _held(item)
        if isinstance(item, str):
            size += len(item)
        elif held is not None:
            size += 0 if held else 1
            pending.extend(held)
        else:
            size += 1
    return size


def _format_too_big(fmt: str, values: Iterable[Any]) -> bool:
    """A %- or {}-format whose width or precision (written, or given as an argument:
    ``%*s``, ``{:{}}``) is too large, or whose arguments print too large."""
    if any(_too_big(int(digits)) for digits in _FORMAT_WIDTH.findall(fmt)):
        return True
    values = list(values)
    takes_width = "*" in fmt or "{" in fmt
    return any(takes_width and isinstance(value, int) and _too_big(value) for value in values) or _text_too_big(values)


def _replaced_size(text: str, old: str, new: str) -> int:
    return len(text) + (text.count(old) if old else len(text) + 1) * len(new)


def _joined_too_big(separator: str, items: Any) -> bool:
    if not isinstance(items, (str, list, tuple, dict, range)):
        return False
    return _too_big(len(separator) * len(items)) or _text_too_big(items)


def _summed_too_big(items: Any, start: Any) -> bool:
    """``|sum(start=[])`` over lists builds one list as long as all of them."""
    if not isinstance(items, (list, tuple)) or not isinstance(start, (list, tuple)):
        return False
    return _too_big(len(start) + sum(len(item) for item in items if isinstance(item, (list, tuple, str))))


def _sized(items: Any) -> Any:
    """An iterator (``|map``, ``|select``) as a list, so what it holds can be measured."""
    return list(items) if isinstance(items, Iterator) else items


def _str_call_too_big(text: str, method: str, args: tuple, kwargs: dict) -> bool:
    """Whether calling `text`'s `method` would build a string past the output cap."""
    first = args[0] if args else next(iter(kwargs.values()), None)
    if method in ("ljust", "rjust", "center", "zfill"):
        return isinstance(first, int) and _too_big(first)
    if method == "expandtabs":
        return isinstance(first, int) and _too_big(len(text) + text.count("\t") * first)
    if method == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        return _too_big(_replaced_size(text, args[0], args[1]))
    if method == "join":
        return _joined_too_big(text, first)
    if method in ("format", "format_map"):
        return _format_too_big(text, [*args, *kwargs.values()])
    return False


def _indented_size(text: Any, width: Any = 4, *_: Any, **__: Any) -> int:
    per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    return len(str(text)) + (str(text).count("\n") + 1) * per_line


# filters that can build a string (or list) far larger than their input: whether each would
_FILTER_TOO_BIG: dict[str, Callable[..., bool]] = {
    "center": lambda text, width=80, *_, **__: isinstance(width, int) and _too_big(width),
    "indent": lambda *args, **kwargs: _too_big(_indented_size(*args, **kwargs)),
    "replace": lambda text, old, new, *_, **__: _too_big(_replaced_size(str(text), str(old), str(new))),
    "join": lambda items, d="", *_, **__: _joined_too_big(str(d), items),
    "format": lambda text, *args, **kwargs: _format_too_big(str(text), [*args, *kwargs.values()]),
    "string": lambda value, *_, **__: _text_too_big(value),
    "pprint": lambda value, *_, **__: _text_too_big(value),
    "sum": lambda items, attribute=None, start=0, *_, **__: _summed_too_big(items, start),
    # lists as long as their count argument: a filled last batch, and one per slice
    "batch": lambda items, linecount, fill_with=None, *_, **__: (fill_with is not None and isinstance(linecount, int)
                                                               and _too_big(linecount)),
    "slice": lambda items, slices, *_, **__: isinstance(slices, int) and _too_big(slices),
}


def _sized_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` refusing, before it runs, to build a string past the output cap."""
    too_big = _FILTER_TOO_BIG[name]
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0  # its context/environment comes first

    @wraps(fn)
    def sized(*args: Any, **kwargs: Any) -> Any:
        _check_deadline()
        if len(args) > skip:
            args = (*args[:skip], _sized(args[skip]), *args[skip + 1:])
        try:
            refused = too_big(*args[skip:], **kwargs)
        except TypeError:  # arguments the filter itself will refuse
            refused = False
        if refused:
            raise TemplateError(f"chat template error: {name} result too large")
        return fn(*args, **kwargs)

    return sized


def _sized_map(fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """``|map`` stopping once what it has produced passes the output cap: each item a
    filter makes may be large, and ``|list`` keeps them all."""

    @wraps(fn)
    def sized_map(*args: Any, **kwargs: Any) -> Iterator[Any]:
        produced = 0
        for item in fn(*args, **kwargs):
            produced += _content_size(item)
            if _too_big(produced):
                raise TemplateError("chat template error: map result too large")
            yield item

    return sized_map


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002 - jinja's names
    if not isinstance(n, int) or n > _MAX_LIPSUM_PARAGRAPHS or not isinstance(max, int) or max > 1000:
        raise TemplateError("chat template error: lipsum result too large")
    return generate_lorem_ipsum(n, html, min, max)


class _ChatTemplateCodeGenerator(CodeGenerator):
    """Compiles each loop to check the render's deadline at every step, ``~`` to size its
    result before joining (as ``+`` is), and each list, tuple and dict literal to size
    what it holds."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        node.iter = nodes.Call(nodes.EnvironmentAttribute("timed_iter"), [node.iter], [], None, None)
        super().visit_For(node, frame)

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self._sized(super().visit_List, node, frame)

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx == "store":  # the names a loop or a set assigns to
            super().visit_Tuple(node, frame)
        else:
            self._sized(super().visit_Tuple, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self._sized(super().visit_Dict, node, frame)

    def _sized(self, visit: Callable[[Any, Frame], None], node: nodes.Node, frame: Frame) -> None:
        """A literal, checked when built: ``[a, a, a]`` holds `a` three times."""
        self.write("environment.sized_literal(")
        visit(node, frame)
        self.write(")")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.join_operands((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _ChatTemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, made strict about unsafe attributes, size blow-ups and endless renders."""

    code_generator_class = _ChatTemplateCodeGenerator
    intercepted_binops = frozenset(["*", "**", "+", "%"])

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def timed_iter(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            _check_deadline()
            yield item

    def sized_literal(self, value: Any) -> Any:
        if _too_big(_content_size(value)):
            raise TemplateError("chat template error: literal result too large")
        return value

    def join_operands(self, values: tuple[Any, ...]) -> str:
        """``a ~ b ~ c``."""
        if _text_too_big(values):
            raise TemplateError("chat template error: concatenation result too large")
        return markup_join(values) if any(hasattr(value, "__html__") for value in values) else str_join(values)

    def concat(self, pieces: Iterable[str]) -> str:
        """jinja's join of every buffered output (a macro's body, a recursive loop's, a set
        block's, a block's), sized first."""
        pieces = list(pieces)  # a block's output comes as a generator
        if _text_too_big(pieces):
            raise TemplateError("chat template error: concatenation result too large")
        return "".join(pieces)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_deadline()
        target = getattr(__obj, "__wrapped__", __obj)  # str.format arrives wrapped by the sandbox
        owner = getattr(target, "__self__", None)
        method = getattr(target, "__name__", "")
        if isinstance(owner, str) and method == "join" and args:
            args = (_sized(args[0]), *args[1:])
        if __obj in (dict, Namespace) and _too_big(_content_size([*args, *kwargs.values()])):
            raise TemplateError(f"chat template error: {__obj.__name__.lower()} result too large")
        if isinstance(owner, str) and _str_call_too_big(owner, method, args, kwargs):
            raise TemplateError(f"chat template error: {method} result too large")
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        _check_deadline()
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int) and count > 0:
                    if _too_big(len(seq) * count) or _too_big(_content_size(seq) * count):
                        raise TemplateError("chat template error: repetition result too large")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                if right * math.log2(abs(left)) > _MAX_POW_BITS:
                    raise TemplateError("chat template error: power result too large")
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                if _too_big(len(left) + len(right)) or _too_big(_content_size(left) + _content_size(right)):
                    raise TemplateError("chat template error: concatenation result too large")
        elif operator == "%":
            if isinstance(left, str) and _format_too_big(left, right if isinstance(right, tuple) else (right,)):
                raise TemplateError("chat template error: format result too large")
        return super().call_binop(context, operator, left, right)


def _printable(value: Any) -> Any:
    """What ``{{ value }}`` prints, refused when printing it would pass the output cap."""
    if isinstance(value, (list, tuple, set, frozenset, Mapping)) and _text_too_big(value):
        raise TemplateError("chat template error: printed value too large")
    return value


def make_environment() -> jinja2.Environment:
    """The sandboxed environment every chat template compiles in."""
    env = _ChatTemplateEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols],
                                   finalize=_printable)
    env.filters["tojson"] = _tojson
    for name in _FILTER_TOO_BIG:
        env.filters[name] = _sized_filter(name, env.filters[name])
    env.filters["map"] = _sized_map(env.filters["map"])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["lipsum"] = _lipsum
    return env
